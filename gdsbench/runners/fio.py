"""fio runner: one fio invocation per case, one file per job, parsed from fio's JSON+ output.

Mechanism: fio with `numjobs = threads`, each job on its own file of `file_size` bytes in the target
directory. CPU_ONLY is O_DIRECT (`--direct=1`), CPU_CACHED goes through the page cache (`--direct=0`;
fio's default `invalidate=1` drops the file's cached pages before each job). GDS and CPU_GPU use fio's
libcufile engine (`cuda_io=cufile` / `posix`), which only fio builds made with `--enable-libcufile` have.
Jobs are not group-reported, so the per-job bandwidth spread survives; the group figures are computed
from the jobs exactly as fio's run-status line computes them, and latency percentiles are merged from
the jobs' histogram bins (json+) as fio merges them.

A case's options are (key, value) pairs (`job_options`): rendered as this command line, or as each
host's job file in a multi-host sweep (`run_hosts`, fio_client). fio also writes its bandwidth and
latency logs (fio_series: the time series) and, every `status_interval`, a status document that
fio_live turns into live figures.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.keys import Key, boolean, gpu_ids, one_of, text
from gdsbench.runners import fio_live, fio_series, gds_path
from gdsbench.runners.base import Measurement, RunContext, axes_of, run_tool, tool_message
from gdsbench.sysinfo import host, storage

if TYPE_CHECKING:
    from gdsbench.runners.fio_client import ClientRun

#: One fio option: (key, value), value None for a flag such as `time_based`.
Option = tuple[str, "str | None"]

IOENGINES = ("libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio", "mmap")
PERCENTILES = {"lat_p50_us": 50.0, "lat_p90_us": 90.0, "lat_p99_us": 99.0, "lat_p999_us": 99.9}
_CUFILE_MODES = {Transfer.GDS: "cufile", Transfer.CPU_GPU: "posix"}
#: Which fio binary: a setting of the whole sweep (top level), not a case parameter.
FIO_PATH = Key("fio", text, "a path to the fio executable", "fio", "which fio to run", axis=False)


class FioRunner:
    """Runs fio for read/write/randread/randwrite on host memory (and GPU memory via libcufile)."""

    name = "fio"
    description = "fio (flexible I/O tester); CPU_ONLY = O_DIRECT, CPU_CACHED = page cache, GDS/CPU_GPU = libcufile"
    patterns = frozenset({Pattern.READ, Pattern.WRITE, Pattern.RANDREAD, Pattern.RANDWRITE})
    transfers = frozenset({Transfer.CPU_ONLY, Transfer.CPU_CACHED, Transfer.GDS, Transfer.CPU_GPU})
    options = (
        Key(
            "ioengine", one_of(*IOENGINES), "one of " + ", ".join(IOENGINES), "libaio", "fio ioengine for CPU transfers"
        ),
        Key(
            "iomem",
            one_of("malloc", "shm", "shmhuge", "mmap", "mmaphuge"),
            "a fio iomem type",
            "malloc",
            "where fio's I/O buffers live (shmhuge needs reserved huge pages)",
        ),
        Key("end_fsync", boolean, "true or false", False, "fsync each file when a write job ends"),
        Key(
            "unlink",
            boolean,
            "true or false",
            False,
            "delete each job's file when the job ends (fio --unlink=1), so every write run makes a new file",
        ),
        Key(
            "gpu",
            gpu_ids,
            "a GPU index such as 0 (fio also takes a list such as 0:1)",
            "0",
            "GPU for libcufile transfers",
        ),
        FIO_PATH,
    )
    axes = axes_of(("pattern", "transfer", "io_size", "threads", "iodepth"), options)

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why fio cannot run this case here: no fio, or no libcufile engine for GPU transfers."""
        binary = fio_binary(ctx)
        if shutil.which(binary) is None:
            return f"fio not found ({binary}); install it with your OS packages (apt-get install fio)"
        if case.transfer in _CUFILE_MODES and "libcufile" not in engines(binary):
            return f"this fio has no libcufile engine for {case.transfer.value}; build fio with --enable-libcufile"
        return None if case.transfer in _CUFILE_MODES else huge_pages_missing(case)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The fio argument list for one case (in a multi-host sweep, the client's, with its job files)."""
        if ctx.hosts:
            from gdsbench.runners import fio_client  # see run_hosts

            return fio_client.case_argv(ctx, job_options(case, ctx, fio_series.client_prefix(ctx)))
        return fio_argv(case, ctx)

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Run fio once and measure the case (live status to ctx.on_status, logs read into the series)."""
        ctx.track_new(job_files(case, ctx))
        prefix = fio_series.standalone_prefix(ctx)
        if prefix:
            prefix.parent.mkdir(parents=True, exist_ok=True)
        try:
            proc, path, path_note = self._execute(case, ctx)
        finally:
            series = fio_series.collect(prefix, case["threads"]) if prefix else ()
        proc = fio_live.final_only(proc)
        measured = replace(measure(parse_json(proc), case.pattern, raw=proc.stdout), series=series)
        return gds_path.with_path(measured, path, cufile_note(case), path_note)

    def _execute(self, case: Case, ctx: RunContext) -> tuple[subprocess.CompletedProcess, str | None, str]:
        """fio itself: GPU transfers witnessed (nvidia-fs, gds_stats) for the path their bytes took, host
        transfers streamed for their live status."""
        if case.transfer in _CUFILE_MODES:
            return gds_path.run_witnessed(self.command(case, ctx), ctx.timeout, case)
        stream = fio_live.StatusStream(ctx.on_status, case.pattern)
        return run_tool(self.command(case, ctx), timeout=ctx.timeout, on_stdout=stream.feed), None, ""

    def run_hosts(self, case: Case, ctx: RunContext) -> ClientRun:
        """Run one case on every host of ctx.hosts at once (fio client/server): a result per host plus `all`."""
        from gdsbench.runners import fio_client  # fio_client reads fio's figures with this module's measure()

        return fio_client.run_case(case, ctx, job_options(case, ctx, fio_series.client_prefix(ctx)))


def huge_pages_missing(case: Case) -> str | None:
    """Why fio's hugetlb buffers (iomem shmhuge/mmaphuge) cannot be had: too few reserved huge pages."""
    if case["iomem"] not in ("shmhuge", "mmaphuge"):
        return None
    free, page = storage.huge_pages()
    need = case["threads"] * case["iodepth"] * case["io_size"] + page
    if free * page >= need:
        return None
    pages = -(-need // page) if page else 0
    return (
        f"iomem={case['iomem']} needs {pages} free huge pages ({free} free); reserve them as root: "
        f"echo {pages} > /proc/sys/vm/nr_hugepages"
    )


def iodepth(case: Case) -> int:
    """The iodepth fio gets: 1 for libcufile, a synchronous engine (fio caps it at 1 but still allocates and
    cuFile-registers io_size x iodepth of GPU memory per job), else the case's."""
    return 1 if case.transfer in _CUFILE_MODES else case["iodepth"]


def cufile_note(case: Case) -> str | None:
    """What the row must say about a libcufile case: its iodepth was forced to 1, its buffers are the engine's."""
    if case.transfer not in _CUFILE_MODES:
        return None
    forced = f"iodepth forced to 1 (asked {case['iodepth']})" if case["iodepth"] != 1 else "iodepth 1"
    return f"libcufile is synchronous: {forced}; buffers are libcufile's own GPU memory (no --iomem)"


def fio_binary(ctx: RunContext) -> str:
    """The fio executable named in the config, else `fio` on PATH."""
    return str(ctx.options.get(FIO_PATH.name) or FIO_PATH.default)


def engines(binary: str) -> frozenset[str]:
    """The ioengines this fio build lists in `fio --enghelp` (the probe lives in sysinfo; doctor shows it too)."""
    return host.fio_engines(binary)


def job_name(case: Case, ctx: RunContext) -> str:
    """fio job name; fio names each job's file `<name>.<job>.0`, so files are reused across cases.

    unlink cases get names of their own: fio deletes their files when the job ends, which must not
    turn the next case's overwrite of the shared file into a new-file write.
    """
    return f"gdsbench.{ctx.file_size}" + (".new" if case["unlink"] else "")


def job_files(case: Case, ctx: RunContext) -> list[Path]:
    """The files fio will use for this case, one per job."""
    return [ctx.directory / f"{job_name(case, ctx)}.{job}.0" for job in range(case["threads"])]


def render_args(options: Sequence[Option]) -> list[str]:
    """The options as fio command-line arguments: `--key=value`, or `--key` for a flag."""
    return [f"--{key}" if value is None else f"--{key}={value}" for key, value in options]


def job_options(case: Case, ctx: RunContext, log_prefix: str | None = None) -> list[Option]:
    """A case's fio job options as (key, value) pairs, sizes in bytes (so no suffix is ambiguous).

    The same pairs render as a standalone command line (`fio_argv`) or as each host's job file in
    client mode; `log_prefix` adds fio's bandwidth and latency logs (the time series).
    """
    options: list[Option] = [
        ("name", job_name(case, ctx)),
        ("directory", fio_path(ctx.directory)),
        ("size", str(ctx.file_size)),
        ("bs", str(case["io_size"])),
        ("rw", case.pattern.value),
        ("numjobs", str(case["threads"])),
        ("iodepth", str(iodepth(case))),
        ("direct", "0" if case.transfer is Transfer.CPU_CACHED else "1"),
    ]
    if case.transfer in _CUFILE_MODES:
        # thread: fio's libcufile examples run jobs as threads, as cudaMalloc fails when many processes attach.
        options += [
            ("ioengine", "libcufile"),
            ("cuda_io", _CUFILE_MODES[case.transfer]),
            ("gpu_dev_ids", case["gpu"]),
            ("thread", None),
        ]
    else:  # libcufile allocates its own buffers: fio refuses an explicit mem/iomem beside it
        options += [("ioengine", case["ioengine"]), ("iomem", case["iomem"])]
    if case["end_fsync"] and case.pattern.is_write:
        options.append(("end_fsync", "1"))
    if case["unlink"]:
        options.append(("unlink", "1"))
    if ctx.runtime:
        options += [("time_based", None), ("runtime", f"{ctx.runtime:g}")]
    if ctx.ramp_time:
        options.append(("ramp_time", f"{ctx.ramp_time:g}"))
    if log_prefix and ctx.series_ms:
        options += fio_series.log_options(log_prefix, ctx.series_ms)
    return options


def fio_argv(case: Case, ctx: RunContext) -> list[str]:
    """fio's command line for one case on this machine: the job options, JSON+ output, periodic status."""
    prefix = fio_series.standalone_prefix(ctx)
    options = job_options(case, ctx, str(prefix) if prefix else None)
    return [fio_binary(ctx), *render_args(options), "--output-format=json+", *fio_live.status_args(ctx)]


def fio_path(path: Path) -> str:
    """A path as fio reads it: fio splits directory and filename options at ':', so escape it."""
    return str(path).replace(":", "\\:")


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
    stats = [job[direction(pattern)] for job in document["jobs"]]
    stats = [s for s in stats if s.get("runtime", 0) > 0]
    if not stats:
        raise ToolError(f"fio reported no {direction(pattern)} I/O")
    total = sum(s["io_bytes"] for s in stats)
    runtimes = [s["runtime"] for s in stats]
    job_bw = [s["io_bytes"] * 1000 // s["runtime"] for s in stats]
    spread = (max(runtimes) - min(runtimes)) / 1000 if len(runtimes) > 1 else None
    return Measurement(
        bytes=total,
        seconds=max(runtimes) / 1000,
        seconds_min=min(runtimes) / 1000,
        bw_bytes=total * 1000 // max(runtimes),
        iops=sum(s["iops"] for s in stats),
        bw_min_bytes=min(job_bw),
        bw_max_bytes=max(job_bw),
        **latency(stats),
        spread_seconds=spread,
        straggler=f"job {runtimes.index(max(runtimes)) + 1}" if spread else None,
        raw=raw,
    )


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
