"""What fio prints: its JSON+ document, read into group figures as fio's run-status line computes them.

Jobs are not group-reported, so each job keeps its numbers; bandwidth and runtimes are combined with fio's
integer arithmetic, and latency percentiles of several jobs are merged from their json+ histogram bins
with fio's rule. Standalone runs and client/server runs (fio_client) read their figures here.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from gdsbench.cases import Pattern
from gdsbench.errors import ToolError
from gdsbench.runners.base import Measurement, tool_message

PERCENTILES = {"lat_p50_us": 50.0, "lat_p90_us": 90.0, "lat_p99_us": 99.0, "lat_p999_us": 99.9}


def parse_json(proc: subprocess.CompletedProcess) -> dict[str, Any]:
    """fio's JSON document from stdout (skipping warning lines before it); ToolError if fio failed."""
    start = proc.stdout.find("{")
    if start < 0:
        raise ToolError(f"fio failed: {tool_message(proc)}")
    try:
        document, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    except json.JSONDecodeError as exc:
        raise ToolError(f"fio printed unparsable JSON ({exc.msg} at char {exc.pos})") from None
    failed = [job for job in document.get("jobs", []) if job.get("error")]
    if proc.returncode != 0 or failed:
        raise ToolError(f"fio failed: {tool_message(proc)}")
    return document


def direction(pattern: Pattern) -> str:
    """The JSON section ('read' or 'write') that holds a pattern's numbers."""
    return "write" if pattern.is_write else "read"


def measure(document: dict[str, Any], pattern: Pattern, raw: str | None = None) -> Measurement:
    """Group figures for all jobs of one fio run, computed as fio's run-status line computes them."""
    jobs = [job for job in document["jobs"] if job[direction(pattern)].get("runtime", 0) > 0]
    stats = [job[direction(pattern)] for job in jobs]
    if not stats:
        raise ToolError(f"fio reported no {direction(pattern)} I/O")
    total = sum(s["io_bytes"] for s in stats)
    runtimes = [s["runtime"] for s in stats]
    job_bw = [s["io_bytes"] * 1000 // s["runtime"] for s in stats]
    spread = (max(runtimes) - min(runtimes)) / 1000 if len(runtimes) > 1 else None
    return Measurement(
        bytes=total,
        seconds=max(runtimes) / 1000,
        bw_bytes=total * 1000 // max(runtimes),
        iops=sum(s["iops"] for s in stats),
        **latency(stats),
        cpu_seconds=cpu_seconds(jobs),
        raw=raw,
        figures={
            "seconds_min": min(runtimes) / 1000,
            "bw_min_bytes": min(job_bw),
            "bw_max_bytes": max(job_bw),
            "spread_seconds": spread,
            "straggler": f"job {runtimes.index(max(runtimes)) + 1}" if spread else None,
        },
    )


def cpu_seconds(jobs: list[dict[str, Any]]) -> float | None:
    """User + system CPU of fio's jobs, from each job's own figures: (usr_cpu + sys_cpu)% of its job_runtime
    (ms). None when a job lacks them (an older fio)."""
    try:
        return sum((job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000 for job in jobs)
    except KeyError:
        return None


def latency(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Completion-latency mean, stdev and percentiles in microseconds, merged over jobs."""
    clats = [s["clat_ns"] for s in stats if s.get("clat_ns", {}).get("N")]
    if not clats:
        return {"lat_mean_us": None, "lat_stdev_us": None, **dict.fromkeys(PERCENTILES)}
    if len(clats) == 1:
        reported = clats[0].get("percentile", {})
        pct = {k: reported.get(f"{p:f}") for k, p in PERCENTILES.items()}
        mean, stdev = clats[0]["mean"], clats[0]["stddev"]
    else:
        pct = merged_percentiles(clats)
        mean, stdev = pooled_mean_stdev(clats)
    return {
        "lat_mean_us": mean / 1000,
        "lat_stdev_us": stdev / 1000,
        **{k: (v / 1000 if v is not None else None) for k, v in pct.items()},
    }


def merged_percentiles(clats: list[dict[str, Any]]) -> dict[str, float | None]:
    """Percentiles of the union of jobs' histogram bins, picked the way fio picks them."""
    bins: dict[int, int] = {}
    for clat in clats:
        for value, count in clat.get("bins", {}).items():
            bins[int(value)] = bins.get(int(value), 0) + count
    return percentiles_from_bins(bins)


def percentiles_from_bins(bins: dict[int, int]) -> dict[str, float | None]:
    """fio's rule: a percentile p is the first bin where the running count reaches p/100 of all."""
    total = sum(bins.values())
    if not total:
        return dict.fromkeys(PERCENTILES)
    ordered = sorted(bins.items())
    result: dict[str, float | None] = {}
    for name, p in PERCENTILES.items():
        running = 0
        for value, count in ordered:
            running += count
            if running >= p / 100.0 * total:
                result[name] = float(value)
                break
    return result


def pooled_mean_stdev(clats: list[dict[str, Any]]) -> tuple[float, float]:
    """Mean and sample standard deviation of the union of jobs, from each job's N, mean and stddev."""
    n = sum(c["N"] for c in clats)
    mean = sum(c["N"] * c["mean"] for c in clats) / n
    m2 = sum((c["N"] - 1) * c["stddev"] ** 2 + c["N"] * (c["mean"] - mean) ** 2 for c in clats)
    return mean, (m2 / (n - 1)) ** 0.5 if n > 1 else 0.0
