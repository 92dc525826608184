"""Objects of an S3 bucket (`s3://bucket/prefix`, the extra ckptio[s3]): a single-file save as one upload, a load
pinned by the object's ETag, DCP checkpoints under a prefix, tiers of step objects. The s3 package is its
implementation; endpoint, region and credentials come from the environment."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import BackendUnavailable, UnsupportedLocation
from ..memory import StagingBuffers
from ..options import IOOptions
from ..tier_names import name_of, step_of
from .base import Place, Source, Target, Traits

if TYPE_CHECKING:
    from ..s3.client import Bucket
    from ..s3.location import ObjectLocation

SCHEME = "s3"


class Objects(Place):
    scheme = SCHEME
    traits = Traits(atomic="put", listable=True, collective=False, survives="job", from_memory=False)

    def __init__(self, location: str) -> None:
        from ..s3.location import parse

        self.location = parse(location)  # InvalidLocation when malformed
        self.name = str(self.location)

    @contextlib.contextmanager
    def single_writer(self, options: IOOptions, staging: StagingBuffers, recycle: bool) -> Iterator[Target]:
        """One upload of the object, visible whole once the block succeeded."""
        from ..s3.single import object_key, object_writer

        object_key(self.location, recycle)
        if options.backend == "gds":
            raise BackendUnavailable("gds", "saves write from host memory: use backend 'auto'")
        with object_writer(self.location, options, staging) as writer:
            yield Target(writer)

    @contextlib.contextmanager
    def opened(self, options: IOOptions) -> Iterator[Source]:
        from ..s3.single import pinned_object

        with pinned_object(self.location, options) as pinned:
            yield Source(pinned.index, lambda opts, staging, _backend: pinned.reader(opts, staging), pinned.read_at)

    def local_file(self, needs: str) -> str:
        raise UnsupportedLocation(self.name, SCHEME, needs)

    def owned_name(self, recycle: bool) -> str:
        from ..s3.single import object_key

        object_key(self.location, recycle)  # InvalidLocation for a bucket's root; no recycling
        return self.name

    def dcp_store(self, options: IOOptions) -> Any:
        from ..dcp.object_store import ObjectStore

        return ObjectStore(self.location, options)

    def holds_dcp(self) -> bool:
        return True

    def tier(self, options: IOOptions, keep: int) -> Any:
        return ObjectTier(self.location, options)


class ObjectTier:
    """An `s3://bucket/prefix` of checkpoint objects, through one Bucket (the options' part size and connections) made
    on first use (and made anew after a failed request, so an endpoint that comes back, or is changed in the
    environment, is used again)."""

    collective = False  # each rank writes and reads its own

    def __init__(self, location: ObjectLocation, options: IOOptions) -> None:
        self.location, self.options = location, options
        self._lock = threading.Lock()
        self._bucket: Bucket | None = None
        self.bucket()  # BackendUnavailable (no awscrt) or InvalidLocation (a bad endpoint) here, not in a drain

    def __str__(self) -> str:
        return str(self.location)

    def bucket(self) -> Bucket:
        """The tier's Bucket (made on first use)."""
        from ..s3.transfer import bucket_for

        with self._lock:
            if self._bucket is None:
                self._bucket = bucket_for(self.location.bucket, self.options)
            assert self._bucket is not None
            return self._bucket

    def url(self, step: int) -> str:
        """A step's object as an s3:// URL."""
        return str(self.location.child(name_of(step)))

    def steps(self) -> list[int]:
        """The steps of the checkpoint objects directly under the prefix (ckptio's names only)."""
        bucket = self.bucket().within(self.options.operation_seconds)
        found = [self._step(s.key) for s in bucket.listing(self.location.key("step-"))]
        return [step for step in found if step is not None]

    def put(self, source: str, step: int) -> None:
        """Upload the file `source` as `step`'s object (one PUT, or a multipart upload: visible only when whole);
        then abort the incomplete uploads of checkpoint names listed before it began (a failed or killed drain's)."""
        from ..s3.stale import abort_earlier, earlier_uploads

        bucket = self.bucket().within(self.options.operation_seconds)
        earlier = earlier_uploads(bucket, self.location.key("step-"), lambda key: self._step(key) is not None)
        bucket.put_file(self.location.key(name_of(step)), source)
        abort_earlier(bucket, earlier)

    def _step(self, key: str) -> int | None:
        """The step of a checkpoint's key directly under the prefix, None for any other key."""
        head = self.location.key("")
        return step_of(key[len(head) :]) if key.startswith(head) else None

    def remove(self, step: int) -> None:
        """Delete a step's object."""
        self.bucket().within(self.options.operation_seconds).delete(self.location.key(name_of(step)))

    @contextlib.contextmanager
    def readable(self, step: int) -> Iterator[str]:
        """A step's object as a URL (a load pins the version it first finds)."""
        yield self.url(step)

    def forget(self) -> None:
        """Drop the Bucket (after a failure): the next request makes a new one."""
        with self._lock:
            held, self._bucket = self._bucket, None
        if held is not None:
            held.close()


PLACE = Objects
