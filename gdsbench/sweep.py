"""Run a SweepConfig: skip what cannot run, warm up, repeat, record one row per run as it finishes.

A failed run becomes a `failed` row and the sweep goes on; rows are flushed one by one, so an
interrupted sweep keeps every finished row and `--resume` runs only what is missing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shlex
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench import fill, results, runners, sysinfo
from gdsbench.cases import Case
from gdsbench.config import SweepConfig
from gdsbench.errors import GdsbenchError, TargetError
from gdsbench.runners.base import RunContext


@dataclass(frozen=True)
class Step:
    """One scheduled run: a case, its repetition number (0 = warmup, not recorded)."""

    case: Case
    repetition: int


def prepare_target(directory: Path) -> Path:
    """Create the target directory if missing; refuse one that is not a writable directory."""
    if directory.exists() and not directory.is_dir():
        raise TargetError(f"directory {directory} exists and is not a directory; choose another `directory`")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TargetError(f"cannot create directory {directory}: {exc.strerror}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise TargetError(f"directory {directory} is not writable by this user; choose another `directory`")
    return directory


def context(config: SweepConfig, csv_path: Path | None) -> RunContext:
    """The RunContext every runner of this sweep shares."""
    runtime, ramp = config.runtime, config.ramp_time
    timeout = config.timeout or ((runtime or 0) + (ramp or 0)) * 3 + 600
    return RunContext(
        directory=Path(config.directory),
        file_size=config.file_size,
        runtime=runtime,
        ramp_time=ramp,
        timeout=timeout,
        keep_files=config.keep_files,
        options=config.options,
        raw_dir=results.raw_dir(csv_path) if csv_path else None,
    )


def schedule(config: SweepConfig, done: frozenset[tuple[str, int]] = frozenset()) -> list[Step]:
    """The runs still to do, case-major or (interleave: true) repetition-major, warmups first."""
    reps = range(1, config.repetitions + 1)
    todo = [c for c in config.cases if (c.key, 0) not in done]
    if config.interleave:
        order = [Step(c, r) for r in reps for c in todo if (c.key, r) not in done]
    else:
        order = [Step(c, r) for c in todo for r in reps if (c.key, r) not in done]
    steps: list[Step] = []
    warmed: set[str] = set()
    for step in order:
        if step.case.key not in warmed:
            warmed.add(step.case.key)
            steps += [Step(step.case, 0)] * config.warmup
        steps.append(step)
    return steps


def resume(config: SweepConfig, csv_path: Path, skip_failed: bool = False) -> frozenset[tuple[str, int]]:
    """--resume: the (case, repetition) pairs to leave alone. Failed pairs are run again unless
    `skip_failed`; their failed rows are removed first, so the file keeps one row per pair."""
    done = results.done_keys(csv_path, skip_failed)
    redo = {(step.case.key, step.repetition) for step in schedule(config, done)}
    redo |= {(key, 0) for key, _ in redo}  # a failed warmup's row (repetition 0) goes when its case runs again
    results.drop_failed(csv_path, redo | results.done_keys(csv_path))  # and failed duplicates of finished pairs
    return done


def skip_reason(case: Case, ctx: RunContext) -> str | None:
    """Why a case cannot run: its runner does not do the pattern or transfer, or lacks a tool here."""
    runner = runners.get(case.engine)
    if case.pattern not in runner.patterns:
        return f"{runner.name} does not do pattern {case.pattern.value}"
    if "transfer" in runner.axes and case.transfer not in runner.transfers:
        return f"{runner.name} has no {case.transfer.value} transfer"
    return runner.unavailable(case, ctx)


def run(
    config: SweepConfig,
    writer: results.ResultWriter,
    ctx: RunContext,
    run_id: str,
    done: frozenset[tuple[str, int]] = frozenset(),
) -> Iterator[dict[str, Any]]:
    """Run every step not in `done`; yield each row (warmups too, with status 'warmup') once written."""
    prepare_target(ctx.directory)
    skipped: dict[str, str | None] = {}
    failed_warmup: set[str] = set()
    try:
        yield from fill.prepare(config, ctx, skip_reason)  # space and mount checks, then the reads' files, once
        for step in schedule(config, done):
            key = step.case.key
            if key not in skipped:
                skipped[key] = skip_reason(step.case, ctx)
                if skipped[key]:
                    row = _row(step.case, 0, run_id, status="skipped", error=f"skipped: {skipped[key]}")
                    writer.write(row)
                    yield row
            if skipped[key] or key in failed_warmup:
                continue
            row = _measure(step, ctx, run_id)
            if step.repetition == 0 and row["status"] == "ok":
                yield {**row, "status": "warmup"}
                continue
            if step.repetition == 0:
                failed_warmup.add(key)
            writer.write(row)
            yield row
    finally:
        ctx.cleanup()


def _measure(step: Step, ctx: RunContext, run_id: str) -> dict[str, Any]:
    """Run one step and turn its Measurement, or its error, into a row."""
    runner = runners.get(step.case.engine)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    command = shlex.join(runner.command(step.case, ctx))
    try:
        measurement = runner.run(step.case, ctx)
    except GdsbenchError as exc:
        return _row(
            step.case, step.repetition, run_id, status="failed", error=str(exc), started_at=started, command=command
        )
    raw = _keep_raw(ctx, step, measurement.raw)
    return _row(
        step.case,
        step.repetition,
        run_id,
        status="ok",
        started_at=started,
        command=command,
        raw_output=raw,
        **measurement.row(),
    )


def _keep_raw(ctx: RunContext, step: Step, raw: str | None) -> str | None:
    """Store a run's raw tool output beside the CSV; return its path."""
    if not raw or ctx.raw_dir is None or step.repetition == 0:
        return None
    ctx.raw_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(step.case.key.encode()).hexdigest()[:10]
    path = ctx.raw_dir / f"{step.case.engine}-{digest}-r{step.repetition}.txt"
    path.write_text(raw)
    return str(path)


def _row(case: Case, repetition: int, run_id: str, **fields: Any) -> dict[str, Any]:
    """A results row: identity, case parameters, then what was measured."""
    return {
        "run_id": run_id,
        "host": sysinfo.host_name(),
        "case": case.key,
        "repetition": repetition,
        **case.row(),
        **fields,
    }


def new_run_id() -> str:
    """A short unique id for a sweep run: UTC timestamp plus random suffix."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def results_path(config: SweepConfig, output: Path) -> Path:
    """Where a new sweep writes: <output>/<name>-<timestamp>.csv."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return output / f"{config.name}-{stamp}.csv"


def columns(config: SweepConfig) -> tuple[str, ...]:
    """The CSV columns of a sweep: the schema, then the option parameters its cases use."""
    extra = []
    for case in config.cases:
        extra += [name for name, _ in case.params if name not in results.COLUMNS and name not in extra]
    return (*results.COLUMNS, *extra)


def metadata(config: SweepConfig, run_id: str) -> dict[str, Any]:
    """What the sidecar records: the run, the machine and target, tools, and the resolved config."""
    return {
        "run_id": run_id,
        "config_file": str(Path(config.source).resolve()),
        "config": dict(config.raw),
        "settings": dict(config.settings.items()),
        "cases": len(config.cases),
        **sysinfo.collect(Path(config.directory), config.options),
    }
