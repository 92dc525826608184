"""One case's fio invocation, built once: `plan` makes a frozen `FioJob` of a case and the sweep's context.

A case's options are (key, value) pairs (`job_options`): rendered as a command line (`FioJob.argv`), or
as each host's job file in a multi-host sweep (fio_client). The job also knows the files its jobs use,
where fio writes its bandwidth and latency logs (fio_series reads them), its status interval (fio_live)
and, on a ceph engine, its objects (fio_ceph). fio.py runs it and reads it back; nothing here runs fio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gdsbench.cases import Case, Transfer
from gdsbench.keys import Key, text
from gdsbench.runners import fio_ceph, fio_series
from gdsbench.runners.base import RunContext
from gdsbench.runners.fio_jobfile import Option, render_args

#: fio's libcufile engine's `cuda_io` mode, by GPU transfer.
CUFILE_MODES = {Transfer.GDS: "cufile", Transfer.CPU_GPU: "posix"}
#: Which fio binary: a setting of the whole sweep (top level), not a case parameter.
FIO_PATH = Key("fio", text, "a path to the fio executable", "fio", "which fio to run", axis=False)
#: Options a measured run has and a layout pass (the objects written once, whole) has not.
_TIMED = ("time_based", "runtime", "ramp_time")
#: The request size of fio's layout of a read's files before the sweep.
LAYOUT_IO_SIZE = 16 << 20


@dataclass(frozen=True)
class FioJob:
    """What one case runs: fio's executable, the job options, its logs' options and prefix, its status
    arguments, the files (or ceph objects) its jobs use, and its time limit."""

    binary: str
    options: tuple[Option, ...]
    logs: tuple[Option, ...]  # fio's bandwidth and latency logs, at `series` (the time series)
    series: Path | None
    status: tuple[str, ...]
    threads: int
    files: tuple[Path, ...]
    objects: fio_ceph.Objects | None
    timeout: float

    @property
    def argv(self) -> list[str]:
        """fio's command line: the job options, JSON+ output, periodic status."""
        return [self.binary, *render_args((*self.options, *self.logs)), "--output-format=json+", *self.status]

    @property
    def layout_argv(self) -> list[str]:
        """fio writing the job's objects or files once, whole, unmeasured (before a read of objects never written)."""
        options = [(k, "write" if k == "rw" else v) for k, v in self.options if k not in _TIMED]
        return [self.binary, *render_args(options), "--output-format=json"]


def plan(case: Case, ctx: RunContext) -> FioJob:
    """The fio job of one case on this machine."""
    name, prefix = job_name(case, ctx), series_prefix(ctx)
    objects = fio_ceph.objects(case, name, ctx.file_size)  # the one thing asked of the cluster: its object size
    return FioJob(
        binary=fio_binary(ctx),
        options=tuple(_options(case, ctx, objects)),
        logs=tuple(_log_options(str(prefix) if prefix else None, ctx)),
        series=prefix,
        status=tuple(status_args(ctx)),
        threads=case["threads"],
        files=tuple(job_files(case, ctx)),
        objects=objects,
        timeout=ctx.timeout,
    )


def fio_argv(case: Case, ctx: RunContext) -> list[str]:
    """fio's command line for one case on this machine (`plan(case, ctx).argv`)."""
    return plan(case, ctx).argv


def fio_binary(ctx: RunContext) -> str:
    """The fio executable named in the config, else `fio` on PATH."""
    return str(ctx.options.get(FIO_PATH.name) or FIO_PATH.default)


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

    The same pairs render as a standalone command line (`FioJob.argv`) or as each host's job file in
    client mode; `log_prefix` adds fio's bandwidth and latency logs (the time series).
    """
    objects = fio_ceph.objects(case, job_name(case, ctx), ctx.file_size)
    return _options(case, ctx, objects) + _log_options(log_prefix, ctx)


def _options(case: Case, ctx: RunContext, objects: fio_ceph.Objects | None) -> list[Option]:
    """The job options but the logs (a rados case's objects laid out once, by the caller)."""
    options: list[Option] = [
        ("name", job_name(case, ctx)),
        ("bs", str(case["io_size"])),
        ("rw", case.pattern.value),
        ("numjobs", str(case["threads"])),
        ("iodepth", str(iodepth(case))),
    ]
    if fio_ceph.is_ceph(case):  # objects in a pool or an image, not files in a directory; no O_DIRECT
        options += [*_ceph_options(case, ctx.file_size, objects), ("iomem", case["iomem"])]
    else:
        options[1:1] = [("directory", fio_path(ctx.directory)), ("size", str(ctx.file_size))]
        options += [("direct", "0" if case.transfer is Transfer.CPU_CACHED else "1"), *_engine_options(case)]
    if case["end_fsync"] and case.pattern.is_write:
        options.append(("end_fsync", "1"))
    if case["unlink"]:
        options.append(("unlink", "1"))
    if ctx.runtime:
        options += [("time_based", None), ("runtime", fio_time(ctx.runtime))]
    if ctx.ramp_time:
        options.append(("ramp_time", fio_time(ctx.ramp_time)))
    return options


def _ceph_options(case: Case, file_size: int, objects: fio_ceph.Objects | None) -> list[Option]:
    """The options a ceph case has in place of a directory and O_DIRECT: a rados case's objects, else rbd's image."""
    options: list[Option] = [("ioengine", case["ioengine"]), ("pool", case["pool"])]
    options.append(("clientname", case["clientname"]))
    if objects is None:  # rbd: job k works on bytes [k * file_size, (k + 1) * file_size) of the image
        return [*options, ("rbdname", case["rbdname"]), ("size", str(file_size)), ("offset_increment", str(file_size))]
    count, each = objects.count, objects.each
    return [*options, ("nrfiles", str(count)), ("filesize", str(each)), ("size", str(count * each))]


def _log_options(prefix: str | None, ctx: RunContext) -> list[Option]:
    """fio's bandwidth and latency logs at `prefix` (fio_series reads them), where the sweep keeps a time series;
    fio averages them over windows of `series_ms`."""
    if not (prefix and ctx.series_ms):
        return []
    return [("write_bw_log", prefix), ("write_lat_log", prefix), ("log_avg_msec", str(ctx.series_ms))]


def series_prefix(ctx: RunContext) -> Path | None:
    """Where a standalone run's logs go (`<raw_dir>/series/<run stem>`), or None when the sweep keeps none."""
    if not ctx.series_ms or ctx.raw_dir is None:
        return None
    return (ctx.raw_dir / fio_series.SERIES_FOLDER).resolve() / ctx.run_stem


def client_prefix(ctx: RunContext) -> str | None:
    """A client-mode run's log name, relative to the client's working directory (fio_series.client_folder)."""
    return ctx.run_stem if ctx.series_ms and ctx.raw_dir is not None else None


def status_args(ctx: RunContext) -> list[str]:
    """fio's `--status-interval` argument for a sweep that wants live figures (whole seconds, at least 1)."""
    if not ctx.status_interval:
        return []
    return [f"--status-interval={max(1, math.ceil(ctx.status_interval))}"]


def iodepth(case: Case) -> int:
    """The iodepth fio gets: 1 for libcufile, a synchronous engine (fio caps it at 1 but still allocates and
    cuFile-registers io_size x iodepth of GPU memory per job), else the case's."""
    return 1 if case.transfer in CUFILE_MODES else case["iodepth"]


def _engine_options(case: Case) -> list[Option]:
    """The ioengine of a file case: libcufile for GPU transfers, else the case's with its buffers."""
    if case.transfer not in CUFILE_MODES:  # libcufile allocates its own buffers: fio refuses mem/iomem beside it
        return [("ioengine", case["ioengine"]), ("iomem", case["iomem"])]
    # thread: fio's libcufile examples run jobs as threads, as cudaMalloc fails when many processes attach.
    return [
        ("ioengine", "libcufile"),
        ("cuda_io", CUFILE_MODES[case.transfer]),
        ("gpu_dev_ids", case["gpu"]),
        ("thread", None),
    ]


def fio_path(path: Path) -> str:
    """A path as fio reads it: fio splits directory and filename options at ':', so escape it."""
    return str(path).replace(":", "\\:")


def fio_time(seconds: float) -> str:
    """A duration as fio reads it: whole seconds bare ("3"), anything finer in milliseconds ("600ms"): fio reads a
    bare "0.6" as 0 and ran 23 ms for it."""
    if float(seconds).is_integer():
        return f"{int(seconds)}"
    return f"{max(1, round(seconds * 1000))}ms"


def layout_argv(case: Case, ctx: RunContext) -> list[str]:
    """fio's own layout of a read case's job files, as the read job does it, and nothing else (--create_only=1)."""
    return [
        fio_binary(ctx),
        f"--name={job_name(case, ctx)}",
        f"--directory={fio_path(ctx.directory)}",
        f"--size={ctx.file_size}",
        f"--numjobs={case['threads']}",
        "--rw=read",  # as a read job lays them out: data written (a write job's layout only fallocates)
        f"--bs={min(LAYOUT_IO_SIZE, ctx.file_size)}",
        "--fallocate=none",  # blocks appear as they are written, so progress is real
        "--create_only=1",
    ]
