"""ckptio on S3 (issue 33): where the engines built on ckptio (fastpersist, dcp_fast, tiered) put a checkpoint in an
object store, `s3://bucket/prefix`, as ckptio reaches it (endpoint and credentials from AWS_* only).

fastpersist and dcp_fast save and load there where a case's matrix block names a `bucket` (the s3 engine's keys,
the same Key objects; a sweep's top-level `bucket` is its S3 engines', never theirs): each run in a fresh random
prefix of the bucket (ladder.private_prefix: the bucket made when missing and removed at the sweep's end only
then; every object under the prefix this run's, deleted after it). Their rows say `stores_on: objects` and are
held to the s3 engine's best PUT (saves) or GET (loads) of the run, as the s3torch engines' are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import FILES, FILES_CEILING, Traits
from gdsbench.runners import s3
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint import ladder, s3torch
from gdsbench.runners.checkpoint.base import Package

#: The s3 engine's keys the ckptio engines take (the region signs gdsbench's own listing and clean-up only).
KEYS = ("endpoint", "bucket", "prefix", "region", "rgw_gc")
OPTIONS = tuple(key for key in s3.S3Runner.options if key.name in KEYS)
AWSCRT = Package("awscrt", "pip install 'ckptio[s3]'")
#: Taken from a case's own matrix block only: a block without `bucket` checkpoints to files.
BLOCK_OPTIONS = frozenset({"bucket"})
#: Files in the sweep's directory, or objects where a case names a bucket (held to the s3 engine there).
TRAITS = Traits(FILES, ceiling=FILES_CEILING, objects_when=("bucket",))


def on_objects(case: Case) -> bool:
    """Whether a case's checkpoint goes to S3 (its block names a bucket)."""
    return case.get("bucket") is not None


def reason(case: Case) -> str | None:
    """Why S3 cannot be reached as ckptio reaches it: no endpoint or credentials, the Ceph tools rgw_gc needs, or an
    `endpoint:` other than the environment's (ckptio reads AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL only)."""
    found = s3.access_missing(case) or s3.ceph_tools_missing(case)
    if found:
        return found
    ckptio_reads = s3.endpoint(case.with_params(endpoint=None))
    if case["endpoint"] and case["endpoint"] != ckptio_reads:
        return (
            f"ckptio reads its endpoint from {' or '.join(s3.ENDPOINT_ENV)} only ({ckptio_reads or 'unset'}), not "
            f"this case's {case['endpoint']}: set {s3.ENDPOINT_ENV[0]} to it"
        )
    return None


def case_reason(case: Case) -> str | None:
    """Why a ckptio engine's case cannot run on S3: S3 out of reach, a cache state S3 lacks (s3torch's rules), a
    transfer through the page cache, or a training loop (the tiered engine's tiers [s3] measures that one)."""
    if case.pattern is Pattern.TRAIN:
        return "a training loop saving straight to S3 is the tiered engine's (tiers: [s3])"
    if case.transfer is not Transfer.CPU_ONLY:
        return "checkpoints in S3 move host memory over HTTP, no page cache between: use transfer CPU_ONLY"
    return reason(case) or s3torch.cache_reason(case) or s3torch.cluster_reason(case)


@dataclass(frozen=True)
class Place:
    """A run's own prefix: gdsbench's client of the bucket, the prefix, and the checkpoint's `s3://` location."""

    bucket: Any
    prefix: str
    url: str

    def stored(self) -> dict[str, int]:
        """Every object under the prefix (all this run's) and its size."""
        return self.bucket.sizes(self.prefix + "/")


@contextlib.contextmanager
def fresh_place(case: Case, ctx: RunContext, engine: str, name: str) -> Iterator[Place]:
    """A fresh prefix of the case's bucket for one run, `name` the checkpoint under it; removed after the run."""
    with ladder.private_prefix(case, ctx, engine) as (bucket, prefix):
        yield Place(bucket, prefix, f"s3://{case['bucket']}/{prefix}/{name}")


def location(case: Case, engine: str, path: str) -> str:
    """Where a case's checkpoint goes, as --dry-run shows it: a fresh prefix under the case's, the path's name."""
    return f"s3://{case['bucket']}/{case['prefix']}/{engine}.*/{Path(path).name}"


def set_cache(case: Case, place: Place) -> tuple[str, str]:
    """The cache state before a load (s3torch's: every object read once, or the OSDs' caches dropped)."""
    return s3torch.object_cache(case, place.bucket, place.stored())
