"""The s3torchconnector engines' template (s3torch_save.py, s3torch_dcp.py): checkpoints against an S3 endpoint
(radosgw in tests and demos), saved and loaded in the sweep's process.

An engine declares its calls and implements `write` and `read` (and, where a checkpoint is several objects, `within`
and `whole`); the rest is the same for both, as the s3 engine does it (its keys, the same Key objects; retries off;
credentials from AWS_* only; the bucket made when missing). Measured:
- save: the library call, radosgw's empty-ETag workaround's HEADs included (s3torch_etag.py); bytes are the
  workload's, bytes_on_disk what the checkpoint's objects hold, listed after; this sweep's previous objects of the
  checkpoint are removed first (unmeasured), so every save writes new objects;
- load: a checkpoint saved first (unmeasured) when none is there, the OSDs' caches dropped (cache: cold) or the
  objects read once (warm), then the library call; every tensor is compared with the workload after it;
- train: the training loop of train.py saving straight to S3 every `interval` steps (each save durable when it
  returns; the previous checkpoint's objects removed before it, as every train engine replaces its checkpoint),
  then a restore with the service's caches as they are, and the next step; verified. Rows add the ladder's object
  figures (ladder.py), the baseline of the tiered engine's.
Objects the sweep created (listed after each save) are removed at its end, and the bucket if it made it; nothing else.
"""

from __future__ import annotations

import abc
import contextlib
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import OBJECTS, OBJECTS_CEILING, Traits
from gdsbench.errors import ToolError
from gdsbench.runners import ceph, s3
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import ladder, s3torch_etag, train
from gdsbench.runners.checkpoint.base import (
    EXPECTED_ERRORS,
    S3TORCH,
    TORCH,
    CheckpointRunner,
    Package,
    as_save,
    timed,
    workload_spec,
)
from gdsbench.runners.checkpoint.conditions import level_memory, mib, verify
from gdsbench.runners.resources import Usage
from gdsbench.runners.s3_client import Bucket
from gdsbench.units import size_label

#: The s3 engine's keys these engines share, as the same Key objects: a name means the same for every engine.
SHARED_KEYS = ("endpoint", "bucket", "prefix", "region", "part_size", "rgw_gc")
_S3_KEYS = {key.name: key for key in s3.S3Runner.options}
COLD_NEEDS = (
    f"cache: cold needs the Ceph cluster's admin access ({ceph.CONF}) to drop its OSDs' caches; "
    "cache: warm reads from whatever the service caches"
)


@dataclass(frozen=True)
class Target:
    """Where a case's checkpoint lives: an open bucket, its place (for the sweep's end) and the checkpoint's key."""

    bucket: Bucket
    place: s3.Place
    key: str

    @property
    def uri(self) -> str:
        """s3://bucket/key."""
        return f"s3://{self.place.bucket}/{self.key}"


class S3TorchRunner(CheckpointRunner):
    """An s3torchconnector engine: saves and loads in the sweep's process, one checkpoint a key (prefix) of a bucket."""

    patterns = frozenset({Pattern.SAVE, Pattern.LOAD, Pattern.TRAIN})
    transfers = frozenset({Transfer.CPU_ONLY})
    extra_options = tuple(_S3_KEYS[name] for name in SHARED_KEYS)
    packages: tuple[Package, ...] = (TORCH, S3TORCH, Package("awscrt", "pip install 'gdsbench[s3]'"))
    modules: tuple[str, ...] = ("torch", "s3torchconnector")
    traits = Traits(
        OBJECTS, ceiling=OBJECTS_CEILING
    )  # held to the s3 engine's best PUT (saves) or GET (loads) of the run
    columns = (*CheckpointRunner.columns, *(c for c in ladder.COLUMNS if "object" in c.name or "risk" in c.name))

    def __init__(self) -> None:
        self._made: dict[s3.Place, set[str]] = {}  # objects this sweep's saves created, by place

    # -- what an engine implements -----------------------------------------------------------------------------

    @abc.abstractmethod
    def write(self, tensors: Mapping[str, Any], uri: str, case: Case) -> None:
        """Save `tensors` as the checkpoint at `uri`."""

    @abc.abstractmethod
    def read(self, uri: str, case: Case, staged: Any) -> Mapping[str, Any]:
        """Load the checkpoint at `uri` completely into memory; return its state dict."""

    def destination(self, workload: workloads.Workload) -> Any:
        """What a load reads into, made before it (None: the load makes its own tensors)."""
        return None

    def errors(self) -> tuple[type[BaseException], ...]:
        """Exceptions that mean the engine or the service failed, not a bug in gdsbench."""
        from s3torchconnectorclient import S3Exception

        return (*EXPECTED_ERRORS, S3Exception)

    def within(self, name: str, key: str) -> bool:
        """Whether object `name` belongs to the checkpoint at `key`."""
        return name == key

    def whole(self, stored: Mapping[str, int], key: str) -> bool:
        """Whether a whole checkpoint is among `stored` (the checkpoint's objects)."""
        return key in stored

    # -- the runner contract -----------------------------------------------------------------------------------

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """No endpoint or credentials, the Ceph admin tools rgw_gc or a cold load need, or a cache state S3 lacks."""
        return s3.access_missing(case) or s3.ceph_tools_missing(case) or cache_reason(case) or cluster_reason(case)

    def key(self, case: Case, ctx: RunContext) -> str:
        """The checkpoint's key: named by engine, workload, size, dtype and seed, under `<prefix>/checkpoints/`."""
        spec = workload_spec(case, ctx)
        source = Path(spec.source).stem if spec.is_file else spec.source
        name = f"{self.name}.{source}.{size_label(spec.size)}.{spec.dtype}.s{spec.seed}"
        return f"{case['prefix']}/checkpoints/{name}{self.suffix}"

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The library call, where it goes and the case's conditions, readable in --dry-run and the results."""
        spec = workload_spec(case, ctx)
        argv = ["python-api", self.call(case), f"s3://{case['bucket']}/{self.key(case, ctx)}"]
        argv += [f"threads={case['threads']}"] if self.threaded else []
        argv += [f"workload={spec.source}", f"checkpoint_size={size_label(spec.size)}", f"dtype={spec.dtype}"]
        argv += [f"seed={spec.seed}"] + ([f"cache={case['cache']}"] if case.pattern is Pattern.LOAD else [])
        argv += [f"{k}={case[k]}" for k in ("steps", "step_time", "interval") if case.pattern is Pattern.TRAIN]
        where = s3.endpoint(case) or "$" + s3.ENDPOINT_ENV[1]
        return [
            *argv,
            f"endpoint={where}",
            f"region={case['region']}",
            f"part_size={case['part_size']}",
            "retries=none",
            f"memory={case['memory']}",
        ]

    def release(self) -> None:
        """Forget the objects this sweep made (its end removes them) and the workload."""
        self._made.clear()
        super().release()

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Save or load the case's workload once and measure it."""
        workload = self.workload(case, ctx)
        place = s3.Place.of(case)
        bucket = place.open(case["part_size"])
        try:
            s3.own_bucket(bucket, place, case, ctx)
            target = Target(bucket, place, self.key(case, ctx))
            if case.pattern is Pattern.SAVE:
                return self._measure_save(case, ctx, workload, target)
            if case.pattern is Pattern.TRAIN:
                return self._measure_train(case, ctx, workload, target)
            return self._measure_load(case, ctx, workload, target)
        finally:
            bucket.close()

    # -- the measurement ---------------------------------------------------------------------------------------

    def _measure_save(self, case: Case, ctx: RunContext, workload: workloads.Workload, target: Target) -> Measurement:
        """Measure one save; what its objects hold is listed after it."""
        seconds, usage, notes, stored = self._write(case, ctx, workload, target)
        notes += s3.collect_garbage(case)
        return Measurement(
            bytes=workload.nbytes,
            seconds=seconds,
            bw_bytes=workload.nbytes / seconds,
            **usage.columns(),
            figures={"bytes_on_disk": sum(stored.values())},
            note="; ".join([*notes, workload.description, f"RSS before {mib(usage.rss_before)}"]),
        )

    def _measure_load(self, case: Case, ctx: RunContext, workload: workloads.Workload, target: Target) -> Measurement:
        """Measure one load from the case's cache state (saving the checkpoint first when missing), then verify it."""
        notes = []
        stored = self._stored(target)
        if not self.whole(stored, target.key):
            stored = self._write(as_save(case), ctx, workload, target)[3]
            notes.append("no checkpoint there: saved first (unmeasured)")
        staged = self.destination(workload)
        cache, cache_note = object_cache(case, target.bucket, stored)
        notes += [cache_note, level_memory(case["memory"], workload.nbytes)]
        loaded, seconds, usage = self._timed(functools.partial(self.read, target.uri, case, staged))
        del staged
        try:
            verify(workload.tensors, loaded, Path(target.uri.removeprefix("s3://")))
        except ToolError as exc:
            raise ToolError(f"{self.name}: s3://{exc}") from None
        finally:
            del loaded
        return Measurement(
            bytes=workload.nbytes,
            seconds=seconds,
            bw_bytes=workload.nbytes / seconds,
            **usage.columns(),
            figures={"bytes_on_disk": sum(stored.values())},
            cache=cache,
            note="; ".join([*notes, "verified", workload.description, f"RSS before {mib(usage.rss_before)}"]),
        )

    def _measure_train(self, case: Case, ctx: RunContext, workload: workloads.Workload, target: Target) -> Measurement:
        """A training loop saving straight to S3, then a restore into the training state and one step, verified."""
        step = train.Step(case["step_time"])
        saving = case.with_params(pattern=Pattern.SAVE, memory="as-is")  # the loop's memory is its own
        durable: list[float] = []
        notes: list[str] = []

        def checkpoint() -> None:
            seconds, _, said, _ = self._write(saving, ctx, workload, target)
            durable.append(seconds)
            notes[:] = said[:1]

        with Usage() as usage:
            times = train.run_loop(step, case["steps"], case["interval"], checkpoint)
        staged = self.destination(workload)
        loaded, seconds, _ = self._timed(functools.partial(self.read, target.uri, case, staged))
        restore_seconds = seconds + ladder.step_seconds(step)
        del staged
        try:
            verify(workload.tensors, loaded, Path(target.uri.removeprefix("s3://")))
        finally:
            del loaded
        figures: dict[str, Any] = {
            "bytes_on_disk": sum(self._stored(target).values()),
            "durable_object_seconds": ladder.median(durable),
            "restore_object_seconds": seconds,
            "work_at_risk_steps": float(case["interval"]),  # each checkpoint is in S3 before the loop goes on
        }
        notes += [
            f"{len(times.stalls)} checkpoints in {len(times.steps)} steps",
            "restore: the service's caches as they were, verified",
            workload.description,
        ]
        farthest = figures["durable_object_seconds"]
        return ladder.row(times, restore_seconds, farthest, figures, workload.nbytes, notes, usage)

    def _write(
        self, case: Case, ctx: RunContext, workload: workloads.Workload, target: Target
    ) -> tuple[float, Usage, list[str], dict[str, int]]:
        """Save the checkpoint, timed, with radosgw's empty ETag accepted; record the objects it created (a failed
        save's are removed at once: they must not pass for a checkpoint). The seconds, the cost, the notes and the
        checkpoint's objects as listed after the save."""
        self._remove_previous(target)
        before = set(self._stored(target))
        notes = [level_memory(case["memory"], workload.nbytes)]
        try:
            with s3torch_etag.accepted(case["region"], target.place.endpoint) as etag:
                _, seconds, usage = self._timed(functools.partial(self.write, workload.tensors, target.uri, case))
        except BaseException:
            with contextlib.suppress(ToolError):
                self._record(target, before, case, ctx)
                self._remove_previous(target)
            raise
        stored = self._record(target, before, case, ctx)
        return seconds, usage, [*filter(None, [etag.note()]), *notes], stored

    def _timed(self, call: Callable[[], Any]) -> tuple[Any, float, Usage]:
        """Run `call` timed, with what it cost; an engine or service failure becomes a ToolError naming it."""
        return timed(self.name, self.errors(), call)

    # -- the checkpoint's objects ------------------------------------------------------------------------------

    def _stored(self, target: Target) -> dict[str, int]:
        """The checkpoint's objects and their sizes, as the store lists them."""
        listed = target.bucket.sizes(target.key)
        return {name: size for name, size in listed.items() if self.within(name, target.key)}

    def _record(self, target: Target, before: set[str], case: Case, ctx: RunContext) -> dict[str, int]:
        """After a save: the checkpoint's objects that were not there before it are this sweep's (removed at its end
        unless keep_files; radosgw's garbage then collected with rgw_gc). The checkpoint's objects as listed."""
        stored = self._stored(target)
        new = tuple(sorted(set(stored) - before))
        self._made.setdefault(target.place, set()).update(new)
        if new:
            s3.undo_at_end(s3.RemoveObjects(target.place, new), case, ctx)
        return stored

    def _remove_previous(self, target: Target) -> None:
        """Delete this sweep's objects of the checkpoint (never others), so a save writes new objects."""
        for name in sorted(self._made.get(target.place, set())):
            if self.within(name, target.key):
                target.bucket.delete(name)


def client_config(case: Case) -> Any:
    """The case's part size, path-style requests (radosgw's, MinIO's), retries off (as the s3 engine's)."""
    from s3torchconnector import S3ClientConfig

    return S3ClientConfig(part_size=case["part_size"], force_path_style=True, max_attempts=1)


def object_cache(case: Case, bucket: Bucket, stored: Mapping[str, int]) -> tuple[str, str]:
    """The cache state before a load: the OSDs' caches dropped (cold) or every object read once (warm)."""
    if case["cache"] == "warm":
        for name, size in stored.items():
            bucket.get(name, memoryview(bytearray(size)))
        return "warm", "warm: the checkpoint's objects read once before the load (unmeasured)"
    return ceph.cold()


def cache_reason(case: Case) -> str | None:
    """Why a load's cache state cannot be had here: no page cache is between S3 and memory; cold needs Ceph's admin."""
    if case.pattern is not Pattern.LOAD or case["cache"] == "warm":
        return None
    if case["cache"] == "cold-machine":
        return (
            "cache: cold-machine drops this machine's page cache, which an S3 load never passes through: use "
            "cold (the OSDs' caches dropped) or warm"
        )
    if not ceph.has_admin("ceph"):
        return COLD_NEEDS
    return None


def cluster_reason(case: Case) -> str | None:
    """Why rgw_gc or a cold load would act on another cluster than the case's endpoint's (s3.other_cluster)."""
    return s3.other_cluster(case, case["rgw_gc"] or (case.pattern is Pattern.LOAD and case["cache"] == "cold"))
