"""A DCP checkpoint under `s3://bucket/prefix`: dcp/store.py's Store on objects (the Writer and Reader use it).

A rank's data object is composed from the same write pieces as a data file (dcp/encode.py) and uploaded whole,
in parallel parts, before the rank's results reach the coordinator (s3/transfer.py: nothing is visible before);
the coordinator notes what lies under the prefix when the save begins and commits (object_commit.py). A load reads
`.metadata` (format 3 only, sealed, bounded), learns every data object's size in one listing and reads its
pieces by parallel ranged GETs, verified as on disk. Object names come only from the metadata's data names
(records.DATA_NAME: no '/', no '..'), so every key lies directly under the prefix. No lock, no fsync: a PUT is
atomic and durable when it returns. A load that overlaps a commit replacing its checkpoint may find a data
object deleted (ObjectStoreError 404): load again.
"""

from __future__ import annotations

from typing import Any

from ..errors import CheckpointError, InvalidCheckpoint
from ..memory import StagingBuffers
from ..options import IOOptions
from ..s3.client import Bucket, Stored
from ..s3.location import ObjectLocation
from ..s3.transfer import ObjectBackend, ObjectReader, bucket_for
from .encode import write_items
from .metadata import commit_id
from .object_commit import Before, commit, read_committed, seal_of, snapshot
from .records import DATA_NAME, METADATA, ItemRecord


class ObjectStore:
    """A checkpoint's prefix in a bucket, through one client with the options' part size and connections
    (BackendUnavailable at once where awscrt is missing)."""

    def __init__(self, location: ObjectLocation, options: IOOptions) -> None:
        self.path, self.options = location, options
        self._bucket: Bucket | None = bucket_for(location.bucket, options)
        self._before = Before()  # what the commit may sweep (the coordinator's set-up fills it)
        self._found: dict[str, Stored] = {}  # the data objects a load holds: size and ETag
        self._missing: dict[str, CheckpointError] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Writer going to DCP's process executor) without its connections."""
        return {"path": self.path, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.options = state["path"], state["options"]
        self._bucket, self._before, self._found, self._missing = None, Before(), {}, {}

    @property
    def bucket(self) -> Bucket:
        """The bucket's client (made anew in a process this store was pickled to), for one step of a save or load
        (a rank's write, the commit, a load's listing or reads): at most options.operation_seconds in all."""
        if self._bucket is None:
            self._bucket = bucket_for(self.path.bucket, self.options)
        return self._bucket.within(self.options.operation_seconds)

    def where(self, name: str) -> str:
        return f"s3://{self.path.bucket}/{self.path.key(name)}"

    def _key(self, name: str) -> str:
        """The key of one of the checkpoint's objects: ckptio's names only, directly under the prefix."""
        if name != METADATA and not DATA_NAME.fullmatch(name):
            raise InvalidCheckpoint(self.where(name), "refused object name: not one a Writer makes")
        return self.path.key(name)

    # -- saving

    def begin(self, coordinator: bool) -> None:
        """The coordinator lists what its commit may sweep: what is there before this save writes anything."""
        self._before = snapshot(self.bucket, self.path) if coordinator else Before()

    def prepare(self) -> None:
        """Nothing to make: a prefix exists once an object is under it."""

    def write(
        self,
        name: str,
        items: list[Any],
        options: IOOptions,
        codec: Any,
        checksum: str,
        staging: StagingBuffers,
        rank: int,
    ) -> list[ItemRecord]:
        """The data object composed and uploaded (whole, or not at all) before this returns."""
        writer = ObjectBackend(self.bucket).create(self._key(name), options, staging)
        return write_items(writer, name, items, options, codec, checksum)

    def commit(self, metadata: Any, save_id: str) -> None:
        commit(self.bucket, self.path, metadata, self._before)
        self._before = Before()

    # -- loading

    def read_commit(self) -> tuple[Any, bytes]:
        metadata, data = read_committed(self.bucket, self.path)
        return metadata, commit_id(data)

    def current_commit(self) -> bytes:
        """The seal of `.metadata` now (its last bytes: nothing decoded)."""
        return seal_of(self.bucket, self._key(METADATA)) or b""

    def hold(self, names: set[str]) -> bool:
        """Every named data object's size and ETag, from one listing; a missing one is an error for a plan that
        reads it."""
        self.release()
        listed = {s.key: s for s in self.bucket.listing(self.path.key(""))}
        for name in sorted(names):
            try:
                key = self._key(name)
            except CheckpointError as e:
                self._missing[name] = e
                continue
            if key in listed:
                self._found[name] = listed[key]
            else:
                self._missing[name] = InvalidCheckpoint(
                    self.where(name), "missing (a data object the checkpoint needs)"
                )
        return not self._missing

    def size(self, name: str) -> int:
        return self._stored(name).size

    def _stored(self, name: str) -> Stored:
        """A held data object as the listing (or, for one not held, a HEAD) found it."""
        if name in self._missing:
            raise self._missing[name]
        if name not in self._found:
            found = self.bucket.head(self._key(name))
            if found is None:
                raise InvalidCheckpoint(self.where(name), "missing (a data object the checkpoint needs)")
            self._found[name] = found
        return self._found[name]

    def keep_only(self, names: set[str]) -> None:
        """Nothing held open: an object is read by its key."""

    def reader(self, name: str, options: IOOptions, staging: StagingBuffers) -> ObjectReader:
        """Ranged GETs of a data object (up to options.object_connections in flight), each of the object the
        listing found (If-Match its ETag: one replaced since fails the load with HTTP 412)."""
        found = self._stored(name)
        return ObjectBackend(self.bucket).open(self._key(name), found.size, options, staging, found.etag or None)

    def release(self) -> None:
        self._found, self._missing = {}, {}

    def close(self) -> None:
        self.release()
        if self._bucket is not None:
            self._bucket.close()
            self._bucket = None
