"""A DCP save's commit on objects: the coordinator's, once every rank's data object is uploaded (dcp/commit.py
is the one in a directory). The checkpoint under `s3://bucket/prefix` is `<prefix>/.metadata` and the data
objects it names, `<prefix>/<save_id>-r<rank>.data`.

1. Every data object the metadata names is there, at least as long as its last recorded chunk (one listing).
2. `.metadata` is PUT: sealed, in format 3 only (UnsupportedMetadata for metadata format 3 cannot express: no
   pickle is ever written to an object store). A PUT is atomic: the previous checkpoint stays visible until
   this one is, whole. This is the commit.
3. The data objects the replaced metadata named are deleted (never before step 2; the replaced metadata is
   read only where it changed since the set-up: otherwise its data objects are among the sweep's).
4. The sweep: incomplete multipart uploads of ckptio's names under the prefix are aborted and ckptio data
   objects the new metadata does not name are deleted, both only when older than this save's start: when the
   coordinator's set-up listed them (`snapshot`; no clocks compared). A killed save's upload is thus aborted,
   and its data objects deleted, by the next save's commit.
Steps 3 and 4 run only while `.metadata` is still this save's (a later commit cleans up after itself); a
request of theirs that fails raises (ObjectStoreError), the checkpoint being committed already.

Objects take no lock and no fsync, so saves to one prefix are not serialized: run one saver per prefix. A
concurrent save begun before this one may find its upload aborted or its data object swept by this commit; it
then fails its own save with a named error (ObjectStoreError from its upload, or CheckpointError from its step
1), and the committed checkpoint stays. The sweep never removes what the committed `.metadata` names while it
is this save's. The one window a lock-free store leaves open: such a save passing its step 1 and PUTting its
`.metadata` within the milliseconds between this save's check and its deletes; a load of that checkpoint then
fails by name (a data object missing), never reads torn data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CheckpointError, InvalidCheckpoint, ObjectStoreError, UnsupportedMetadata
from ..s3.client import Bucket, Segments, Upload
from ..s3.location import ObjectLocation
from .commit import data_ends
from .metadata import commit_id, referenced_files, seal_table, unseal
from .records import DATA_NAME, METADATA, SEAL_BYTES, SEAL_MAGIC_V3
from .table import decode
from .table_encode import Unsupported, encode_strict

MAX_METADATA = 1 << 30  # a `.metadata` object larger than this is refused before it is read


@dataclass(frozen=True)
class Before:
    """What lay under the prefix when a save began (its coordinator's set-up): what its commit may sweep."""

    objects: frozenset[str] = frozenset()  # keys of ckptio data objects
    uploads: tuple[Upload, ...] = ()  # incomplete multipart uploads of ckptio's names
    metadata: str | None = None  # the ETag of `.metadata` (its data objects are among `objects`)


def snapshot(bucket: Bucket, location: ObjectLocation) -> Before:
    """The ckptio data objects, `.metadata` and incomplete uploads (of data and metadata names) under the prefix now."""
    listed = bucket.listing(location.key(""))
    objects = frozenset(s.key for s in listed if _name(location, s.key, DATA_NAME.fullmatch))
    etag = next((s.etag for s in listed if s.key == location.key(METADATA)), None)
    uploads = tuple(u for u in bucket.uploads(location.key("")) if _name(location, u.key, _ckptio_name))
    return Before(objects, uploads, etag)


def commit(bucket: Bucket, location: ObjectLocation, metadata: Any, before: Before) -> list[str]:
    """Make `metadata` the checkpoint under `location` (steps 1-4 above); the names of the data objects removed."""
    data = seal_table(_format_3(metadata, location))
    listed = {s.key: s for s in bucket.listing(location.key(""))}
    check_written(bucket, location, metadata, {k: s.size for k, s in listed.items()})
    key = location.key(METADATA)
    now = listed.get(key)  # unchanged since the set-up: its data objects are among those the sweep takes
    replaced = _committed_files(bucket, location) if now is not None and now.etag != before.metadata else set()
    bucket.put(key, Segments([(0, memoryview(data))], len(data)), len(data))
    if seal_of(bucket, key) != commit_id(data):
        return []  # another save committed since: the cleanup is its own
    keep = {location.key(name) for name in referenced_files(metadata)}
    gone = sorted({location.key(name) for name in replaced if DATA_NAME.fullmatch(name)} - keep)
    for k in gone:
        bucket.delete(k)
    return sorted(k.rpartition("/")[2] for k in gone + sweep(bucket, location, keep | set(gone), before))


def sweep(bucket: Bucket, location: ObjectLocation, keep: set[str], before: Before) -> list[str]:
    """Abort the incomplete uploads and delete the data objects (but those in `keep`) that were there before
    this save began; the keys deleted."""
    for upload in before.uploads:
        bucket.abort(upload)  # one completed or aborted since is no error
    gone = sorted(before.objects - keep)
    for k in gone:
        bucket.delete(k)
    return gone


def check_written(bucket: Bucket, location: ObjectLocation, metadata: Any, sizes: dict[str, int]) -> None:
    """Every data object the metadata names is under the prefix (`sizes`: a listing of it now), holding every
    chunk recorded in it."""
    for name, end in sorted(data_ends(metadata).items()):
        key = location.key(name)
        if not DATA_NAME.fullmatch(name) or sizes.get(key, -1) < end:
            raise CheckpointError(
                f"{bucket.url(key)}: a rank's data object is gone or short before the commit (swept by a "
                "concurrent save?); the previous checkpoint stays"
            )


def read_committed(bucket: Bucket, location: ObjectLocation) -> tuple[Any, bytes]:
    """The committed `.metadata`: its size bounded, its seal checked, decoded as format 3 only (no pickle is read
    from an object store: InvalidCheckpoint for formats 1 and 2); the metadata and its bytes."""
    key = location.key(METADATA)
    where = bucket.url(key)
    found = bucket.head(key)
    if found is None:
        raise InvalidCheckpoint(where, f"no {METADATA}: not a committed checkpoint")
    if found.size > MAX_METADATA or found.size < SEAL_BYTES:
        raise InvalidCheckpoint(where, f"{found.size} bytes: not sealed metadata of at most {MAX_METADATA} bytes")
    data = bucket.read(key, found.size)
    payload, magic = unseal(where, data)
    if magic != SEAL_MAGIC_V3:
        raise InvalidCheckpoint(
            where, "metadata of format 1 or 2 (a pickle): an object store's is read in format 3 only"
        )
    return decode(payload, where), data


def _format_3(metadata: Any, location: ObjectLocation) -> bytes:
    """The metadata's format-3 payload, or UnsupportedMetadata saying what format 3 cannot express."""
    try:
        return encode_strict(metadata)
    except Unsupported as e:
        raise UnsupportedMetadata(str(location), str(e)) from None


def _committed_files(bucket: Bucket, location: ObjectLocation) -> set[str]:
    """The data objects the committed metadata names (none known when there is none or it cannot be read)."""
    try:
        return referenced_files(read_committed(bucket, location)[0])
    except ObjectStoreError:
        raise  # the store failed: the commit does not go on blind
    except CheckpointError:
        return set()  # no metadata, or one no load would take: the sweep alone cleans up


def seal_of(bucket: Bucket, key: str) -> bytes | None:
    """The seal ending the object at `key` (what tells one commit from another), None if it has none."""
    found = bucket.head(key)
    if found is None or found.size < SEAL_BYTES:
        return None
    tail = memoryview(bytearray(SEAL_BYTES))
    got = bucket.get(key, found.size - SEAL_BYTES, tail)
    return bytes(tail[:got])


def _name(location: ObjectLocation, key: str, allowed: Any) -> bool:
    """Whether `key` lies directly under the prefix with a name `allowed` accepts."""
    name = key[len(location.key("")) :]
    return key.startswith(location.key("")) and "/" not in name and bool(allowed(name))


def _ckptio_name(name: str) -> bool:
    """A name a save uploads: a data object's or `.metadata`."""
    return name == METADATA or DATA_NAME.fullmatch(name) is not None
