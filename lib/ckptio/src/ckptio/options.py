"""IOOptions: every tuning knob of the checkpoint library in one frozen value, its defaults named once.

Tuning changes speed, never results: a checkpoint saved with any options loads bit-exact with any
other. Defaults follow the host the process runs on (the cores it may use, its NUMA nodes, how many ranks
of the job share it), and an
experiment can override each one without code changes through a `CKPTIO_<FIELD>` environment
variable (e.g. `CKPTIO_THREADS=16`), read when an IOOptions is built. gdsbench 0.1's `GDSBENCH_IO_<FIELD>`
is still read where the new name is not set.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import OptionError
from .memory import faster_fresh_pages

MiB = 1 << 20
#: S3's bounds on a multipart upload's part (every part but the last): 5 MiB to 5 GiB.
PART_LIMITS = (5 * MiB, 5 << 30)
BACKENDS = ("auto", "direct", "buffered", "gds")
#: How a save makes its bytes durable: one fsync after the last write, or writeback started while the
#: save is still writing so the final fsync finds little left to do (backends/posix.py; docs/benchmarks.md).
FLUSHES = ("end", "overlap", "dsync")
#: Pages of the new memory a load reads into: "auto" (resolved when the options are built: memory.faster_fresh_pages)
PAGES = ("auto", "huge", "small")
#: A signing region's name (us-east-1, eu-central-2, a radosgw zonegroup's).
REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
ENV_PREFIX = "CKPTIO_"
#: Every prefix read, the first set one winning: this one, then gdsbench 0.1's.
ENV_PREFIXES = (ENV_PREFIX, "GDSBENCH_IO_")


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def numa_nodes() -> int:
    """NUMA nodes of this machine (1 where sysfs does not say)."""
    nodes = Path("/sys/devices/system/node")
    found = list(nodes.glob("node[0-9]*")) if nodes.is_dir() else []
    return max(1, len(found))


#: Variables in which launchers say how many processes of the job share this host (torchrun, Open MPI, Slurm).
LOCAL_RANKS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


def local_ranks() -> int:
    """How many processes of this job share the host, as its launcher says (1 outside one, or unparsable)."""
    for name in LOCAL_RANKS:
        value = os.environ.get(name, "")
        if value.isdigit() and 0 < int(value) <= 1 << 16:
            return int(value)
    return 1


def default_threads() -> int:
    """I/O threads: one per usable core, shared among the job's ranks on this host, at least 4 (an I/O
    thread mostly waits on the device; NVMe wants several requests in flight) and at most 32 (beyond,
    the GIL-held parts dominate)."""
    return min(32, max(4, usable_cores() // local_ranks()))


def default_prefault_threads() -> int:
    """Threads that fault in fresh destination memory ahead of reads: the cores of one NUMA node (first
    touch is CPU work), shared among the job's ranks on this host, at least 1, at most 8."""
    return max(1, min(8, usable_cores() // numa_nodes() // local_ranks()))


def _from_env(name: str, default: Any) -> Any:
    """The environment's override of one field (CKPTIO_<NAME>), parsed like its default."""
    variable = next((p + name.upper() for p in ENV_PREFIXES if p + name.upper() in os.environ), None)
    if variable is None:
        return default() if callable(default) else default
    raw = os.environ[variable]
    if isinstance(default, str):
        return raw
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"{variable}={raw!r}: expected an integer") from None


def _env_field(default: Any) -> Any:
    """A dataclass field whose default the environment may override (the name is filled in later)."""
    return field(default=None, metadata={"default": default})


@dataclass(frozen=True)
class IOOptions:
    """How the checkpoint library moves bytes: speed only, never what is saved or loaded.

    Args:
        threads: parallel I/O workers for saves and loads (default: usable cores over the ranks sharing
            the host, as the launcher says, 4 to 32).
        buffer_bytes: reusable aligned staging memory of every save and load (single file, Checkpointer,
            DCP Writer and Reader): as many buffers of one chunk (a file's own chunk when loading; plus a
            codec's margin when compressing) as fit, at least one, so a file whose chunk exceeds this
            stages one chunk (default 64 MiB).
        chunk_bytes: I/O and checksum granularity of a save, a multiple of 4096 (default 16 MiB);
            a load reads with the chunking the file was written with.
        backend: "auto" (O_DIRECT where the file system takes it, else buffered with a
            DirectIOFallbackWarning; CUDA map_location reads with "gds" when kvikio can), "direct"
            (O_DIRECT, same fallback), "buffered" (page cache) or "gds" (kvikio, loads to CUDA only).
        prefault_threads: threads faulting fresh load memory in ahead of the reads (default: cores
            of one NUMA node, at most 8).
        flush: "end" (one fsync after the last write), "overlap" (writeback started while later
            chunks are still being written, then the fsync) or "dsync" (every write durable before it
            returns); all are equally durable, only their speed differs.
        overlap_bytes: with flush "overlap", an fdatasync starts each time this much more has been
            written (default 256 MiB: a few chunks per thread).
        span_bytes: a load maps storages smaller than this into shared mappings of up to this size, one
            mapping per larger storage (default 64 MiB).
        scratch_bytes: the most reshard scratch memory a DCP Reader holds at once; items needing more are
            read one by one (default 1 GiB).
        fresh_pages: the pages of new memory a load reads into (`load`'s tensors): "huge" (transparent huge
            pages), "small" (4 KiB pages, even where THP is `always`) or "auto" (the default: "small" where THP
            is `never` or a virtio balloon reports free pages to the host, "huge" otherwise; the field then
            holds the choice).
        part_bytes: an object store's part: a save uploads each object (a rank's, a single file's, a tier's
            drain) as a multipart upload of parts of this size in parallel, and a load's ranged GET above it is
            split into parallel GETs of this size; 5 MiB to 5 GiB (S3's bounds; default 16 MiB).
        object_connections: requests in flight to an object store: the cap on the S3 client's connections (an
            upload's parts, a load's GETs) and how many pieces a load requests at once; network latency, not
            the cores, sets how many it takes (default 8).
        request_seconds: the most one request to an object store may take, from sent to its last byte (a part, a
            ranged GET, a listing page); past it the request is cancelled and the call fails (default 120: a
            16 MiB part at 140 KB/s).
        object_retries: how often a request is retried after a transient failure (a 5xx, SlowDown, a reset
            connection), with exponential back-off and jitter capped at 5 s; 0 to 10 (default 2).
        operation_seconds: the most one call on an object store may take in all, every request and retry
            included: a single-file save or load, a tier's drain, listing or removal (default 3600).
        endpoint: the object store's endpoint, http(s)://host[:port] without credentials (default "": the
            environment's AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, else AWS's regional endpoint).
        region: the region requests are signed for (default "": AWS_REGION or AWS_DEFAULT_REGION, else
            us-east-1). Credentials are never an option: only the environment's AWS_* variables hold them.
    """

    threads: int = _env_field(default_threads)
    buffer_bytes: int = _env_field(64 * MiB)
    chunk_bytes: int = _env_field(16 * MiB)
    backend: str = _env_field("auto")
    prefault_threads: int = _env_field(default_prefault_threads)
    flush: str = _env_field("end")
    overlap_bytes: int = _env_field(256 * MiB)
    span_bytes: int = _env_field(64 * MiB)
    scratch_bytes: int = _env_field(1024 * MiB)
    fresh_pages: str = _env_field("auto")
    # part_bytes, object_connections: the knee of benchmarks/s3_options.py (1 GiB to a one-host Ceph; docs/api.md)
    part_bytes: int = _env_field(16 * MiB)
    object_connections: int = _env_field(8)
    request_seconds: int = _env_field(120)
    object_retries: int = _env_field(2)
    operation_seconds: int = _env_field(3600)
    endpoint: str = _env_field("")
    region: str = _env_field("")

    def __post_init__(self) -> None:
        """Fill unset fields from the environment or the host, then validate every field; "auto" pages become
        the measured choice."""
        for f in fields(self):
            if getattr(self, f.name) is None:
                object.__setattr__(self, f.name, _from_env(f.name, f.metadata["default"]))
        _check(self)
        if self.fresh_pages == "auto":
            object.__setattr__(self, "fresh_pages", faster_fresh_pages())

    def with_(self, **changes: Any) -> IOOptions:
        """A copy with some fields changed (validated like the original)."""
        return replace(self, **changes)


def _check(o: IOOptions) -> None:
    """Refuse values that cannot work, naming the field and what it takes."""
    positive = ("threads", "prefault_threads", "overlap_bytes", "span_bytes", "scratch_bytes", "object_connections")
    for name in (*positive, "request_seconds", "operation_seconds"):
        if not isinstance(getattr(o, name), int) or getattr(o, name) < 1:
            raise OptionError(f"IOOptions.{name} must be an integer >= 1, not {getattr(o, name)!r}")
    if not isinstance(o.chunk_bytes, int) or o.chunk_bytes <= 0 or o.chunk_bytes % 4096:
        raise OptionError(f"IOOptions.chunk_bytes must be a positive multiple of 4096, not {o.chunk_bytes!r}")
    if not isinstance(o.buffer_bytes, int) or o.buffer_bytes < o.chunk_bytes:
        raise OptionError(f"IOOptions.buffer_bytes ({o.buffer_bytes!r}) must hold at least one chunk ({o.chunk_bytes})")
    low, high = PART_LIMITS
    if not isinstance(o.part_bytes, int) or not low <= o.part_bytes <= high:
        raise OptionError(f"IOOptions.part_bytes must be an integer from 5 MiB to 5 GiB (S3's), not {o.part_bytes!r}")
    if isinstance(o.object_retries, bool) or not isinstance(o.object_retries, int) or not 0 <= o.object_retries <= 10:
        raise OptionError(f"IOOptions.object_retries must be an integer from 0 to 10, not {o.object_retries!r}")
    if o.backend not in BACKENDS:
        raise OptionError(f"IOOptions.backend must be one of {BACKENDS}, not {o.backend!r}")
    if o.flush not in FLUSHES:
        raise OptionError(f"IOOptions.flush must be one of {FLUSHES}, not {o.flush!r}")
    if o.fresh_pages not in PAGES:
        raise OptionError(f"IOOptions.fresh_pages must be one of {PAGES}, not {o.fresh_pages!r}")
    _check_store(o)


def _check_store(o: IOOptions) -> None:
    """The object store's endpoint (http(s)://host[:port], no credentials) and region (a plain name), where given."""
    from .errors import InvalidLocation
    from .s3.location import checked_endpoint

    if not isinstance(o.endpoint, str) or not isinstance(o.region, str):
        raise OptionError(f"IOOptions.endpoint and region must be strings, not {o.endpoint!r} and {o.region!r}")
    if o.endpoint:
        try:
            checked_endpoint(o.endpoint)
        except InvalidLocation as exc:
            raise OptionError(f"IOOptions.endpoint: {exc}") from None
    if o.region and not REGION.fullmatch(o.region):
        raise OptionError(f"IOOptions.region must be a region name such as us-east-1, not {o.region!r}")


def resolve(options: IOOptions | None) -> IOOptions:
    """The options a call uses: the caller's, else the host defaults."""
    return options if options is not None else IOOptions()


def resolve_host(options: IOOptions | None, who: str) -> IOOptions:
    """`resolve` for a layer that moves bytes through host memory (`who`: "Writer writes", "Reader reads"):
    backend 'gds' is refused, it is for load() only."""
    resolved = resolve(options)
    if resolved.backend == "gds":
        raise OptionError(f"{who} through host memory: backend 'gds' is for load(); use 'auto', 'direct' or 'buffered'")
    return resolved
