"""gdsbench.checkpoint: fast, durable, verifiable PyTorch checkpoints that torch.load can read.

from gdsbench.checkpoint import save, load
save(model.state_dict(), "ckpt.pt")          # O_DIRECT, parallel, fsync + atomic rename
state = load("ckpt.pt")                       # parallel reads into huge-page memory, verified
torch.load("ckpt.pt", weights_only=True)      # also works: the file is torch's zip format
"""

from .errors import (
    BackendUnavailable,
    CheckpointError,
    CorruptCheckpoint,
    DirectIOFallbackWarning,
    InvalidCheckpoint,
    TruncatedCheckpoint,
)
from .format import Index, StorageEntry, read_index
from .load import load
from .save import save

__all__ = [
    "BackendUnavailable",
    "CheckpointError",
    "CorruptCheckpoint",
    "DirectIOFallbackWarning",
    "Index",
    "InvalidCheckpoint",
    "StorageEntry",
    "TruncatedCheckpoint",
    "load",
    "read_index",
    "save",
]
