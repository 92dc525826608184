"""A whole checkpoint file checked against the checksums it was saved with, without building its object: what a
TieredCheckpointer's drain proves of tier 0's copy before it calls a later tier's copy durable."""

from __future__ import annotations

import os
from dataclasses import replace

from . import format as fmt
from . import integrity
from .read import _need, check_chunk, chunk_size
from .unpickle import read_pickle


def verify_file(path: str, name: str | None = None) -> fmt.Index:
    """Read `path` whole (index, object record, every chunk of every storage) and check each against its digest;
    the errors (InvalidCheckpoint, TruncatedCheckpoint, CorruptCheckpoint) name `name`. A file saved without
    checksums is checked for its structure and length only."""
    fd = fmt.open_file(path)
    try:
        index = replace(fmt.parse_index(name or path, fd), data_path=f"/proc/self/fd/{fd}")
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        read_pickle(index, verify=True)
        for s in index.storages:
            for k in range(integrity.chunk_count(s.nbytes, index.chunk_bytes)):
                need, at = chunk_size(index, s, k), s.offset + k * index.chunk_bytes
                data = os.pread(fd, need, at)
                _need(index, len(data), at, need)
                check_chunk(index, s, k, memoryview(data))
        return index
    finally:
        os.close(fd)
