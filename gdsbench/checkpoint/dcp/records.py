"""What a DCP checkpoint written by gdsbench's Writer holds, and how it is committed.

A checkpoint is a directory: one data file per rank and save, `<save_id>-r<rank>.data`, and
DCP's `.metadata`. Every saved item (a tensor shard, or DCP's pickled bytes) lies in chunks of its
raw bytes, each chunk independently decodable and checksummed; its ItemRecord (DCP's
`storage_data` for the item, pickled into `.metadata`) says where each chunk is, how it was
encoded and what its stored bytes hash to.

Commit protocol: a save writes only new file names (its own save id), so nothing the current
`.metadata` refers to is touched; each rank fsyncs its data file and the directory before its
write results reach the coordinator; the coordinator then writes `.metadata` under a temporary name,
fsyncs it, renames it into place and fsyncs the directory. Only then are the data files of earlier
saves (and of saves that died half-way) removed. An interrupted save or overwrite therefore leaves the
previous checkpoint loadable; a torn or flipped chunk is refused when read (CorruptCheckpoint names
the file and tensor). `.metadata` is read with torch's weights-only unpickler and an allowlist of
DCP's metadata classes: loading a checkpoint never runs arbitrary pickled code.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..durable import fsync_dir
from ..errors import InvalidCheckpoint

METADATA = ".metadata"
DATA_NAME = re.compile(r"(?P<save>[0-9a-f]{32})-r(?P<rank>\d+)\.data")
TEMP_NAME = re.compile(r"\.metadata\.[0-9a-f]{32}\.tmp")
FORMAT = "gdsbench-dcp/1"


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


def _allowed() -> list[Any]:
    """The classes a checkpoint's .metadata may contain: DCP's metadata types and ItemRecord."""
    from torch.distributed.checkpoint import metadata as md

    names = ["Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata",
             "BytesStorageMetadata", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING"]  # fmt: skip
    return [getattr(md, name) for name in names] + [ItemRecord]


def write_metadata(directory: Path, metadata: Any, save_id: str) -> None:
    """Commit a checkpoint: .metadata written under a temporary name, fsynced, renamed, directory fsynced."""
    tmp = directory / f"{METADATA}.{save_id}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(metadata, f, protocol=2)  # the weights-only unpickler reads protocol 2
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / METADATA)
    fsync_dir(str(directory))


def read_metadata(directory: Path) -> Any:
    """A checkpoint's Metadata, read with the weights-only unpickler (DCP's own reader pickle.loads it)."""
    import torch
    from torch import _weights_only_unpickler as restricted

    path = directory / METADATA
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidCheckpoint(directory, f"no {METADATA}: not a committed checkpoint") from None
    try:
        with torch.serialization.safe_globals(_allowed()):
            metadata = restricted.Unpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, RuntimeError) as e:
        raise InvalidCheckpoint(path, f"metadata refused by the weights-only unpickler: {e}") from None
    if type(metadata).__name__ != "Metadata" or not isinstance(metadata.storage_data, dict):
        raise InvalidCheckpoint(path, "not DCP metadata with storage records")
    return metadata


def referenced_files(metadata: Any) -> set[str]:
    """The data files a committed checkpoint's records point into."""
    return {r.file for r in metadata.storage_data.values() if isinstance(r, ItemRecord)}


def remove_unreferenced(directory: Path, metadata: Any) -> list[str]:
    """After a commit: remove data files of earlier or failed saves, and metadata temp files of saves that
    died committing (gdsbench's names only; files the new metadata points into and anything else in the
    directory are kept). Returns the names removed."""
    keep = referenced_files(metadata)
    removed = []
    for entry in os.scandir(directory):
        ours = DATA_NAME.fullmatch(entry.name) or TEMP_NAME.fullmatch(entry.name)
        if ours and entry.name not in keep and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):  # another rank's cleanup on a shared directory
                os.unlink(entry.path)
            removed.append(entry.name)
    return sorted(removed)
