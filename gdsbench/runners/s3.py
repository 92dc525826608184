"""The `s3` engine: PUT (`write`) and GET (`read`) of whole objects of `io_size` bytes from `threads` slots at
once, through the AWS CRT (runners/s3_client.py), every request timed (runners/s3_requests.py).

Each slot has its own objects, `<prefix>/<file_size>-<io_size>/<slot>.<n>`, enough to hold `file_size` bytes
(as a fio job's file), written or read in one pass or round and round until `runtime`. What it guards against:
- a read of objects never written (a 404, or a shorter object): every object is checked first and written,
  unmeasured, when missing or short; the row says so;
- a write the store did not keep: after a write every object is listed and must hold `io_size` bytes;
- retries hiding failures: the CRT's are off, the first failure stops the case and the row names them all;
- the first request's connection set-up (pitfall 7 of docs/ceph.md): `lat_first_us`, not in the percentiles;
- radosgw keeping deleted data until its garbage collection (2 h by default): `rgw_gc: true` runs it after
  every write case and at the end (a local cluster's admin tool; it fills the OSD otherwise);
- credentials in configs or rows: they come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY only.
Objects, and a bucket, the sweep created are removed when it ends (keep_files: kept); nothing else ever.
"""

from __future__ import annotations

import contextlib
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import OBJECTS, Column, Traits
from gdsbench.errors import ToolError
from gdsbench.keys import Key, boolean, size, text
from gdsbench.runners import ceph
from gdsbench.runners.base import JOB_SPREAD, Measurement, RunContext, axes_of
from gdsbench.runners.resources import Usage
from gdsbench.runners.s3_client import Bucket, bucket_name, endpoint_url
from gdsbench.runners.s3_requests import after_ramp, drive, failures, measure, series, table
from gdsbench.units import size_label

#: Where the endpoint comes from when the config names none (the AWS SDKs' variables, in their order).
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
CREDENTIALS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
MIN_PART = 5 << 20  # S3's smallest part of a multipart upload (but the last)
MAX_OBJECTS_PER_SLOT = 10_000
CLEANUP_WORKERS = 8
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}(/[A-Za-z0-9][A-Za-z0-9._-]{0,63}){0,7}")


def part_size(value: Any) -> int:
    """A multipart part size: a size of at least 5 MiB (S3's smallest part)."""
    parsed = size(value)
    if parsed < MIN_PART:
        raise ValueError("below 5 MiB, S3's smallest part")
    return parsed


def key_prefix(value: Any) -> str:
    """Where the engine's objects go: up to 8 names of letters, digits, '.', '_', '-', joined by '/'."""
    if not isinstance(value, str) or not _PREFIX.fullmatch(value) or ".." in value.split("/"):
        raise ValueError("not a key prefix of plain names")
    return value


class S3Runner:
    """PUT and GET of whole objects through the AWS CRT, retries off, every request timed."""

    name = "s3"
    description = "S3 PUT (write) / GET (read) of io_size objects from `threads` slots (AWS CRT, no retries)"
    patterns = frozenset({Pattern.WRITE, Pattern.READ})
    transfers = frozenset({Transfer.CPU_ONLY})
    options = (
        Key(
            "endpoint",
            endpoint_url,
            "an http:// or https:// URL such as http://127.0.0.1:7480",
            None,
            "the S3 endpoint (default: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL); credentials from AWS_* only",
        ),
        Key(
            "bucket",
            bucket_name,
            "an S3 bucket name (3-63 lowercase letters, digits, '.', '-')",
            "gdsbench",
            "the bucket (made, and removed at the end, when missing)",
        ),
        Key("prefix", key_prefix, "a key prefix of plain names joined by '/'", "gdsbench", "where objects go"),
        Key("region", text, "a region name such as us-east-1", "us-east-1", "the region requests are signed for"),
        Key(
            "part_size",
            part_size,
            "a size of at least 5M",
            16 << 20,
            "multipart upload and ranged GET part size (objects above it go in parts, in parallel)",
        ),
        Key(
            "rgw_gc",
            boolean,
            "true or false",
            False,
            "radosgw: collect garbage after each write and at the end (radosgw-admin, /etc/ceph/ceph.conf)",
        ),
        ceph.OSD_CACHE,
    )
    axes = axes_of(("pattern", "transfer", "io_size", "threads"), options)
    traits = Traits(OBJECTS)
    columns = (
        Column("lat_first_us", "us", "the case's first request (a new connection), kept out of the percentiles"),
        *JOB_SPREAD,
        Column("requests", "count", "the S3 requests measured (PUTs or GETs, after any ramp)"),
    )

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why this case cannot run here: no awscrt, no endpoint or credentials, the wrong transfer or hosts."""
        try:
            import awscrt.s3  # noqa: F401
        except ImportError:
            return "the s3 engine needs the AWS CRT: pip install 'gdsbench[s3]' (awscrt)"
        if ctx.hosts:
            return "the s3 engine runs on this host only (not through fio servers)"
        if case.transfer is not Transfer.CPU_ONLY:
            return "the s3 engine moves host memory over HTTP, no page cache between: use CPU_ONLY"
        access = access_missing(case)
        if access:
            return access
        per_slot = objects_per_slot(case, ctx)
        if per_slot > MAX_OBJECTS_PER_SLOT:
            return (
                f"{per_slot} objects per slot (file_size {size_label(ctx.file_size)} / io_size "
                f"{size_label(case['io_size'])}), more than {MAX_OBJECTS_PER_SLOT}: raise io_size or lower file_size"
            )
        return ceph_tools_missing(case)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The requests a case makes, readable in --dry-run and in the results."""
        target = f"{endpoint(case) or '$' + ENDPOINT_ENV[1]}/{case['bucket']}/{geometry(case, ctx)}"
        operation = "PutObject" if case.pattern.is_write else "GetObject"
        argv = ["python-api", f"awscrt.s3.S3Client {operation}", target, f"slots={case['threads']}"]
        argv += [f"objects_per_slot={objects_per_slot(case, ctx)}", f"object_size={case['io_size']}"]
        argv += [f"part_size={case['part_size']}", f"region={case['region']}", "retries=none"]
        return argv + ([f"runtime={ctx.runtime:g}"] if ctx.runtime else [])

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Make sure the objects are there (reads), run the requests, check what was stored (writes)."""
        place = Place.of(case)
        bucket = place.open(case["part_size"])
        try:
            return self._run(bucket, place, case, ctx)
        finally:
            bucket.close()

    def _run(self, bucket: Bucket, place: Place, case: Case, ctx: RunContext) -> Measurement:
        """The case on an open bucket."""
        own_bucket(bucket, place, case, ctx)
        keys = object_keys(case, ctx)
        notes = _prepare_objects(bucket, place, keys, case, ctx)
        cache = None
        if not case.pattern.is_write:
            cache, cache_note = _cache(case)
            notes.append(cache_note)
        with Usage() as usage:
            requests, wall = drive(
                bucket, keys, case["io_size"], case.pattern.is_write, ctx.runtime, ctx.ramp_time or 0.0
            )
        failures(requests)
        if case.pattern.is_write:
            _check_stored(bucket, case, ctx, {r.key for r in requests})
            notes += collect_garbage(case)
        first = min(requests, key=lambda r: r.start)
        kept, window = after_ramp(requests, wall, ctx.ramp_time or 0.0)
        measured = measure(kept, window, first=first)
        samples = series(requests, ctx.series_ms / 1000) if ctx.series_ms else ()
        note = "; ".join(n for n in notes if n) or None
        figures = {**measured.figures, "requests": len(kept)}
        measured = replace(measured, raw=table(requests), series=samples, cache=cache, note=note, figures=figures)
        return replace(measured, **usage.columns())


@dataclass(frozen=True)
class Place:
    """Where objects live (an endpoint's bucket), enough to reach it again at the sweep's end."""

    endpoint: str
    bucket: str
    region: str

    @classmethod
    def of(cls, case: Case) -> Place:
        """A case's bucket at its endpoint (the case's, else the environment's), signed for its region."""
        return cls(str(endpoint(case)), case["bucket"], case["region"])

    def open(self, part_size: int = MIN_PART) -> Bucket:
        """A client of the bucket."""
        return Bucket(self.endpoint, self.bucket, self.region, part_size)


@dataclass(frozen=True)
class RemoveObjects:
    """At the sweep's end: delete the objects it created (one already gone is fine)."""

    place: Place
    keys: tuple[str, ...]

    def __call__(self) -> None:
        bucket = self.place.open()
        with ThreadPoolExecutor(CLEANUP_WORKERS) as pool:
            list(pool.map(lambda key: _quietly(bucket.delete, key), self.keys))


@dataclass(frozen=True)
class RemoveBucket:
    """At the sweep's end: remove the bucket it created (S3 refuses while anything else is in it)."""

    place: Place

    def __call__(self) -> None:
        _quietly(self.place.open().remove)


@dataclass(frozen=True)
class CollectGarbage:
    """At the sweep's end, after the removals: radosgw's garbage collection."""

    def __call__(self) -> None:
        _quietly(ceph.collect_rgw_garbage)


def _quietly(call: Any, *args: Any) -> None:
    """Clean-up that may find its work done already (or the service gone): never stops the rest."""
    with contextlib.suppress(ToolError):
        call(*args)


def endpoint(case: Case) -> str | None:
    """The case's endpoint, else the environment's (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL), checked alike."""
    if case["endpoint"]:
        return case["endpoint"]
    for name in ENDPOINT_ENV:
        if os.environ.get(name):
            return endpoint_url(os.environ[name])
    return None


def access_missing(case: Case) -> str | None:
    """Why a case cannot reach the service: no endpoint (the case's or the environment's), or no credentials."""
    if endpoint(case) is None:
        return f"no S3 endpoint: set `endpoint` or {ENDPOINT_ENV[1]}"
    missing = [name for name in CREDENTIALS_ENV if not os.environ.get(name)]
    if missing:
        return f"no S3 credentials: set {' and '.join(missing)} (never in a config)"
    return None


def objects_per_slot(case: Case, ctx: RunContext) -> int:
    """How many objects of io_size one slot needs to hold file_size bytes."""
    return -(-ctx.file_size // case["io_size"])


def geometry(case: Case, ctx: RunContext) -> str:
    """The key prefix of a case's objects: cases of one file_size and io_size share them."""
    return f"{case['prefix']}/{ctx.file_size}-{case['io_size']}/"


def object_keys(case: Case, ctx: RunContext) -> list[list[str]]:
    """Each slot's object keys."""
    count = objects_per_slot(case, ctx)
    return [[f"{geometry(case, ctx)}{slot}.{n}" for n in range(count)] for slot in range(case["threads"])]


def own_bucket(bucket: Bucket, place: Place, case: Case, ctx: RunContext) -> None:
    """Make the bucket when it is missing, and remember to remove it (then radosgw's garbage) at the end."""
    if bucket.exists():
        return
    bucket.create()
    undo_at_end(RemoveBucket(place), case, ctx)


def undo_at_end(undo: RemoveObjects | RemoveBucket, case: Case, ctx: RunContext) -> None:
    """Remove what the sweep made when it ends (unless keep_files), then, with rgw_gc, collect radosgw's garbage."""
    if ctx.resources.keep_files:
        return
    if case["rgw_gc"]:
        ctx.resources.close_at_end(CollectGarbage())  # closers run newest first: registered first, it runs last
    ctx.resources.close_at_end(undo)


def _prepare_objects(bucket: Bucket, place: Place, keys: list[list[str]], case: Case, ctx: RunContext) -> list[str]:
    """Remember the objects this case will create; for a read, write the missing or short ones first."""
    stored = bucket.sizes(geometry(case, ctx))
    flat = [key for slot in keys for key in slot]
    new = tuple(key for key in flat if key not in stored)
    if new:
        undo_at_end(RemoveObjects(place, new), case, ctx)
    short = [[key for key in slot if stored.get(key) != case["io_size"]] for slot in keys]
    if case.pattern.is_write or not any(short):
        return []
    failures(drive(bucket, [slot for slot in short if slot], case["io_size"], True, None)[0])
    written = sum(map(len, short))
    return [f"{written} of {len(flat)} objects written first (unmeasured): a read of objects never written fails"]


def _cache(case: Case) -> tuple[str | None, str]:
    """A read's cache state: cold where the OSDs' caches were dropped, else unknown (the service's own)."""
    if case["osd_cache"] == "drop":
        return ceph.osd_cache(case)
    return None, "the service's caches left as they were (osd_cache: keep): a read may come from its memory"


def _check_stored(bucket: Bucket, case: Case, ctx: RunContext, written: set[str]) -> None:
    """Every object written holds io_size bytes in the store, else the case fails."""
    stored = bucket.sizes(geometry(case, ctx))
    wrong = sorted(key for key in written if stored.get(key) != case["io_size"])
    if wrong:
        raise ToolError(
            f"{len(wrong)} of {len(written)} objects written do not hold {case['io_size']} bytes in the "
            f"store (first: {wrong[0]}, {stored.get(wrong[0], 'missing')})"
        )


def collect_garbage(case: Case) -> list[str]:
    """radosgw's garbage collected after a write (the space of the objects it overwrote), when asked."""
    if not case["rgw_gc"]:
        return []
    ceph.collect_rgw_garbage()
    return ["radosgw garbage collected after the write (unmeasured)"]


def ceph_tools_missing(case: Case) -> str | None:
    """Why rgw_gc or osd_cache drop cannot act on the cluster (they need its admin tools and /etc/ceph/ceph.conf)."""
    wanted = [
        name for name, on in (("rgw_gc", case["rgw_gc"]), ("osd_cache drop", case.get("osd_cache") == "drop")) if on
    ]
    if not wanted:
        return None
    tools = [tool for tool, on in (("radosgw-admin", case["rgw_gc"]), ("ceph", case.get("osd_cache") == "drop")) if on]
    if not ceph.has_admin(*tools):
        return (
            f"{' and '.join(wanted)} need {' and '.join(tools)} and {ceph.CONF} (a Ceph cluster's admin access, "
            "as gdsbench ceph up gives)"
        )
    return other_cluster(case, True)


def other_cluster(case: Case, acts: bool) -> str | None:
    """Why acting on the cluster of /etc/ceph/ceph.conf (rgw_gc, dropping OSD caches) would act on another than the
    case's endpoint's: that conf names radosgw endpoints (as `gdsbench ceph up` writes them), none of them the case's.
    A conf that names none (an existing cluster's) is taken as it is."""
    if not acts or not ceph.CONF.exists():
        return None
    served = ceph.rgw_endpoints()
    host = urlsplit(str(endpoint(case))).netloc
    if not served or host in served:
        return None
    return (
        f"{ceph.CONF} is the conf of a cluster whose radosgw is {', '.join(served)}, not this case's "
        f"endpoint {host}: rgw_gc and dropping OSD caches would act on that cluster"
    )


ENGINE = S3Runner()
