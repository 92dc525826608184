"""The leaf of the DCP layer: what a ckptio DCP checkpoint directory holds, named.

A checkpoint is a directory: one data file per rank and save, `<save_id>-r<rank>.data`, and DCP's
`.metadata`. Every saved item (a tensor shard, or DCP's pickled bytes) lies in chunks of its raw bytes, each
chunk independently decodable and checksummed; its ItemRecord (DCP's `storage_data` for the item) says where
each chunk is, how it was encoded and what its stored bytes hash to. metadata.py reads and writes `.metadata`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

METADATA = ".metadata"
DATA_NAME = re.compile(r"(?P<save>[0-9a-f]{32})-r(?P<rank>\d{1,7})\.data")
TEMP_NAME = re.compile(r"\.metadata\.[0-9a-f]{32}\.tmp")
FORMAT_V1 = "gdsbench-dcp/1"  # .metadata is a bare pickle (read for compatibility: no metadata digest)
FORMAT_V2 = "gdsbench-dcp/2"  # .metadata is the pickle + SEAL_MAGIC + SHA-256 of the pickle (gdsbench 0.1)
FORMAT = "ckptio-dcp/2"  # as v2, under the library's own name; still every record's format (its layout is unchanged)
FORMATS = (FORMAT_V1, FORMAT_V2, FORMAT)
LEGACY_ITEM_RECORD = "gdsbench.checkpoint.dcp.records.ItemRecord"  # ItemRecord's pickled name in gdsbench 0.1
SEAL_MAGIC = b"GDSDCP02"  # the seal of a pickled payload (formats 2)
SEAL_MAGIC_V3 = b"CKPTDC03"  # the seal of a format-3 payload (table.py)
SEAL_BYTES = len(SEAL_MAGIC) + hashlib.sha256().digest_size


@dataclass(frozen=True)
class ItemRecord:
    """Where one saved item's bytes lie and how to turn them back into the item.

    chunks[k] is (file offset, stored length) of raw bytes [k * chunk_bytes, (k + 1) * chunk_bytes);
    digests[k] hashes those stored bytes with `checksum`. `shape` is the saved chunk's sizes (empty
    for DCP's byte items, whose dtype is "")."""

    file: str
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    codec: str
    chunk_bytes: int
    chunks: tuple[tuple[int, int], ...]
    digests: tuple[str, ...]
    checksum: str
    format: str = FORMAT

    @property
    def stored_bytes(self) -> int:
        """Bytes the item takes on disk (before 4 KiB padding)."""
        return sum(length for _, length in self.chunks)


def data_file(save_id: str, rank: int) -> str:
    """A rank's data file of one save (a name no earlier save used)."""
    return f"{save_id}-r{rank}.data"
