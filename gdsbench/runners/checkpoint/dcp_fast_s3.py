"""dcp_fast in S3 (issue 33): a case whose block names a `bucket` runs its ranks against
`s3://bucket/<fresh prefix>/<name>` (ckptio.Writer / Reader on objects: each rank's share one data object uploaded
in parallel parts, `.metadata` PUT last as the commit; loads by parallel ranged GETs, verified on every rank), a
fresh prefix per run (objects.py). As on disk: a save runs the workload's unmeasured saves first in the same
ranks; a load saves first (unmeasured, ranks of their own), then sets the service's caches (warm: every object read
once; cold: the OSDs' caches dropped) before its ranks start.
"""

from __future__ import annotations

from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import objects
from gdsbench.runners.checkpoint.conditions import level_memory
from gdsbench.runners.checkpoint.distributed import with_nodes, with_options


def cannot_run(case: Case) -> str | None:
    """Why the case cannot run in S3: as every ckptio engine's (objects.case_reason), or checkpoints in a row (each
    a directory of its own on disk; one checkpoint a case in S3)."""
    if case.get("checkpoints", 1) > 1:
        return "checkpoints in a row are directories of a folder: a case in S3 saves or loads one checkpoint"
    return objects.case_reason(case)


def run(runner: Any, case: Case, ctx: RunContext) -> Measurement:
    """Save or load the case's workload on `world_size` ranks in a fresh prefix, and measure it."""
    ctx.resources.close_at_end(runner.release)
    shared, workload = runner._workload(case, ctx)
    with objects.fresh_place(case, ctx, runner.name, runner.path(case, ctx).name) as place:
        notes = []
        if case.pattern is Pattern.LOAD:
            runner._launch(case.with_params(pattern=Pattern.SAVE), ctx, place.url, shared, warmup=0)
            notes.append(objects.set_cache(case, place)[1])
        notes.append(level_memory(case.get("memory"), workload.nbytes))
        ranks = runner._launch(case, ctx, place.url, shared, runner.warmup(case))
        notes += ["verified on every rank"] if case.pattern is Pattern.LOAD else []
        stored = sum(place.stored().values())
        measured = runner._measurement(case, workload, place.url, ranks, notes, on_disk=stored)
    return with_nodes(with_options(measured, ranks), ranks, ctx.launch, case)
