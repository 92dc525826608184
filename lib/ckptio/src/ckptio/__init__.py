"""ckptio: fast, durable, verifiable PyTorch checkpoints that torch.load can read.

    import ckptio
    ckptio.save(model.state_dict(), "ckpt.pt")            # O_DIRECT, parallel, fsync + atomic rename
    state = ckptio.load("ckpt.pt")                        # parallel reads into new memory, verified
    ckptio.load_into("ckpt.pt", model.state_dict())       # fill existing tensors in place
    with ckptio.Checkpointer("ckpt.pt", options=ckptio.IOOptions(threads=8)) as ckpt:   # repeated saves
        ckpt.save(model.state_dict())
    with ckptio.TieredCheckpointer(["/local/ckpt", "s3://bucket/run"]) as ckpt:      # local, drained to S3
        ckpt.save(model.state_dict(), step, blocking=False)
    torch.load("ckpt.pt", weights_only=True)              # also works: the file is torch's zip format

    dcp.save(state_dict, storage_writer=ckptio.Writer("ckpt/"))   # torch.distributed.checkpoint, our storage
    dcp.load(state_dict, storage_reader=ckptio.Reader("ckpt/"))

The public surface: the names below, the named errors in `ckptio.errors`, what the calls return in
`ckptio.records`, the codec names in `ckptio.codec`, and `ckptio.inspect` for tools that look inside checkpoints. docs/api.md describes the calls; docs/format.md
the file. Nothing else is public.
"""

from typing import TYPE_CHECKING, Any

from .errors import CheckpointError
from .options import IOOptions

if TYPE_CHECKING:  # imported on first use at run time (__getattr__); seen whole by type checkers
    from .api import load, load_into, load_mmap, save
    from .dcp import Reader, Writer
    from .manager import Checkpointer
    from .tiers import TieredCheckpointer

#: The names that need torch, by the module that has them: imported on first use, so `from ckptio import
#: IOOptions` (a tool reading the options' fields) costs no torch import.
_LAZY = {
    "load": "api",
    "load_into": "api",
    "load_mmap": "api",
    "save": "api",
    "Checkpointer": "manager",
    "TieredCheckpointer": "tiers",
    "Reader": "dcp",
    "Writer": "dcp",
}


def __getattr__(name: str) -> Any:
    """A name that needs torch, imported on first use (torch.distributed.checkpoint is heavy to import)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CheckpointError",
    "Checkpointer",
    "IOOptions",
    "Reader",
    "TieredCheckpointer",
    "Writer",
    "load",
    "load_into",
    "load_mmap",
    "save",
]
