"""The durability ladder's figures (issue 33), shared by the train-pattern engines that put checkpoints in a local
tier, an object tier or both (tiered, dcp_upload, the s3torch engines): what each checkpoint waited for, per tier,
what a restore from each tier took, and how much work a node loss would have cost at each checkpoint.

- durable_<tier>_seconds: from a save's start until its copy is durable in that tier (median over the checkpoints);
- restore_<tier>_seconds: the restore call alone, from that tier, into memory, verified (the training loop's
  restore_seconds adds the next step);
- work_at_risk_steps: at each checkpoint, before it is taken, the steps run since the newest checkpoint durable in
  the object tier (since the start when none is yet): `interval` when every checkpoint reaches the object tier
  before the next one, more while drains lag (median over the checkpoints).
The report's two-level goodput model reads them (report/ladder.py; docs/benchmarks.md, "The durability ladder").
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gdsbench.cases import Case
from gdsbench.columns import TEXT, Column
from gdsbench.errors import ToolError
from gdsbench.runners import s3
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import train
from gdsbench.runners.resources import Usage
from gdsbench.runners.s3_client import Bucket

COLUMNS = (
    Column(
        "durable_local_seconds",
        "s",
        "median seconds from a save's start until durable in the near tier (local or memory: the row's tiers)",
    ),
    Column("durable_object_seconds", "s", "median seconds from a save's start until durable in the object tier"),
    Column("restore_local_seconds", "s", "a restore from the near tier (local or memory) into memory, verified"),
    Column("restore_object_seconds", "s", "a restore from the object tier (the local copy removed or corrupted)"),
    Column(
        "work_at_risk_steps",
        "count",
        "median, at each checkpoint, of the steps run since the newest checkpoint durable in the object tier",
    ),
)
#: What a fault case (`fault:`) found, beside the figures: a failed expectation fails the row instead.
FAULT_COLUMNS = (
    Column("fault_expected", "", "what the case's fault must do (tier_faults.EXPECTED); else the row fails", TEXT),
    Column("ckptio_warnings", "count", "warnings ckptio logged during the case (a fault's are expected; see the note)"),
    Column(
        "restored_tier",
        "",
        "the tier the fault case's restore read from (tiered: local or s3; tiered_ranks: each rank's tier)",
        TEXT,
    ),
    Column("skipped_reason", "", "the copies that restore skipped, and why", TEXT),
    Column(
        "state_exact", "", "whether the restored state equals the saved one exactly (yes; else the row fails)", TEXT
    ),
    Column("drain_error", "", "why a drain to the object tier failed (store_down: the first error)", TEXT),
    Column(
        "kills_made",
        "count",
        "kill_upload: children SIGKILLed while saving; kill_replicating: ranks SIGKILLed while their peer copy moved",
    ),
    Column(
        "kills_in_upload", "count", "kill_upload: kills that left an incomplete multipart upload (inside an upload)"
    ),
    Column(
        "torn_seen",
        "count",
        "kill_upload: restores after a kill that found a torn checkpoint; kill_replicating: copies kept under a "
        "checkpoint's name that do not verify (0; else the row fails)",
    ),
    Column("uploads_left", "count", "kill_upload: incomplete multipart uploads of the key left after the final save"),
    Column("exit_refused", "", "exit_unpersisted: what close() said of the save S3 never got (NotDurable)", TEXT),
)


def at_risk(step: int, durable_steps: Iterable[int]) -> int:
    """Steps run at `step` since the newest checkpoint durable in the object tier (since step 0 when none is)."""
    return step - max(durable_steps, default=0)


def step_seconds(step: Callable[[], None]) -> float:
    """One training step's seconds (after a restore: the loop's next step)."""
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def row(
    times: train.LoopTimes,
    restore_seconds: float,
    durable: float | None,
    figures: Mapping[str, Any],
    nbytes: int,
    notes: list[str],
    usage: Usage | None,
) -> Measurement:
    """A train row whose seconds run until `durable` (the farthest tier's median; None: the loop's own), with the
    ladder's figures beside the loop's."""
    summary = train.summarize(times, restore_seconds)
    summary["durable_seconds"] = durable or summary["durable_seconds"]
    measured = train.measurement(summary, nbytes, notes, usage)
    return replace(measured, figures={**measured.figures, **figures})


def median(values: Iterable[float | int]) -> float | None:
    """The median of the values, None when there are none (a tier no checkpoint reached)."""
    found = list(values)
    return float(statistics.median(found)) if found else None


@contextlib.contextmanager
def private_folder(directory: Path, stem: str, keep: bool) -> Iterator[Path]:
    """A new folder of this run's own in `directory` (mkdtemp: a fresh name, mode 0700, so nothing in it is anyone
    else's), removed with what is in it when the block ends unless `keep`."""
    directory.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{stem}.", dir=directory))
    try:
        yield folder
    finally:
        if not keep:
            remove_private(folder)


def remove_private(folder: Path) -> None:
    """Remove a folder private_folder made, and what is in it (never following a link out of it)."""
    if folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.geteuid():
        shutil.rmtree(folder)


@contextlib.contextmanager
def private_prefix(case: Case, ctx: RunContext, stem: str) -> Iterator[tuple[Bucket, str]]:
    """A new key prefix of this run's own in the case's bucket (made when missing, as the s3 engine does): a fresh
    random name, found empty, so every object under it is this run's; they are deleted when the block ends (then
    radosgw's garbage collected with rgw_gc) unless the sweep keeps its files. The open bucket and the prefix."""
    place = s3.Place.of(case)
    bucket = place.open(case.get("part_size") or s3.MIN_PART)
    try:
        s3.own_bucket(bucket, place, case, ctx)
        prefix = f"{case['prefix']}/{stem}.{secrets.token_hex(6)}"
        if bucket.sizes(prefix + "/"):
            raise ToolError(f"s3://{place.bucket}/{prefix}/ holds objects already: not this run's to write over")
        try:
            yield bucket, prefix
        finally:
            if not ctx.resources.keep_files:
                remove_objects(bucket, prefix)
                s3.collect_garbage(case)
    finally:
        bucket.close()


def remove_objects(bucket: Bucket, prefix: str) -> None:
    """Delete every object under a prefix private_prefix made (all of them this run's)."""
    for key in sorted(bucket.sizes(prefix + "/")):
        bucket.delete(key)
