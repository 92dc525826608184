"""For tools that look inside checkpoints and measure saves (gdsbench among them), not for training jobs:
a file's validated index, what a save and a load report, the tensors a state dict holds, and a DCP
checkpoint's per-item record and data-file name (for tools that read or model DCP metadata)."""

from typing import TYPE_CHECKING, Any

from .format import Index, StorageEntry, read_index
from .loading import Loaded
from .saving import Saved
from .tree import named_tensors

if TYPE_CHECKING:
    from .dcp import WriteStats
    from .dcp.records import ItemRecord, data_file

#: The names that live in the DCP layer, imported on first use (with torch.distributed.checkpoint).
_DCP_NAMES = {"WriteStats": "ckptio.dcp", "ItemRecord": "ckptio.dcp.records", "data_file": "ckptio.dcp.records"}


def __getattr__(name: str) -> Any:
    """WriteStats (a DCP Writer's counters), ItemRecord and data_file (a DCP checkpoint's per-item record and
    its data files' names), imported on first use with the DCP layer."""
    if name in _DCP_NAMES:
        import importlib

        return getattr(importlib.import_module(_DCP_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Index",
    "ItemRecord",
    "Loaded",
    "Saved",
    "StorageEntry",
    "WriteStats",
    "data_file",
    "named_tensors",
    "read_index",
]
