"""A checkpoint's bytes to and from one object, as the file backends move them to and from one file.

Writing: the save engines hand the same write pieces they give a file (saving.py, dcp/encode.py); each is
hashed where it lies (a tensor's own memory is referenced, never copied; composed regions and compressed chunks
are kept), and `finish` uploads the object in one request read straight from those segments: the CRT sends
it as a multipart upload of parallel parts, and aborts it if a part fails. Nothing is visible under the key
until the upload completes, and a completed upload is the whole object: S3 has no torn object.

Reading: each read piece is a ranged GET into its destination or a staging buffer, `options.object_connections`
in flight at once (a piece above `options.part_bytes` split by the client into parallel GETs).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from ..backends.base import ReadPiece, WritePiece
from ..memory import Staging, StagingBuffers, view
from ..options import IOOptions
from ..parallel import run_parallel
from .client import Bucket, Segments


def bucket_for(name: str, options: IOOptions) -> Bucket:
    """A client of bucket `name` with the options' part size, connections, retries and request limit (each
    operation bounds itself further with `Bucket.within(options.operation_seconds)`)."""
    return Bucket(
        name,
        options.part_bytes,
        options.object_connections,
        options.object_retries,
        options.request_seconds,
        options.endpoint,
        options.region,
    )


@dataclass(frozen=True)
class ObjectBackend:
    """Objects of one bucket as the files of a save or load (`options.threads` workers compose or place pieces)."""

    bucket: Bucket

    def create(self, key: str, options: IOOptions, staging: StagingBuffers) -> ObjectWriter:
        """A new object at `key`, written when the save finishes."""
        return ObjectWriter(self.bucket, key, options, staging)

    def open(
        self, key: str, size: int, options: IOOptions, staging: StagingBuffers | None, etag: str | None = None
    ) -> ObjectReader:
        """The object at `key` (of `size` bytes, as its HEAD or listing said) for ranged reads; with `etag`, of that
        version only (a replaced object fails the reads with HTTP 412)."""
        return ObjectReader(self.bucket, key, size, options, staging, etag)


class ObjectWriter:
    """One object being composed by a save, uploaded by `finish` (nothing is sent before)."""

    alignment = 1

    def __init__(self, bucket: Bucket, key: str, options: IOOptions, staging: StagingBuffers) -> None:
        self.bucket, self.key, self.options, self.staging = bucket, key, options, staging
        self._segments: list[tuple[int, memoryview]] = []
        self._end = 0
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> None:
        """Appended pieces go after the first `nbytes`."""
        self._end = nbytes

    @property
    def end(self) -> int:
        """Where the object's data ends: the reserved size, or after the last appended piece."""
        return self._end

    def write(self, pieces: Sequence[WritePiece]) -> None:
        """Hash every piece and keep its bytes for the upload (a piece in memory by reference, others copied)."""
        run_parallel([partial(self._take, p) for p in pieces], self.options.threads, "ckptio-compose")

    def _take(self, piece: WritePiece) -> None:
        """One piece: seen, then kept at its offset (an appended piece placed after everything so far)."""
        if piece.address is not None and piece.offset is not None:
            data = view(piece.address, piece.nbytes)
            piece.seen(data)
            self._keep(piece.offset, data[: piece.write_nbytes])
            return
        if piece.prepare is not None:
            piece.prepare()
        with self.staging.lend() as buf:
            data = piece.fill(buf)
            piece.seen(data)
            kept = memoryview(bytes(data if piece.offset is None else data[: piece.write_nbytes]))
        if piece.offset is not None:
            self._keep(piece.offset, kept)
            return
        with self._lock:
            offset, self._end = self._end, self._end + len(kept)
        self._keep(offset, kept)
        assert piece.placed is not None, "an appended piece must say where it wants to hear its offset"
        piece.placed(offset)

    def _keep(self, offset: int, data: memoryview) -> None:
        with self._lock:
            self._segments.append((offset, data))

    def finish(self, size: int) -> None:
        """Upload the object's `size` bytes (parallel parts); it exists, whole, once this returns."""
        self.bucket.put(self.key, Segments(self._segments, size), size)

    def close(self) -> None:
        """Drop the references to the save's memory."""
        self._segments = []


class ObjectReader:
    """Ranged GETs of one object, up to `options.object_connections` pieces in flight (requests wait on the network,
    not on the cores `threads` counts)."""

    alignment = 1
    memory_alignment = 1

    def __init__(
        self,
        bucket: Bucket,
        key: str,
        size: int,
        options: IOOptions,
        staging: StagingBuffers | None,
        etag: str | None = None,
    ) -> None:
        self.bucket, self.key, self.size, self.options, self.staging = bucket, key, size, options, staging
        self.etag = etag

    def read(self, pieces: Sequence[ReadPiece]) -> None:
        """Read every piece (the bytes the object has of it) and hand them to its callback."""
        run_parallel([partial(self._read, p) for p in pieces], self.options.object_connections, "ckptio-get")

    def _read(self, piece: ReadPiece) -> None:
        if piece.address is not None:
            self._fill(piece, view(piece.address, piece.nbytes))
            return
        assert self.staging is not None, "pieces without an address need staging buffers"
        with self.staging.lend() as buf:
            self._fill(piece, _within(buf, piece.nbytes))

    def _fill(self, piece: ReadPiece, into: memoryview) -> None:
        """GET the piece's range (cut at the object's end) into `into`, then hand over what arrived."""
        want = max(0, min(piece.nbytes, self.size - piece.offset))
        got = self.bucket.get(self.key, piece.offset, into[:want], self.etag) if want else 0
        if piece.done:
            piece.done(into[:got])

    def close(self) -> None:
        """Nothing held: each read is its own request."""


def _within(buf: Staging, nbytes: int) -> memoryview:
    """The first `nbytes` of a staging buffer."""
    return view(buf.address, nbytes)
