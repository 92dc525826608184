"""A single-file checkpoint (ckptio.save's format, byte for byte) as one object, `s3://bucket/prefix/name.ckpt`.

A save hands the file engine's write pieces to an ObjectWriter (transfer.py): one upload, so the object appears
whole or not at all and replaces the one before it atomically. Once it completed, the incomplete multipart uploads
of its key that a failed or killed earlier save left (listed before it began) are aborted (stale.py). A load
validates the index through ranged GETs of the version one HEAD found (its ETag sent as If-Match on every read,
the data's included), so an object replaced during a load fails it with HTTP 412 instead of mixing two saves'
bytes.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterator

from .. import format as fmt
from ..errors import InvalidLocation, ObjectStoreError, OptionError
from ..memory import StagingBuffers
from ..options import IOOptions
from .client import Bucket
from .location import ObjectLocation
from .stale import abort_earlier, earlier_uploads
from .transfer import ObjectBackend, ObjectReader, ObjectWriter, bucket_for

#: Read ahead when an object is opened, in two parallel GETs: its first HEAD_BYTES (header record, data.pkl) and
#: its last TAIL_BYTES (index record, zip directory); a load's small reads then cost no round trip of their own.
HEAD_BYTES = 256 << 10
TAIL_BYTES = 1 << 20
#: Other small reads (local zip headers) closer than this go in one GET, of at most BLOCK_BYTES.
COALESCE_BYTES = 64 << 10
BLOCK_BYTES = 4 << 20


def object_key(location: ObjectLocation, recycle: bool = False) -> str:
    """The key of the object a location names (InvalidLocation for a bucket's root); OptionError for `recycle`
    (a file's disk blocks reused: an object is always written anew)."""
    if not location.prefix:
        raise InvalidLocation(str(location), "names a bucket, not an object (s3://bucket/prefix/name.ckpt)")
    if recycle:
        raise OptionError(f"{location}: recycle reuses a file's disk blocks; an object is always written anew")
    return location.prefix


@contextlib.contextmanager
def object_writer(location: ObjectLocation, options: IOOptions, staging: StagingBuffers) -> Iterator[ObjectWriter]:
    """A writer of the object at `location`, uploaded whole by its `finish` (parts of `options.part_bytes`); once the
    block succeeded, the incomplete uploads of the key listed before it are aborted (stale.py); its client closed."""
    key = object_key(location)
    bucket = bucket_for(location.bucket, options).within(options.operation_seconds)
    try:
        earlier = earlier_uploads(bucket, key, key.__eq__)
        writer = ObjectBackend(bucket).create(key, options, staging)
        try:
            yield writer
        finally:
            writer.close()
        abort_earlier(bucket, earlier)
    finally:
        bucket.close()


class PinnedObject:
    """One object at the version its HEAD found: its validated index, and reads sent with that ETag (small ones
    served from its first and last bytes, read ahead)."""

    def __init__(self, bucket: Bucket, location: ObjectLocation) -> None:
        self.bucket, self.key = bucket, object_key(location)
        stored = bucket.head(self.key)
        if stored is None:
            raise ObjectStoreError(str(location), "HeadObject", 404, "NoSuchKey (no object at this key)")
        self.size, self.etag = stored.size, stored.etag
        head = min(self.size, HEAD_BYTES)
        tail = max(head, self.size - TAIL_BYTES)
        self._ahead = self._fetch([(0, head), (tail, self.size - tail)])
        self.index = fmt.parse(str(location), self.read_at, self.size, self.read_many)

    def read_at(self, offset: int, nbytes: int) -> bytes:
        """The object's bytes [offset, offset + nbytes), fewer at its end (a file's pread)."""
        want = max(0, min(nbytes, self.size - offset))
        found = _within(self._ahead, offset, want)
        if found is not None:
            return found
        into = memoryview(bytearray(want))
        got = self.bucket.get(self.key, offset, into, self.etag)
        return bytes(into[:got])

    def read_many(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Several small reads (the local zip headers): those not read ahead fetched together, neighbours merged."""
        cut = [(offset, max(0, min(nbytes, self.size - offset))) for offset, nbytes in ranges]
        blocks = self._fetch(_blocks([(o, n) for o, n in cut if n and _within(self._ahead, o, n) is None]))
        return [_within(self._ahead, o, n) or _within(blocks, o, n) or b"" for o, n in cut]

    def reader(self, options: IOOptions, staging: StagingBuffers | None) -> ObjectReader:
        """Parallel ranged GETs of the data (`options.object_connections` in flight), of this version only."""
        return ObjectBackend(self.bucket).open(self.key, self.size, options, staging, self.etag)

    def _fetch(self, extents: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
        """The (offset, nbytes) extents (cut at the object's end), sorted, all requests in flight at once (the client
        queues them on its connections); the first failure raised once all have ended."""
        extents = [(o, min(n, self.size - o)) for o, n in sorted(extents) if o < self.size and n > 0]
        buffers = [memoryview(bytearray(n)) for _, n in extents]
        started = [self.bucket.begin_get(self.key, o, into, self.etag) for (o, _), into in zip(extents, buffers)]
        blocks: list[tuple[int, bytes]] = []
        failure: ObjectStoreError | None = None
        for (offset, _), into, request in zip(extents, buffers, started):
            try:
                blocks.append((offset, bytes(into[: self.bucket.finish_get(self.key, request)])))
            except ObjectStoreError as e:
                failure = failure or e
        if failure is not None:
            raise failure
        return blocks


def _within(blocks: list[tuple[int, bytes]], offset: int, nbytes: int) -> bytes | None:
    """The bytes [offset, offset + nbytes) if one of the (start, bytes) blocks, sorted by start, holds them all."""
    if nbytes <= 0:
        return b""
    i = bisect.bisect_right(blocks, offset, key=lambda block: block[0]) - 1
    if i < 0:
        return None
    start, data = blocks[i]
    return data[offset - start : offset - start + nbytes] if offset + nbytes <= start + len(data) else None


def _blocks(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(offset, nbytes) extents that cover `ranges`: neighbours within COALESCE_BYTES merged, up to BLOCK_BYTES."""
    blocks: list[tuple[int, int]] = []  # (start, end)
    for offset, nbytes in sorted(ranges):
        if blocks and offset - blocks[-1][1] <= COALESCE_BYTES and offset + nbytes - blocks[-1][0] <= BLOCK_BYTES:
            blocks[-1] = (blocks[-1][0], max(blocks[-1][1], offset + nbytes))
        else:
            blocks.append((offset, offset + nbytes))
    return [(start, end - start) for start, end in blocks]


@contextlib.contextmanager
def pinned_object(location: ObjectLocation, options: IOOptions) -> Iterator[PinnedObject]:
    """The object at `location`, validated and pinned to its version for the block (one client, with the options'
    part size and connections); a read that finds it replaced raises ObjectStoreError (HTTP 412) saying so."""
    object_key(location)
    bucket = bucket_for(location.bucket, options).within(options.operation_seconds)
    try:
        yield PinnedObject(bucket, location)
    except ObjectStoreError as e:
        if e.status != 412:
            raise
        detail = "the object was replaced during the load (its ETag changed): load again"
        raise ObjectStoreError(str(location), e.operation, 412, detail) from None
    finally:
        bucket.close()
