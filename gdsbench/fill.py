"""The step before a sweep's first case: check the target (space, mount), then write the files its read
cases need, once per file set and outside every case's timeout, with progress, as each engine declares it
(runners.file_sets.Fills: the files, its tool's command, the check of its result).

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
from gdsbench.runners.base import RunContext, run_polled
from gdsbench.runners.file_sets import FileSet, Fill, Fills, allocated, human
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
    """Check the target for every case that can run here, then fill what its reads need, as each engine declares
    it (Fills); yield progress rows."""
    can_run = [c for c in config.cases if skip_reason(c, ctx) is None]
    filesets.check_memory(can_run, ctx)
    runnable = [c for c in can_run if uses_directory(c)]
    if not runnable:  # nothing here uses the directory (fio on RADOS or RBD, S3 only)
        return
    filesets.check_mount(ctx.directory, bool(config.settings.get("allow_root_filesystem")))
    sets = filesets.file_sets(runnable, ctx)
    filesets.check_files(sets)
    filesets.check_space(ctx.directory, sets)
    for engine, ours in filesets.by_engine(runnable).items():
        runner = runners.get(engine)
        plan = runner.fill(ours, ctx) if isinstance(runner, Fills) else None
        if plan is not None and plan.needed():
            yield from fill(plan, ctx, config.settings.get("fill_timeout"))


def timeout_for(files: FileSet, configured: float | None) -> float:
    """The fill's own time limit: the config's `fill_timeout`, else the bytes at 50 MiB/s plus 10 minutes."""
    return configured or files.missing_bytes() / SLOWEST_FILL_RATE + FILL_MARGIN_S


def fill(plan: Fill, ctx: RunContext, configured: float | None) -> Iterator[dict[str, Any]]:
    """Write one file set with its tool, yielding a progress row at the start, every few seconds and at the end."""
    files, argv = plan.files, plan.argv
    ctx.resources.track_new(list(files.paths))
    total, limit, started = len(files.paths) * files.each, timeout_for(files, configured), time.monotonic()
    yield _row(
        files,
        f"fill {files.label} in {ctx.directory}: {human(files.missing_bytes())} to write, "
        f"timeout {limit:.0f}s: {' '.join(argv)}",
    )
    try:
        for _, done in run_polled(argv, limit, PROGRESS_EVERY_S):
            if done is None:
                yield _row(files, _progress(files, total, time.monotonic() - started))
                continue
            _check(plan, done)
    except ToolError as exc:
        ctx.fill_failures[files.engine] = str(exc)
        yield _row(files, f"fill {files.label} failed: {exc}")
        return
    yield _row(files, f"fill {files.label} done in {time.monotonic() - started:.0f}s")


def _progress(files: FileSet, total: int, elapsed: float) -> str:
    """Bytes on disk so far, the rate and the time left at that rate."""
    written = sum(min(files.each, allocated(p)) for p in files.paths)
    rate = written / elapsed if elapsed > 0 else 0.0
    eta = f"{(total - written) / rate:.0f}s" if rate > 0 else "?"
    return f"fill {files.label}: {human(written)}/{human(total)} at {human(int(rate))}/s, eta {eta}"


def _check(plan: Fill, done: Any) -> None:
    """A fill succeeded when its engine's check passes (its tool's exit, its result) and every file has its size."""
    plan.check(done)
    if not plan.files.ready():
        raise ToolError(f"{plan.files.engine} exited but left files shorter than {size_label(plan.files.each)}")


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
