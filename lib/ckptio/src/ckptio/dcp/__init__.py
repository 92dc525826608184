"""A storage layer for torch.distributed.checkpoint on ckptio's fast engine: Writer and Reader.

Imported on first use from ckptio (DCP's import is heavy, and plain save/load never need it).
"""

from .reader import Reader
from .records import ItemRecord
from .writer import Writer, WriteStats

__all__ = ["ItemRecord", "Reader", "WriteStats", "Writer"]
