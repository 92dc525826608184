"""POSIX positional I/O on a thread pool: O_DIRECT ("direct") and through the page cache ("buffered").

Each worker takes the next piece, gets its bytes (from the tensor's own memory when aligned enough,
else composed into a borrowed staging buffer, after the piece's `prepare`, e.g. its encoding, which
needs no buffer and so runs on every worker), hands them to the piece's callback (checksums) and
`pwrite`s them (an appended piece, a compressed chunk, is handed to a writing thread, one per staging
buffer, so its worker goes on encoding instead of waiting for the disk); reads `preadv` into place. pwrite, preadv and memmove release the GIL, so one
worker's copy overlaps the others' I/O.

O_DIRECT: offsets, lengths and memory addresses must be multiples of 4096 (the page size, which also
satisfies 512-byte logical blocks); the checkpoint format aligns every record, so only memory needs
staging. Some file systems refuse O_DIRECT with EINVAL: `io.open_writer` falls back to "buffered".

Durability (IOOptions.flush): "end" is one fsync after the last write; "overlap" starts the device's
(or the host's) writeback while later chunks are still being written: a background thread calls
fdatasync each time another IOOptions.overlap_bytes have been written, and buffered writes also start
writeback of each range with sync_file_range; "dsync" makes every write durable before it returns
(pwritev2 with RWF_DSYNC: FUA or a flush per write, the writers' parallelism hiding the waits).
Each ends with an fsync, so all three are equally durable; only their speed differs.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

from ..memory import PAGE, Staging, StagingBuffers, round_up, view
from ..options import IOOptions
from ..parallel import run_parallel
from .base import ReadPiece, WritePiece, read_full, write_all

_libc = ctypes.CDLL(None, use_errno=True)
SYNC_FILE_RANGE_WRITE = 2
AT_EMPTY_PATH = 0x1000
STATX_DIOALIGN = 0x2000
STATX_SIZE = 256  # struct statx
STATX_DIO_MEM_ALIGN = 152  # offset of stx_dio_mem_align (u32) in struct statx


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
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | self.flags)
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # never a FIFO or a device put at the name meanwhile
            os.close(fd)
            raise OSError(errno.EEXIST, "not a regular file", path)
        os.set_blocking(fd, True)
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
        self._overlap = _Overlap(fd, options.overlap_bytes) if options.flush == "overlap" else None
        self._flags = os.RWF_DSYNC if options.flush == "dsync" else 0
        self._end = 0
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> None:
        """Allocate the file's blocks up front, so parallel writes fill a file instead of appending to it."""
        self._end = round_up(nbytes, self.alignment)
        if not nbytes:
            return
        try:
            os.posix_fallocate(self.fd, 0, self._end)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise

    @property
    def end(self) -> int:
        """Where the file's data ends: the reserved size, or after the last appended piece."""
        return self._end

    def _append(self, nbytes: int) -> int:
        """Claim the next `nbytes` (aligned) after everything reserved and appended so far."""
        with self._lock:
            offset = self._end
            self._end += round_up(nbytes, self.alignment)
        return offset

    def write(self, pieces: Sequence[WritePiece]) -> None:
        """Write the pieces on the thread pool; appended pieces' bytes are written by a _Handoff's threads."""
        handoff = _Handoff(self._write, self.staging) if any(p.offset is None for p in pieces) else None
        jobs = [partial(self._write_piece, p, handoff) for p in pieces]
        try:
            run_parallel(jobs, self.options.threads, "ckptio-save")
        except BaseException:
            if handoff is not None:
                handoff.wait()
            raise
        if handoff is not None and (error := handoff.wait()) is not None:
            raise error

    def _write_piece(self, piece: WritePiece, handoff: _Handoff | None) -> None:
        """Write one piece from its own memory when aligned (address and length), else through a staging buffer."""
        aligned = piece.address is not None and piece.address % self.alignment == 0
        if aligned and piece.offset is not None and round_up(piece.write_nbytes, self.alignment) <= piece.nbytes:
            self._emit(piece, view(piece.address, piece.nbytes), piece.offset)  # type: ignore[arg-type]
            return
        if piece.prepare is not None:
            piece.prepare()  # CPU work that needs no buffer (encoding): not bounded by the staging buffers
        if piece.offset is None:
            assert handoff is not None, "write() makes a handoff where pieces are appended"
            self._append_piece(piece, handoff)
            return
        with self.staging.lend() as buf:
            self._emit(piece, piece.fill(buf), piece.offset)

    def _append_piece(self, piece: WritePiece, handoff: _Handoff) -> None:
        """Compose an appended piece (all its bytes, padded in place), claim its offset and hand the buffer over
        to be written, so this worker goes on with the next piece instead of waiting for the disk."""
        assert piece.placed is not None, "an appended piece must say where it wants to hear its offset"
        buf = self.staging.take()
        try:
            data = piece.fill(buf)
            padded = round_up(len(data), self.alignment)
            ctypes.memset(buf.address + len(data), 0, padded - len(data))
            piece.seen(data)
            offset = self._append(padded)
        except BaseException:
            self.staging.give(buf)
            raise
        handoff.submit(buf, padded, offset, piece.placed)

    def _emit(self, piece: WritePiece, data: memoryview, offset: int) -> None:
        """Show the bytes to the piece's callback, then write its part (padded to the alignment)."""
        piece.seen(data)
        n = round_up(piece.write_nbytes, self.alignment)
        if n:
            self._write(data[:n], offset)

    def _write(self, data: memoryview, offset: int) -> None:
        """pwrite the bytes, with the flush strategy's flags, and count them for an overlapping flush."""
        write_all(self.fd, data, offset, self._flags)
        if self._overlap:
            self._overlap.written(offset, len(data), buffered=self.alignment == 1)

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


class _Handoff:
    """Writes of appended pieces on threads of their own, one per staging buffer (a composed buffer is written
    at once; composing waits for a free buffer), so the workers that encode never wait for the disk; the first
    failure refuses later pieces and is returned by `wait`."""

    def __init__(self, write: Callable[[memoryview, int], None], staging: StagingBuffers) -> None:
        self._write_at = write
        self._staging = staging
        self._pool = ThreadPoolExecutor(staging.count, thread_name_prefix="ckptio-append")
        self._error: BaseException | None = None

    def submit(self, buf: Staging, nbytes: int, offset: int, placed: Callable[[int], None]) -> None:
        """Write `nbytes` of `buf` at `offset` in the background, then tell `placed` and give the buffer back."""
        if self._error is not None:
            self._staging.give(buf)
            raise self._error
        self._pool.submit(self._write, buf, nbytes, offset, placed)

    def _write(self, buf: Staging, nbytes: int, offset: int, placed: Callable[[int], None]) -> None:
        """One background write; a failure is kept for `submit` and `wait`."""
        try:
            self._write_at(view(buf.address, nbytes), offset)
            placed(offset)
        except BaseException as e:
            self._error = self._error or e
        finally:
            self._staging.give(buf)

    def wait(self) -> BaseException | None:
        """Wait for every write handed over; the first failure, if any."""
        self._pool.shutdown(wait=True)
        return self._error


class _Overlap:
    """Starts writeback while the save is still writing: fdatasync on a background thread each time
    another `every` bytes were written (IOOptions.overlap_bytes; it returns once those bytes are on stable
    storage, while the workers go on writing), and, for buffered writes, sync_file_range(WRITE) on every
    written range."""

    def __init__(self, fd: int, every: int) -> None:
        self.fd = fd
        self.every = every
        self._pending = 0
        self._wake = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="ckptio-flush", daemon=True)
        self._thread.start()

    def written(self, offset: int, nbytes: int, buffered: bool) -> None:
        """Count a written range (and start its writeback when it sits in the page cache)."""
        if buffered:
            _libc.sync_file_range(self.fd, ctypes.c_int64(offset), ctypes.c_int64(nbytes), SYNC_FILE_RANGE_WRITE)
        with self._wake:
            self._pending += nbytes
            if self._pending >= self.every:
                self._wake.notify()

    def _run(self) -> None:
        """fdatasync whenever enough has been written since the last one started."""
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._stopped or self._pending >= self.every)
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
        self.memory_alignment = dio_memory_alignment(fd) if backend.flags & os.O_DIRECT else 1
        self.options = options
        self.staging = staging

    def read(self, pieces: Sequence[ReadPiece]) -> None:
        """Read the pieces on the thread pool, each straight into place or through a staging buffer."""
        run_parallel([partial(self._read_piece, p) for p in pieces], self.options.threads, "ckptio-load")

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


def dio_memory_alignment(fd: int) -> int:
    """The alignment O_DIRECT needs of memory addresses for this file (statx STATX_DIOALIGN, Linux >= 6.1: 4
    bytes on NVMe, 512 on virtio), the page size where the kernel does not say."""
    buf = ctypes.create_string_buffer(STATX_SIZE)
    if _libc.statx(fd, b"", AT_EMPTY_PATH, STATX_DIOALIGN, buf) != 0:
        return PAGE
    (mask,), (align,) = struct.unpack_from("I", buf, 0), struct.unpack_from("I", buf, STATX_DIO_MEM_ALIGN)
    return align if mask & STATX_DIOALIGN and align else PAGE


DIRECT = PosixBackend("direct", os.O_DIRECT, 4096)
BUFFERED = PosixBackend("buffered", 0, 1)
