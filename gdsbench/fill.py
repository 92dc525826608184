"""The step before a sweep's first case: check the target (space, mount), then write the files its read
cases need, once per file set and outside every case's timeout, with progress.

gdsio and fio reads need their files laid out first. Done inside each case, that write counted against
the case's timeout and was repeated for every thread count (about 1.5 TiB written before the first
32-thread read of configs/h100.yaml, and a timeout repeated for every later case). Here each file set is
written once, at the largest thread count of its read cases, by the tool itself (a gdsio CPU_ONLY write
pass; fio's own layout, `--create_only=1`), under its own `fill_timeout`. Progress comes from the files'
allocated bytes while the tool runs, as rows with status `fill` that the CLI shows and never records.
A failed fill is kept in the RunContext: the read cases of that engine then fail at once with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from gdsbench import filesets, runners
from gdsbench.cases import Case
from gdsbench.columns import FILES
from gdsbench.config import SweepConfig
from gdsbench.errors import ToolError
from gdsbench.filesets import FileSet
from gdsbench.runners import fio_job, gdsio
from gdsbench.runners.base import RunContext, run_polled, tool_message
from gdsbench.units import size_label

#: How often a running fill reports progress.
PROGRESS_EVERY_S = 5.0
#: The rate a default fill timeout assumes (slow disks included), plus a fixed margin.
SLOWEST_FILL_RATE = 50 << 20
FILL_MARGIN_S = 600.0


def uses_directory(case: Case) -> bool:
    """Whether a case's I/O goes to files in the target directory (its engine's traits: not objects, no cluster)."""
    return runners.get(case.engine).traits.where(case.row()) == FILES


def prepare(
    config: SweepConfig, ctx: RunContext, skip_reason: Callable[[Case, RunContext], str | None]
) -> Iterator[dict[str, Any]]:
    """Check the target for every case that can run here, then fill what its reads need; yield progress rows."""
    can_run = [c for c in config.cases if skip_reason(c, ctx) is None]
    filesets.check_memory(can_run, ctx)
    runnable = [c for c in can_run if uses_directory(c)]
    if not runnable:  # nothing here uses the directory (fio on RADOS or RBD, S3 only)
        return
    filesets.check_mount(ctx.directory, bool(config.settings.get("allow_root_filesystem")))
    sets = filesets.file_sets(runnable, ctx)
    filesets.check_files(sets)
    filesets.check_space(ctx.directory, sets)
    for engine, argv_of in (("gdsio", _gdsio_argv), ("fio", _fio_argv)):
        cases = [c for c in filesets.reads(runnable, engine) if not c.get("unlink")]  # unlink: fio lays out its own
        threads = filesets.most_threads(cases)
        if not threads:
            continue
        widest = next(c for c in cases if c["threads"] == threads)
        files = FileSet(engine, tuple(_paths(engine, widest, ctx)), ctx.file_size)
        if files.missing_bytes() or not gdsio.ready(list(files.paths), ctx.file_size):
            yield from fill(files, argv_of(widest, ctx), ctx, config.settings.get("fill_timeout"))


def _paths(engine: str, case: Case, ctx: RunContext) -> list[Any]:
    """The files an engine's widest read case reads."""
    return gdsio.data_files(case, ctx) if engine == "gdsio" else fio_job.job_files(case, ctx)


def _gdsio_argv(case: Case, ctx: RunContext) -> list[str]:
    """gdsio's write pass over gdsio.0..threads-1 (CPU_ONLY, 16 MiB I/Os, size-bound)."""
    return gdsio.fill_argv(case, ctx, case["threads"])


def _fio_argv(case: Case, ctx: RunContext) -> list[str]:
    """fio's own layout of the case's job files, as a read job does it, and nothing else (--create_only=1)."""
    return [
        fio_job.fio_binary(ctx),
        f"--name={fio_job.job_name(case, ctx)}",
        f"--directory={fio_job.fio_path(ctx.directory)}",
        f"--size={ctx.file_size}",
        f"--numjobs={case['threads']}",
        "--rw=read",  # as a read job lays them out: data written (a write job's layout only fallocates)
        f"--bs={min(gdsio.FILL_IO_SIZE, ctx.file_size)}",
        "--fallocate=none",  # blocks appear as they are written, so progress is real
        "--create_only=1",
    ]


def timeout_for(files: FileSet, configured: float | None) -> float:
    """The fill's own time limit: the config's `fill_timeout`, else the bytes at 50 MiB/s plus 10 minutes."""
    return configured or files.missing_bytes() / SLOWEST_FILL_RATE + FILL_MARGIN_S


def fill(files: FileSet, argv: list[str], ctx: RunContext, configured: float | None) -> Iterator[dict[str, Any]]:
    """Write one file set with its tool, yielding a progress row at the start, every few seconds and at the end."""
    ctx.resources.track_new(list(files.paths))
    total, limit, started = len(files.paths) * files.each, timeout_for(files, configured), time.monotonic()
    yield _row(
        files,
        f"fill {files.label} in {ctx.directory}: {filesets.human(files.missing_bytes())} to write, "
        f"timeout {limit:.0f}s: {' '.join(argv)}",
    )
    try:
        for _, done in run_polled(argv, limit, PROGRESS_EVERY_S):
            if done is None:
                yield _row(files, _progress(files, total, time.monotonic() - started))
                continue
            _check(files, done, ctx)
    except ToolError as exc:
        ctx.fill_failures[files.engine] = str(exc)
        yield _row(files, f"fill {files.label} failed: {exc}")
        return
    yield _row(files, f"fill {files.label} done in {time.monotonic() - started:.0f}s")


def _progress(files: FileSet, total: int, elapsed: float) -> str:
    """Bytes on disk so far, the rate and the time left at that rate."""
    written = sum(min(files.each, filesets.allocated(p)) for p in files.paths)
    rate = written / elapsed if elapsed > 0 else 0.0
    eta = f"{(total - written) / rate:.0f}s" if rate > 0 else "?"
    human = filesets.human
    return f"fill {files.label}: {human(written)}/{human(total)} at {human(int(rate))}/s, eta {eta}"


def _check(files: FileSet, done: Any, ctx: RunContext) -> None:
    """A fill succeeded when its tool exited 0 (gdsio: with a clean result) and every file has its size."""
    if files.engine == "gdsio":
        gdsio.checked(done)
    elif done.returncode != 0:
        raise ToolError(f"fio could not lay out its files: {tool_message(done)}")
    if not gdsio.ready(list(files.paths), files.each):
        raise ToolError(f"{files.engine} exited but left files shorter than {size_label(files.each)}")


def _row(files: FileSet, note: str) -> dict[str, Any]:
    """A progress row: shown by the CLI, never written to the results."""
    return {
        "status": "fill",
        "case": f"fill:{files.engine}",
        "engine": files.engine,
        "pattern": "fill",
        "repetition": 0,
        "note": note,
    }
