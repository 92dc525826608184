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

import functools
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import FILES, Column, Traits
from gdsbench.keys import Key, boolean, gpu_ids, one_of, text
from gdsbench.runners import fio_ceph, fio_live, fio_series, gds_path
from gdsbench.runners.base import Measurement, RunContext, axes_of, run_tool
from gdsbench.runners.fio_jobfile import Option, render_args
from gdsbench.runners.fio_output import measure, parse_json
from gdsbench.runners.fio_probe import HANDSHAKE_TIMEOUT
from gdsbench.runners.resources import Usage
from gdsbench.sysinfo import host, storage

if TYPE_CHECKING:
    from gdsbench.runners.fio_client import ClientRun

IOENGINES = ("libaio", "io_uring", "psync", "sync", "pvsync2", "posixaio", "mmap", *fio_ceph.ENGINES)
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
    columns: tuple[Column, ...] = ()

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why fio cannot run this case here: no fio, or no libcufile engine for GPU transfers."""
        binary = fio_binary(ctx)
        if shutil.which(binary) is None and case.transfer in _CUFILE_MODES:
            return f"fio not found ({binary}); {case.transfer.value} needs a fio built with --enable-libcufile"
        if shutil.which(binary) is None:
            return f"fio not found ({binary}); install it with your OS packages (apt-get install fio)"
        if case.transfer in _CUFILE_MODES and "libcufile" not in engines(binary):
            return f"this fio has no libcufile engine for {case.transfer.value}; build fio with --enable-libcufile"
        if fio_ceph.is_ceph(case) and case["ioengine"] not in engines(binary):
            return f"this fio has no {case['ioengine']} engine (Debian's fio has it; a build needs librados/librbd)"
        if fio_ceph.is_ceph(case):
            return fio_ceph.unavailable(case, ctx) or huge_pages_missing(case)
        return None if case.transfer in _CUFILE_MODES else huge_pages_missing(case)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The fio argument list for one case (in a multi-host sweep, the client's, with its job files)."""
        if ctx.hosts:
            from gdsbench.runners import fio_client  # see run_hosts

            return fio_client.case_argv(fio_binary(ctx), ctx, job_options(case, ctx, fio_series.client_prefix(ctx)))
        return fio_argv(case, ctx)

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Run fio once and measure the case (live status to ctx.on_status, logs read into the series)."""
        ctx.resources.track_new(job_files(case, ctx))
        prefix = fio_series.standalone_prefix(ctx)
        if prefix:
            prefix.parent.mkdir(parents=True, exist_ok=True)
        cache, ceph_note = self._prepare_ceph(case, ctx)
        try:
            with Usage() as usage:
                proc, path, path_note = self._execute(case, ctx)
        finally:
            series = fio_series.collect(prefix, case["threads"]) if prefix else ()
        proc = fio_live.final_only(proc)
        measured = measure(parse_json(proc), case.pattern, raw=proc.stdout)
        if fio_ceph.is_ceph(case):
            fio_ceph.after_write(case, ctx, job_name(case, ctx), measured.bytes)
        measured = replace(measured, series=series, machine_cpu_seconds=usage.machine_cpu_seconds, cache=cache)
        return gds_path.with_path(measured, path, cufile_note(case) or ceph_note or None, path_note)

    def _prepare_ceph(self, case: Case, ctx: RunContext) -> tuple[str | None, str]:
        """A ceph case's objects and caches made ready (fio_ceph.before); (cache state, note) for its row."""
        if not fio_ceph.is_ceph(case):
            return None, ""
        lay_out = functools.partial(run_tool, layout_argv(case, ctx), timeout=ctx.timeout)
        return fio_ceph.before(case, ctx, job_name(case, ctx), lay_out)

    def _execute(self, case: Case, ctx: RunContext) -> tuple[subprocess.CompletedProcess, str | None, str]:
        """fio itself: GPU transfers witnessed (nvidia-fs, gds_stats) for the path their bytes took, host
        transfers streamed for their live status."""
        if case.transfer in _CUFILE_MODES:
            return gds_path.run_witnessed(self.command(case, ctx), ctx.timeout, case)
        stream = fio_live.StatusStream(ctx.on_status, case.pattern)
        return run_tool(self.command(case, ctx), timeout=ctx.timeout, on_stdout=stream.feed), None, ""

    def run_hosts(self, case: Case, ctx: RunContext) -> ClientRun:
        """Run one case on every host of ctx.hosts at once (fio client/server): a result per host plus `all`."""
        from gdsbench.runners import fio_client  # only multi-host sweeps load the client

        return fio_client.run_case(fio_binary(ctx), case, ctx, job_options(case, ctx, fio_series.client_prefix(ctx)))


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


def job_options(case: Case, ctx: RunContext, log_prefix: str | None = None) -> list[Option]:
    """A case's fio job options as (key, value) pairs, sizes in bytes (so no suffix is ambiguous).

    The same pairs render as a standalone command line (`fio_argv`) or as each host's job file in
    client mode; `log_prefix` adds fio's bandwidth and latency logs (the time series).
    """
    options: list[Option] = [
        ("name", job_name(case, ctx)),
        ("bs", str(case["io_size"])),
        ("rw", case.pattern.value),
        ("numjobs", str(case["threads"])),
        ("iodepth", str(iodepth(case))),
    ]
    if fio_ceph.is_ceph(case):  # objects in a pool or an image, not files in a directory; no O_DIRECT
        options += [*fio_ceph.job_options(case, ctx), ("iomem", case["iomem"])]
    else:
        options[1:1] = [("directory", fio_path(ctx.directory)), ("size", str(ctx.file_size))]
        options += [("direct", "0" if case.transfer is Transfer.CPU_CACHED else "1"), *_engine_options(case)]
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


def layout_argv(case: Case, ctx: RunContext) -> list[str]:
    """fio writing a case's objects or files once, whole, unmeasured (before a read of objects never written)."""
    timed = ("time_based", "runtime", "ramp_time")
    options = [(k, "write" if k == "rw" else v) for k, v in job_options(case, ctx) if k not in timed]
    return [fio_binary(ctx), *render_args(options), "--output-format=json"]


def _engine_options(case: Case) -> list[Option]:
    """The ioengine of a file case: libcufile for GPU transfers, else the case's with its buffers."""
    if case.transfer not in _CUFILE_MODES:  # libcufile allocates its own buffers: fio refuses mem/iomem beside it
        return [("ioengine", case["ioengine"]), ("iomem", case["iomem"])]
    # thread: fio's libcufile examples run jobs as threads, as cudaMalloc fails when many processes attach.
    return [("ioengine", "libcufile"), ("cuda_io", _CUFILE_MODES[case.transfer]), ("gpu_dev_ids", case["gpu"]),
            ("thread", None)]  # fmt: skip


def fio_argv(case: Case, ctx: RunContext) -> list[str]:
    """fio's command line for one case on this machine: the job options, JSON+ output, periodic status."""
    prefix = fio_series.standalone_prefix(ctx)
    options = job_options(case, ctx, str(prefix) if prefix else None)
    return [fio_binary(ctx), *render_args(options), "--output-format=json+", *fio_live.status_args(ctx)]


def fio_path(path: Path) -> str:
    """A path as fio reads it: fio splits directory and filename options at ':', so escape it."""
    return str(path).replace(":", "\\:")
