"""For tools that look inside checkpoints and measure saves (gdsbench among them), not for training jobs:
a file's validated index, what a save and a load report, and the tensors a state dict holds."""

from typing import TYPE_CHECKING, Any

from .format import Index, StorageEntry, read_index
from .load import Loaded
from .save import Saved
from .tree import named_tensors

if TYPE_CHECKING:
    from .dcp import WriteStats


def __getattr__(name: str) -> Any:
    """WriteStats (a DCP Writer's counters), imported on first use with the DCP layer."""
    if name == "WriteStats":
        from .dcp import WriteStats

        return WriteStats
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Index", "Loaded", "Saved", "StorageEntry", "WriteStats", "named_tensors", "read_index"]
