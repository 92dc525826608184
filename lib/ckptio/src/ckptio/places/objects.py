"""Objects of an S3 bucket (`s3://bucket/prefix`, the extra ckptio[s3]): a single-file save as one upload, a load
pinned by the object's ETag, DCP checkpoints under a prefix, tiers of step objects. The s3 package is its
implementation; endpoint, region and credentials come from the environment."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..errors import BackendUnavailable, UnsupportedLocation
from ..memory import StagingBuffers
from ..options import IOOptions
from .base import Place, Source, Target, Traits

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

    def tier(self, options: IOOptions) -> Any:
        from ..tier_stores import ObjectTier

        return ObjectTier(self.location, options)


PLACE = Objects
