"""POSIX positional I/O on a thread pool: O_DIRECT ("direct") and through the page cache ("buffered").

Each worker takes the next piece, gets its bytes (from the tensor's own memory when aligned enough,
else composed into a borrowed staging buffer), hands them to the piece's callback (checksums) and
`pwrite`s them; reads `preadv` into place. pwrite, preadv and memmove release the GIL, so one
worker's copy overlaps the others' I/O.

O_DIRECT: offsets, lengths and memory addresses must be multiples of 4096 (the page size, which also
satisfies 512-byte logical blocks); the checkpoint format aligns every record, so only memory needs
staging. Some file systems refuse O_DIRECT with EINVAL: `io.open_writer` falls back to "buffered".

Durability (IOOptions.flush): "end" is one fsync after the last write; "overlap" starts the device's
(or the host's) writeback while later chunks are still being written: a background thread calls
fdatasync each time another `overlap_bytes` have been written, and buffered writes also start
writeback of each range with sync_file_range; the final fsync then finds little left to do.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from ..memory import StagingBuffers, round_up, view
from ..options import IOOptions
from ..parallel import run_parallel
from . import ReadPiece, WritePiece, read_full, write_all

_libc = ctypes.CDLL(None, use_errno=True)
SYNC_FILE_RANGE_WRITE = 2
OVERLAP_BYTES = 256 << 20  # flush once this much more has been written (a few chunks per thread)


@dataclass(frozen=True)
class PosixBackend:
    """open(2) with `flags` (O_DIRECT or none), pwrite/preadv on `options.threads` threads."""

    name: str
    flags: int
    alignment: int

    def create(self, path: str, options: IOOptions, staging: StagingBuffers, existing: bool = False) -> PosixWriter:
        """Create `path` exclusively (so a failure here never touches someone else's file), then open it
        with this backend's flags; `existing` reopens a file to overwrite it in place."""
        if not existing:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644))
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | self.flags)
        return PosixWriter(fd, self, options, staging)

    def open(self, path: str, options: IOOptions, staging: StagingBuffers | None) -> PosixReader:
        """Open `path` read-only with this backend's flags (EINVAL when the file system refuses)."""
        return PosixReader(os.open(path, os.O_RDONLY | os.O_CLOEXEC | self.flags), self, options, staging)


class PosixWriter:
    """The writes of one save into one file descriptor."""

    def __init__(self, fd: int, backend: PosixBackend, options: IOOptions, staging: StagingBuffers) -> None:
        self.fd = fd
        self.backend = backend
        self.alignment = backend.alignment
        self.options = options
        self.staging = staging
        self._overlap = _Overlap(fd) if options.flush == "overlap" else None

    def reserve(self, nbytes: int) -> None:
        """Allocate the file's blocks up front, so parallel writes fill a file instead of appending to it."""
        try:
            os.posix_fallocate(self.fd, 0, round_up(nbytes, self.alignment))
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise

    def write(self, pieces: Sequence[WritePiece]) -> None:
        """Write the pieces on the thread pool."""
        run_parallel([partial(self._write_piece, p) for p in pieces], self.options.threads, "gdsbench-save")

    def _write_piece(self, piece: WritePiece) -> None:
        """Write one piece from its own memory when aligned, else through a staging buffer."""
        if piece.address is not None and piece.address % self.alignment == 0:
            self._emit(piece, view(piece.address, piece.nbytes))
            return
        with self.staging.lend() as buf:
            self._emit(piece, piece.fill(buf))

    def _emit(self, piece: WritePiece, data: memoryview) -> None:
        """Show the bytes to the piece's callback, then write its part (padded to the alignment)."""
        piece.seen(data)
        n = round_up(piece.write_nbytes, self.alignment)
        if n:
            write_all(self.fd, data[:n], piece.offset)
            if self._overlap:
                self._overlap.written(piece.offset, n, buffered=self.alignment == 1)

    def finish(self, size: int) -> None:
        """Trim the alignment padding and make the file durable."""
        os.ftruncate(self.fd, size)
        if self._overlap:
            self._overlap.stop()
        os.fsync(self.fd)

    def close(self) -> None:
        """Close the file (a running overlap flusher is stopped first)."""
        if self._overlap:
            self._overlap.stop()
        os.close(self.fd)


class _Overlap:
    """Starts writeback while the save is still writing: fdatasync on a background thread each time
    another OVERLAP_BYTES were written (it returns once those bytes are on stable storage, while the
    workers go on writing), and, for buffered writes, sync_file_range(WRITE) on every written range."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pending = 0
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="gdsbench-flush", daemon=True)
        self._thread.start()

    def written(self, offset: int, nbytes: int, buffered: bool) -> None:
        """Count a written range (and start its writeback when it sits in the page cache)."""
        if buffered:
            _libc.sync_file_range(self.fd, ctypes.c_int64(offset), ctypes.c_int64(nbytes), SYNC_FILE_RANGE_WRITE)
        with self._wake:
            self._pending += nbytes
            if self._pending >= OVERLAP_BYTES:
                self._wake.notify()

    def _run(self) -> None:
        """fdatasync whenever enough has been written since the last one started."""
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._stopped or self._pending >= OVERLAP_BYTES)
                if self._stopped:
                    return
                self._pending = 0
            os.fdatasync(self.fd)

    def stop(self) -> None:
        """Stop the flusher and wait for a flush in progress (idempotent)."""
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join()


class PosixReader:
    """The reads of one load from one file descriptor."""

    def __init__(self, fd: int, backend: PosixBackend, options: IOOptions, staging: StagingBuffers | None) -> None:
        self.fd = fd
        self.backend = backend
        self.alignment = backend.alignment
        self.options = options
        self.staging = staging

    def read(self, pieces: Sequence[ReadPiece]) -> None:
        """Read the pieces on the thread pool, each straight into place or through a staging buffer."""
        run_parallel([partial(self._read_piece, p) for p in pieces], self.options.threads, "gdsbench-load")

    def _read_piece(self, piece: ReadPiece) -> None:
        """Read one piece and hand its bytes (as many as the file had) to its callback."""
        if piece.address is not None:
            got = read_full(self.fd, view(piece.address, piece.nbytes), piece.offset)
            if piece.done:
                piece.done(view(piece.address, got))
            return
        assert self.staging is not None, "pieces without an address need staging buffers"
        with self.staging.lend() as buf:
            got = read_full(self.fd, view(buf.address, piece.nbytes), piece.offset)
            if piece.done:
                piece.done(view(buf.address, got))

    def close(self) -> None:
        """Close the file."""
        os.close(self.fd)


DIRECT = PosixBackend("direct", os.O_DIRECT, 4096)
BUFFERED = PosixBackend("buffered", 0, 1)
