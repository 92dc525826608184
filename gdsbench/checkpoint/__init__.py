"""gdsbench.checkpoint: fast, durable, verifiable PyTorch checkpoints that torch.load can read.

    from gdsbench.checkpoint import save, load, load_into, Checkpointer, IOOptions
    save(model.state_dict(), "ckpt.pt")            # O_DIRECT, parallel, fsync + atomic rename
    state = load("ckpt.pt")                        # parallel reads into new memory, verified
    load_into("ckpt.pt", model.state_dict())       # fill existing tensors in place
    with Checkpointer("ckpt.pt", options=IOOptions(threads=8)) as ckpt:   # repeated saves of one path
        ckpt.save(model.state_dict())
    torch.load("ckpt.pt", weights_only=True)       # also works: the file is torch's zip format

    dcp.save(state_dict, storage_writer=Writer("ckpt/"))   # torch.distributed.checkpoint, our storage
    dcp.load(state_dict, storage_reader=Reader("ckpt/"))

docs/api.md describes the calls; docs/format.md the file. Nothing else is public.
"""

from typing import Any

from . import codec
from .api import load, load_into, load_mmap, save
from .errors import (
    AsyncSaveFailed,
    BackendUnavailable,
    CheckpointBusy,
    CheckpointError,
    CorruptCheckpoint,
    DirectIOFallbackWarning,
    InvalidCheckpoint,
    OptionError,
    StateDictMismatch,
    StorageFull,
    TruncatedCheckpoint,
    UnsafeObject,
    unwrap,
)
from .format import Index, StorageEntry, read_index
from .load import Loaded
from .manager import Checkpointer
from .options import IOOptions
from .save import Saved
from .tree import named_tensors

_DCP = ("Reader", "Writer", "WriteStats")


def __getattr__(name: str) -> Any:
    """The DCP storage layer, imported on first use (torch.distributed.checkpoint is heavy to import)."""
    if name in _DCP:
        from . import dcp

        return getattr(dcp, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AsyncSaveFailed",
    "BackendUnavailable",
    "CheckpointBusy",
    "CheckpointError",
    "Checkpointer",
    "CorruptCheckpoint",
    "DirectIOFallbackWarning",
    "IOOptions",
    "Index",
    "InvalidCheckpoint",
    "Loaded",
    "OptionError",
    "Reader",
    "Saved",
    "StateDictMismatch",
    "StorageEntry",
    "StorageFull",
    "TruncatedCheckpoint",
    "UnsafeObject",
    "WriteStats",
    "Writer",
    "codec",
    "load",
    "load_into",
    "load_mmap",
    "named_tensors",
    "read_index",
    "save",
    "unwrap",
]
