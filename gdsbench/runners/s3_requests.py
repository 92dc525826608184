"""S3 requests driven from `threads` slots at once, each timed on its own, and the case's figures from them.

Each slot PUTs or GETs its own objects one after the other (one pass, or round and round until `runtime`);
the first failure stops every slot, and every failed request is named. The case's first request (the one
that opened the first connection: pitfall 7 of docs/ceph.md, 3x the others on a cold radosgw) is kept apart:
`lat_first_us`, outside the percentiles; bandwidth counts every byte over the whole wall time.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np

from gdsbench.errors import ToolError
from gdsbench.runners.base import Measurement, Sample
from gdsbench.runners.s3_client import Bucket, S3RequestError

#: Room for every object's body to start at its own offset of one random buffer (no two objects alike).
PAYLOAD_SLACK = 1 << 20
_STRIDE = 4099  # a prime, not a multiple of any block size: no two objects share an aligned block
PERCENTILES = (50.0, 90.0, 99.0, 99.9)  # lat_p50_us, lat_p90_us, lat_p99_us, lat_p999_us
FAILURES_NAMED = 5


@dataclass(frozen=True)
class Request:
    """One timed request: its slot, object, start (seconds from the case's start), duration, bytes, error."""

    slot: int
    key: str
    start: float
    seconds: float
    bytes: int
    error: str | None = None


@functools.lru_cache(maxsize=1)
def payload(size: int) -> memoryview:
    """Random bytes enough for any object of `size` bytes to start at its own offset."""
    return memoryview(np.random.default_rng(size).bytes(size + PAYLOAD_SLACK))


def body(size: int, index: int) -> memoryview:
    """Object number `index`'s body: `size` random bytes unlike every other object's."""
    offset = index * _STRIDE % PAYLOAD_SLACK
    return payload(size)[offset : offset + size]


def drive(
    bucket: Bucket, keys: list[list[str]], size: int, write: bool, runtime: float | None, ramp: float = 0.0
) -> tuple[list[Request], float]:
    """Every slot's requests (a pass over its keys, or rounds until `ramp` + `runtime`), and the wall time to the
    last end."""
    stop, origin = threading.Event(), time.perf_counter()
    deadline = origin + ramp + runtime if runtime else None
    slot = functools.partial(_slot, bucket, size=size, write=write, origin=origin, deadline=deadline, stop=stop)
    with ThreadPoolExecutor(len(keys), thread_name_prefix="gdsbench-s3") as pool:
        done = [request for slot_done in pool.map(slot, range(len(keys)), keys) for request in slot_done]
    return done, max((r.start + r.seconds for r in done), default=0.0)


def _slot(
    bucket: Bucket,
    number: int,
    keys: list[str],
    *,
    size: int,
    write: bool,
    origin: float,
    deadline: float | None,
    stop: threading.Event,
) -> list[Request]:
    """One slot's requests, in order, until its pass (or the deadline) ends or any slot fails."""
    into = memoryview(bytearray(0 if write else size))
    call: Callable[[str, int], int] = (
        (lambda key, i: _put(bucket, key, size, i)) if write else (lambda key, _: bucket.get(key, into))
    )
    done: list[Request] = []
    index = 0
    while not stop.is_set():
        key = keys[index % len(keys)]
        started = time.perf_counter()
        try:
            moved, error = call(key, number * len(keys) + index % len(keys)), None
            if moved != size:
                error = f"GetObject {bucket.name}/{key}: {moved} bytes of {size}"
        except S3RequestError as exc:
            moved, error = 0, str(exc)
        ended = time.perf_counter()
        done.append(Request(number, key, started - origin, ended - started, moved, error))
        index += 1
        if error:
            stop.set()
        if (deadline is None and index == len(keys)) or (deadline is not None and ended >= deadline):
            break
    return done


def _put(bucket: Bucket, key: str, size: int, index: int) -> int:
    """PUT one object; its size."""
    bucket.put(key, body(size, index))
    return size


def failures(requests: list[Request]) -> None:
    """ToolError naming the failed requests (how many of how many, by reason), if any failed."""
    failed = [r for r in requests if r.error]
    if not failed:
        return
    kinds = Counter(_kind(r.error or "") for r in failed)
    named = "; ".join(f"{count}x {kind}" for kind, count in kinds.most_common(FAILURES_NAMED))
    first = min(failed, key=lambda r: r.start)
    raise ToolError(
        f"{len(failed)} of {len(requests)} S3 requests failed, none retried ({named}); first: {first.error}"
    )


def _kind(error: str) -> str:
    """A failure's reason without its object (`GetObject b/k: HTTP 503 SlowDown` -> `GetObject HTTP 503 SlowDown`)."""
    operation, _, reason = error.partition(" ")
    return f"{operation} {reason.partition(': ')[2] or reason}"


def after_ramp(requests: list[Request], wall: float, ramp: float) -> tuple[list[Request], float]:
    """The requests that started once `ramp` seconds had passed, and the wall time from then (fio's ramp_time)."""
    if not ramp:
        return requests, wall
    kept = [replace(r, start=r.start - ramp) for r in requests if r.start >= ramp]
    if not kept:
        raise ToolError(f"no request started after ramp_time {ramp:g}s: the case ended within it")
    return kept, wall - ramp


def measure(requests: list[Request], wall: float, first: Request | None = None) -> Measurement:
    """The case's figures: bandwidth and IOPS over the wall time, latency percentiles (nearest rank, as fio) of
    every request but the case's first (`lat_first_us`, given where a ramp left it out); per-slot bandwidths and
    times; every request as CSV."""
    first = first or min(requests, key=lambda r: r.start)
    rest = [r for r in requests if r is not first] or [first]
    latencies = np.array([r.seconds for r in rest]) * 1e6
    p50, p90, p99, p999 = (float(np.percentile(latencies, p, method="inverted_cdf")) for p in PERCENTILES)
    total = sum(r.bytes for r in requests)
    ends: dict[int, float] = {}
    moved: Counter[int] = Counter()
    for r in requests:
        ends[r.slot] = max(ends.get(r.slot, 0.0), r.start + r.seconds)
        moved[r.slot] += r.bytes
    slot_bw = [moved[s] / ends[s] for s in ends if ends[s] > 0]
    return Measurement(
        bytes=total,
        seconds=wall,
        bw_bytes=total / wall if wall > 0 else 0.0,
        iops=len(requests) / wall if wall > 0 else None,
        lat_mean_us=float(latencies.mean()),
        lat_stdev_us=float(latencies.std()),
        lat_p50_us=p50,
        lat_p90_us=p90,
        lat_p99_us=p99,
        lat_p999_us=p999,
        raw=table(requests),
        figures={
            "lat_first_us": first.seconds * 1e6,
            "seconds_min": min(ends.values()),
            "bw_min_bytes": min(slot_bw, default=None),
            "bw_max_bytes": max(slot_bw, default=None),
            "spread_seconds": wall - min(ends.values()) if len(ends) > 1 else None,
        },
    )


def series(requests: list[Request], window_s: float) -> tuple[Sample, ...]:
    """Each slot's bandwidth and mean latency per window of `window_s`, by when its requests ended (as fio's logs)."""
    windows: dict[tuple[int, int], list[Request]] = {}
    for r in requests:
        windows.setdefault((r.slot, int((r.start + r.seconds) // window_s)), []).append(r)
    return tuple(
        Sample(
            slot + 1,
            round((index + 1) * window_s, 6),
            sum(r.bytes for r in done) / window_s,
            1e6 * sum(r.seconds for r in done) / len(done),
        )
        for (slot, index), done in sorted(windows.items())
    )


def table(requests: list[Request]) -> str:
    """Every request as CSV lines, in the order they started (kept beside the results)."""
    lines = ["slot,key,start_s,seconds,bytes,error"]
    for r in sorted(requests, key=lambda r: r.start):
        lines.append(f"{r.slot},{r.key},{r.start:.6f},{r.seconds:.6f},{r.bytes},{(r.error or '').replace(',', ';')}")
    return "\n".join(lines) + "\n"
