"""What every I/O backend shares: the pieces a save or load hands it, the protocols it implements, and
the loops of positional system calls."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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
    appends all the bytes `fill` returned after everything reserved, and tells `placed` where. Its
    `prepare` (the encoding) runs before a staging buffer is borrowed, so it runs on every thread
    however few buffers there are; `fill` then only copies the result.
    """

    offset: int | None
    nbytes: int
    write_nbytes: int
    address: int | None
    fill: Callable[[Staging], memoryview]
    seen: Callable[[memoryview], None]
    placed: Callable[[int], None] | None = None
    prepare: Callable[[], None] | None = None


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
        """Offsets and lengths must be multiples of this (1: none)."""

    @property
    def memory_alignment(self) -> int:
        """Addresses a piece reads into must be multiples of this (1: none)."""

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
