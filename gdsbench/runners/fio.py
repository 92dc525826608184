"""fio runner: one fio invocation per case, one file per job, parsed from fio's JSON+ output.

Mechanism: fio with `numjobs = threads`, each job on its own file of `file_size` bytes in the target
directory. CPU_ONLY is O_DIRECT (`--direct=1`), CPU_CACHED goes through the page cache (`--direct=0`;
fio's default `invalidate=1` drops the file's cached pages before each job). GDS and CPU_GPU use fio's
libcufile engine (`cuda_io=cufile` / `posix`), which only fio builds made with `--enable-libcufile` have.
Jobs are not group-reported, so the per-job bandwidth spread survives; the group figures are computed
from the jobs exactly as fio's run-status line computes them, and latency percentiles are merged from
the jobs' histogram bins (json+) as fio merges them.

A run flows one way: fio_job builds the case's invocation once (a frozen FioJob: the argument list, its
files, logs and ceph objects), `run` makes it ready (fio_ceph), runs it (gds_path witnesses a GPU run,
fio_live streams a host run's status into live figures) and reads it back (fio_series: the time series,
fio_output: the figures, fio_ceph: a rados write's objects). In a multi-host sweep the same job options
become each host's job file (`run_hosts`, fio_client).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import FILES, Column, Traits
from gdsbench.errors import ToolError
from gdsbench.keys import Key, boolean, gpu_ids, one_of
from gdsbench.runners import fio_ceph, fio_job, fio_live, fio_series, gds_path
from gdsbench.runners.base import JOB_SPREAD, LiveStatus, Measurement, RunContext, axes_of, run_tool, tool_message
from gdsbench.runners.file_sets import FileSet, Fill, widest_read
from gdsbench.runners.fio_job import CUFILE_MODES, FIO_PATH, FioJob, fio_binary
from gdsbench.runners.fio_output import measure, parse_json
from gdsbench.runners.fio_probe import HANDSHAKE_TIMEOUT
from gdsbench.runners.resources import Usage
from gdsbench.sysinfo import host, storage

if TYPE_CHECKING:
    from gdsbench.runners.fio_client import ClientRun

IOENGINES = ("libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio", "mmap", *fio_ceph.ENGINES)


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
        Key(
            "end_fsync",
            boolean,
            "true or false",
            False,
            "fsync each file when a write job ends",
            used_with=(("pattern", ("write", "randwrite")),),
        ),
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
        HANDSHAKE_TIMEOUT,
        *fio_ceph.KEYS,
    )
    axes = axes_of(("pattern", "transfer", "io_size", "threads", "iodepth"), options)
    traits = Traits(FILES, cluster_when=(("ioengine", fio_ceph.ENGINES),))
    columns = (*JOB_SPREAD, Column("bw_sum_bytes", "bytes/s", "several hosts: the hosts' bandwidths added up"))

    def file_sets(self, cases: list[Case], ctx: RunContext) -> list[FileSet]:
        """fio's per-job files, reused across cases; `unlink` cases' files exist only while their case runs."""
        sets = []
        for unlink in (False, True):
            ours = [c for c in cases if bool(c["unlink"]) == unlink]
            if ours:
                widest = max(ours, key=lambda c: c["threads"])
                sets.append(FileSet(self.name, tuple(fio_job.job_files(widest, ctx)), ctx.file_size, unlink))
        return sets

    def fill(self, cases: list[Case], ctx: RunContext) -> Fill | None:
        """fio's own layout of the widest read's job files (`unlink` cases lay out their own)."""
        widest = widest_read(cases)
        if widest is None:
            return None
        files = FileSet(self.name, tuple(fio_job.job_files(widest, ctx)), ctx.file_size)
        return Fill(files, fio_job.layout_argv(widest, ctx), _laid_out)

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why fio cannot run this case here: no fio, or no libcufile engine for GPU transfers."""
        binary = fio_binary(ctx)
        if shutil.which(binary) is None and case.transfer in CUFILE_MODES:
            return f"fio not found ({binary}); {case.transfer.value} needs a fio built with --enable-libcufile"
        if shutil.which(binary) is None:
            return f"fio not found ({binary}); install it with your OS packages (apt-get install fio)"
        if case.transfer in CUFILE_MODES and "libcufile" not in engines(binary):
            return f"this fio has no libcufile engine for {case.transfer.value}; build fio with --enable-libcufile"
        if fio_ceph.is_ceph(case) and case["ioengine"] not in engines(binary):
            return f"this fio has no {case['ioengine']} engine (Debian's fio has it; a build needs librados/librbd)"
        if fio_ceph.is_ceph(case):
            return fio_ceph.unavailable(case, ctx) or huge_pages_missing(case)
        return None if case.transfer in CUFILE_MODES else huge_pages_missing(case)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The fio argument list for one case (in a multi-host sweep, the client's, with its job files)."""
        if ctx.hosts:
            from gdsbench.runners import fio_client  # see run_hosts

            options = fio_job.job_options(case, ctx, fio_job.client_prefix(ctx))
            return fio_client.case_argv(fio_binary(ctx), ctx, options)
        return fio_job.plan(case, ctx).argv

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Run fio once and measure the case: its job planned (fio_job), made ready (files tracked, a ceph case's
        objects and caches), run (live status to ctx.on_status), read back (logs, a rados write's objects)."""
        job = fio_job.plan(case, ctx)
        ctx.resources.track_new(list(job.files))
        if job.series:
            job.series.parent.mkdir(parents=True, exist_ok=True)
        lay_out = functools.partial(run_tool, job.layout_argv, timeout=job.timeout)
        cache, ceph_note = fio_ceph.before(case, job.objects, ctx.resources, lay_out)
        try:
            with Usage() as usage:
                proc, path, path_note = _execute(job, case, ctx.on_status)
        finally:
            series = fio_series.collect(job.series, job.threads) if job.series else ()
        proc = fio_live.final_only(proc)
        measured = measure(parse_json(proc), case.pattern, raw=proc.stdout)
        fio_ceph.after_write(case, job.objects, measured.bytes)
        measured = replace(measured, series=series, machine_cpu_seconds=usage.machine_cpu_seconds, cache=cache)
        return gds_path.with_path(measured, path, cufile_note(case) or ceph_note or None, path_note)

    def run_hosts(self, case: Case, ctx: RunContext) -> ClientRun:
        """Run one case on every host of ctx.hosts at once (fio client/server): a result per host plus `all`."""
        from gdsbench.runners import fio_client  # only multi-host sweeps load the client

        options = fio_job.job_options(case, ctx, fio_job.client_prefix(ctx))
        return fio_client.run_case(fio_binary(ctx), case, ctx, options)


def _execute(
    job: FioJob, case: Case, on_status: Callable[[LiveStatus], None] | None
) -> tuple[subprocess.CompletedProcess, str | None, str]:
    """fio itself: GPU transfers witnessed (nvidia-fs, gds_stats) for the path their bytes took, host
    transfers streamed for their live status."""
    if case.transfer in CUFILE_MODES:
        return gds_path.run_witnessed(job.argv, job.timeout, case)
    stream = fio_live.StatusStream(on_status, case.pattern)
    return run_tool(job.argv, timeout=job.timeout, on_stdout=stream.feed), None, ""


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


def cufile_note(case: Case) -> str | None:
    """What the row must say about a libcufile case: its iodepth was forced to 1, its buffers are the engine's."""
    if case.transfer not in CUFILE_MODES:
        return None
    forced = f"iodepth forced to 1 (asked {case['iodepth']})" if case["iodepth"] != 1 else "iodepth 1"
    return f"libcufile is synchronous: {forced}; buffers are libcufile's own GPU memory (no --iomem)"


def engines(binary: str) -> frozenset[str]:
    """The ioengines this fio build lists in `fio --enghelp` (the probe lives in sysinfo; doctor shows it too)."""
    return host.fio_engines(binary)


def _laid_out(done: subprocess.CompletedProcess) -> None:
    """fio's layout succeeded when it exited 0."""
    if done.returncode != 0:
        raise ToolError(f"fio could not lay out its files: {tool_message(done)}")


ENGINE = FioRunner()
