"""I/O backends: each opens checkpoint files its own way and owns the loop that moves their bytes.

The engines (save.py, load.py) decide *what* goes *where*: a list of pieces, each a file range with
the memory its bytes come from or go to and a callback that sees the bytes (checksums, placement).
A backend decides *how*: open flags, alignment, threads, the system calls, and how the data becomes
durable. Adding a backend (io_uring, a GDS write path) is adding one module and one registry line.

`open_writer` / `open_reader` pick the backend an IOOptions asks for; O_DIRECT refused by the file
system (EINVAL: some FUSE and older tmpfs) falls back to buffered I/O with a DirectIOFallbackWarning.
"""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import BackendUnavailable, DirectIOFallbackWarning
from ..memory import Staging, StagingBuffers
from ..options import IOOptions


@dataclass(frozen=True)
class WritePiece:
    """One file range a save writes.

    Its `nbytes` are either already in CPU memory at `address` (written from there when aligned
    enough) or composed by `fill` at the start of a staging buffer; `seen` gets them before they are
    written (checksums). Only the first `write_nbytes` (padded by `fill` to the alignment) are written
    by this piece: a storage's sub-page tail may travel inside a neighbouring region.

    A piece whose size is known only once composed (a compressed chunk) has `offset` None: the writer
    appends all the bytes `fill` returned after everything reserved, and tells `placed` where.
    """

    offset: int | None
    nbytes: int
    write_nbytes: int
    address: int | None
    fill: Callable[[Staging], memoryview]
    seen: Callable[[memoryview], None]
    placed: Callable[[int], None] | None = None


@dataclass(frozen=True)
class ReadPiece:
    """One file range a load reads: `nbytes` from `offset` (aligned by the planner), of which the
    first `need` must exist; into CPU memory at `address`, or into a staging buffer when None, or
    into the CUDA uint8 tensor `device` (gds). `done` gets the bytes read (verify, place)."""

    offset: int
    nbytes: int
    need: int
    address: int | None
    done: Callable[[memoryview], None] | None
    device: Any = None


class Writer(Protocol):
    """An open file being written by one save."""

    @property
    def alignment(self) -> int:
        """Offsets, lengths and addresses must be multiples of this (1: none)."""

    def reserve(self, nbytes: int) -> None:
        """Allocate the file's blocks before the writes (where the file system can); appended pieces go after."""

    @property
    def end(self) -> int:
        """Where the file's data ends: the reserved size, or after the last appended piece."""

    def write(self, pieces: Sequence[WritePiece]) -> None:
        """Write every piece (in parallel, in the order given as far as threads allow)."""

    def finish(self, size: int) -> None:
        """Cut the file to `size` bytes and make everything written durable."""

    def close(self) -> None:
        """Release the file."""


class Reader(Protocol):
    """An open file being read by one load."""

    @property
    def alignment(self) -> int:
        """Offsets, lengths and addresses must be multiples of this (1: none)."""

    def read(self, pieces: Sequence[ReadPiece]) -> None:
        """Read every piece (in parallel) and hand each one's bytes to its `done`."""

    def close(self) -> None:
        """Release the file."""


class Backend(Protocol):
    """A way to move checkpoint bytes between files and memory."""

    @property
    def name(self) -> str:
        """The IOOptions.backend value that selects it."""

    def create(self, path: str, options: IOOptions, staging: StagingBuffers, existing: bool = False) -> Writer:
        """Create `path` exclusively (or open the `existing` file to overwrite it, never truncating)."""

    def open(self, path: str, options: IOOptions, staging: StagingBuffers | None) -> Reader:
        """Open `path` for reading."""


def _registry() -> dict[str, Backend]:
    """Every backend by name (imported here, so each module stays free of the others)."""
    from . import gds, posix

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


def write_all(fd: int, data: memoryview, offset: int, flags: int = 0) -> None:
    """pwrite (pwritev2 with `flags`, e.g. RWF_DSYNC) until every byte is written (writes may be short)."""
    done = 0
    while done < len(data):
        rest = data[done:]
        done += os.pwritev(fd, [rest], offset + done, flags) if flags else os.pwrite(fd, rest, offset + done)


def read_full(fd: int, dest: memoryview, offset: int) -> int:
    """preadv until `dest` is full or EOF; return the number of bytes read."""
    done = 0
    while done < len(dest):
        got = os.preadv(fd, [dest[done:]], offset + done)
        if got == 0:
            break
        done += got
    return done
