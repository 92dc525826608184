"""ckptio on object storage: `s3://bucket/prefix` locations through the AWS CRT (the optional extra `ckptio[s3]`).

location.py parses a location and reads its endpoint and credentials from the environment (no awscrt needed);
client.py holds the requests; transfer.py moves a checkpoint's bytes as the file backends do (a save composes
its object from the same write pieces and uploads it in parallel parts; a load reads its pieces by parallel
ranged GETs); single.py is a single-file checkpoint as one object. The DCP layer's store and commit on objects
are dcp/object_store.py and dcp/object_commit.py: this package knows nothing of DCP.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..options import IOOptions


def create_bucket(location: str | os.PathLike[str], options: IOOptions | None = None) -> bool:
    """Make the bucket of an `s3://bucket[/prefix]` location (ckptio's saves need it to exist: a missing one is
    ObjectStoreError 404 NoSuchBucket); True when made, False when it was already there and ours. The endpoint and
    region are the options' (else the environment's), the credentials the environment's, as every other call's."""
    from ..errors import OptionError
    from ..options import resolve
    from .location import SCHEME, parse
    from .transfer import bucket_for

    text = os.fsdecode(os.fspath(location))
    if not text.startswith(f"{SCHEME}://"):
        raise OptionError(f"create_bucket takes an s3://bucket location, not {text!r}")
    parsed = parse(text)
    bucket = bucket_for(parsed.bucket, resolve(options)).within(resolve(options).operation_seconds)
    try:
        return bucket.create(bucket.region)
    finally:
        bucket.close()
