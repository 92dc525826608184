"""I/O backends: each opens checkpoint files its own way and owns the loop that moves their bytes.

The engines (saving.py, loading.py) decide *what* goes *where*: a list of pieces, each a file range with
the memory its bytes come from or go to and a callback that sees the bytes (checksums, placement).
A backend decides *how*: open flags, alignment, threads, the system calls, and how the data becomes
durable. Adding a backend (io_uring, a GDS write path) is adding one module and one registry line.

`open_writer` / `open_reader` pick the backend an IOOptions asks for; O_DIRECT refused by the file
system (EINVAL: some FUSE and older tmpfs) falls back to buffered I/O with a DirectIOFallbackWarning.
"""

from __future__ import annotations

import errno
import warnings

from ..errors import BackendUnavailable, DirectIOFallbackWarning
from ..memory import StagingBuffers
from ..options import IOOptions
from . import gds, posix
from .base import Backend, Reader, ReadPiece, WritePiece, Writer, read_full, write_all


def _registry() -> dict[str, Backend]:
    """Every backend by name (gds and posix stay free of each other: only this registry names both)."""
    return {"direct": posix.DIRECT, "buffered": posix.BUFFERED, "gds": gds.BACKEND}


def get(name: str) -> Backend:
    """The backend registered as `name` ('auto' means direct with a buffered fallback)."""
    return _registry()["direct" if name == "auto" else name]


def open_writer(path: str, options: IOOptions, staging: StagingBuffers, existing: bool = False) -> Writer:
    """Create (or reopen, `existing`) `path` with the backend the options ask for, falling back from
    O_DIRECT to buffered I/O where the file system refuses it."""
    if options.backend == "gds":
        raise BackendUnavailable("gds", "saves write from host memory: use backend 'direct' or 'buffered'")
    backend = get(options.backend)
    try:
        return backend.create(path, options, staging, existing)
    except OSError as e:
        if backend.name != "direct" or e.errno != errno.EINVAL:
            raise
    _warn_fallback(path)
    # The O_DIRECT attempt created the file exclusively before its O_DIRECT open was refused: it is ours.
    return get("buffered").create(path, options, staging, existing=True)


def open_reader(path: str, options: IOOptions, staging: StagingBuffers | None, backend_name: str) -> Reader:
    """Open `path` for reading with `backend_name`, falling back from O_DIRECT like open_writer."""
    backend = get(backend_name)
    try:
        return backend.open(path, options, staging)
    except OSError as e:
        if backend.name != "direct" or e.errno != errno.EINVAL:
            raise
    _warn_fallback(path)
    return get("buffered").open(path, options, staging)


def _warn_fallback(path: str) -> None:
    """Say that O_DIRECT was refused and the page cache is used instead."""
    warnings.warn(
        f"O_DIRECT not supported for {path} (EINVAL): using buffered I/O",
        DirectIOFallbackWarning,
        stacklevel=4,
    )


__all__ = [
    "Backend",
    "ReadPiece",
    "Reader",
    "WritePiece",
    "Writer",
    "get",
    "open_reader",
    "open_writer",
    "read_full",
    "write_all",
]
