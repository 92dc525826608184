"""fastpersist in S3 (issue 33): a case whose block names a `bucket` saves and loads one object
`s3://bucket/<fresh prefix>/<name>` through ckptio.Checkpointer (the whole object in one multipart upload; loads by
parallel ranged GETs, verified), a fresh prefix per run (objects.py). Measured as the s3torch engines measure theirs:
- save: the Checkpointer's save (durable when it returns: the upload completed); bytes_on_disk what the prefix holds
  after it;
- load: a save first (unmeasured), the service's caches as the case says (warm: the object read once; cold: the
  OSDs' caches dropped), then load or load_into, every tensor compared with the workload after it.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import io_options, objects
from gdsbench.runners.checkpoint.base import InProcessRunner
from gdsbench.runners.checkpoint.conditions import initialised_like, level_memory, mib, verify
from gdsbench.runners.resources import Usage


def cannot_run(case: Case) -> str | None:
    """Why the case cannot run in S3: as every ckptio engine's (objects.case_reason), or a file-only option."""
    if case.get("recycle") or case.get("mmap"):
        return "recycle and mmap reuse or map a file: a checkpoint in S3 is an object (leave out bucket)"
    return objects.case_reason(case)


def run(runner: Any, case: Case, ctx: RunContext) -> Measurement:
    """Save or load the case's workload once in a fresh prefix, measured; the row adds the IOOptions it ran with."""
    from ckptio import Checkpointer

    workload = runner.workload(case, ctx)
    name = runner.path(case, ctx).name
    with (
        objects.fresh_place(case, ctx, runner.name, name) as place,
        Checkpointer(place.url, options=runner.options_of(case)) as ckpt,
    ):
        if case.pattern is Pattern.SAVE:
            measured = _save(runner, case, ckpt, workload, place)
        else:
            measured = _load(runner, case, ckpt, workload, place)
        used = io_options.used(ckpt.options)
    figures = {**measured.figures, **io_options.figures(used)}
    return replace(measured, figures=figures, resolved=io_options.resolved(used))


def _save(runner: InProcessRunner, case: Case, ckpt: Any, workload: Any, place: objects.Place) -> Measurement:
    """One measured save into the prefix."""
    memory_note = level_memory(case.get("memory"), workload.nbytes)
    saved, seconds, usage = runner._call(functools.partial(ckpt.save, workload.tensors))
    row = _row(workload, seconds, usage, place, ["one object, new", memory_note])
    return replace(row, figures={**row.figures, "staging_bytes": saved.staging_bytes})


def _load(runner: InProcessRunner, case: Case, ckpt: Any, workload: Any, place: objects.Place) -> Measurement:
    """A save (unmeasured), the cache state, then one measured load, verified."""
    runner._call(functools.partial(ckpt.save, workload.tensors))
    cache, cache_note = objects.set_cache(case, place)
    staged = initialised_like(workload.tensors) if case.get("load_into") else None
    memory_note = level_memory(case.get("memory"), workload.nbytes)
    load = functools.partial(ckpt.load_into, staged) if staged is not None else functools.partial(ckpt.load)
    loaded, seconds, usage = runner._call(load)
    del staged
    _verified(workload, loaded, place)
    return replace(_row(workload, seconds, usage, place, [cache_note, memory_note, "verified"]), cache=cache)


def _verified(workload: Any, loaded: Any, place: objects.Place) -> None:
    """ToolError unless the load returned the workload's tensors exactly."""
    try:
        verify(workload.tensors, loaded, Path(place.url.removeprefix("s3://")))
    finally:
        del loaded


def _row(workload: Any, seconds: float, usage: Usage, place: objects.Place, notes: list[str]) -> Measurement:
    """A save's or load's row: its bandwidth, cost, what the prefix holds and the notes."""
    return Measurement(
        bytes=workload.nbytes,
        seconds=seconds,
        bw_bytes=workload.nbytes / seconds,
        **usage.columns(),
        figures={"bytes_on_disk": sum(place.stored().values())},
        note="; ".join([*notes, workload.description, f"RSS before {mib(usage.rss_before)}"]),
    )
