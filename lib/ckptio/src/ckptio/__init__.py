"""ckptio: fast, durable, verifiable PyTorch checkpoints that torch.load can read.

    import ckptio
    ckptio.save(model.state_dict(), "ckpt.pt")            # O_DIRECT, parallel, fsync + atomic rename
    state = ckptio.load("ckpt.pt")                        # parallel reads into new memory, verified
    ckptio.load_into("ckpt.pt", model.state_dict())       # fill existing tensors in place
    with ckptio.Checkpointer("ckpt.pt", options=ckptio.IOOptions(threads=8)) as ckpt:   # repeated saves
        ckpt.save(model.state_dict())
    torch.load("ckpt.pt", weights_only=True)              # also works: the file is torch's zip format

    dcp.save(state_dict, storage_writer=ckptio.Writer("ckpt/"))   # torch.distributed.checkpoint, our storage
    dcp.load(state_dict, storage_reader=ckptio.Reader("ckpt/"))

The public surface: the names below, the named errors in `ckptio.errors`, the codec names in `ckptio.codec`,
and `ckptio.inspect` for tools that look inside checkpoints. docs/api.md describes the calls; docs/format.md
the file. Nothing else is public.
"""

from typing import TYPE_CHECKING, Any

from .api import load, load_into, load_mmap, save
from .errors import CheckpointError
from .manager import Checkpointer
from .options import IOOptions

if TYPE_CHECKING:  # imported on first use at run time (__getattr__); seen whole by type checkers
    from .dcp import Reader, Writer

_DCP = ("Reader", "Writer")


def __getattr__(name: str) -> Any:
    """The DCP storage layer, imported on first use (torch.distributed.checkpoint is heavy to import)."""
    if name in _DCP:
        from . import dcp

        return getattr(dcp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CheckpointError", "Checkpointer", "IOOptions", "Reader", "Writer", "load", "load_into", "load_mmap", "save"]
