"""tiered: the durability ladder (issue 33), ckptio.TieredCheckpointer in the training loop of `pattern: train`.

`tiers:` names the ladder, nearest first: `[local, s3]` saves to a private folder in the sweep's `directory` and
drains each checkpoint to a fresh prefix of the case's `bucket:` in the background (endpoint and credentials from
AWS_* only, as ckptio reads them); `[local]` is the ladder's first rung alone; `[s3]` saves straight to S3 with
ckptio.save (blocking), the direct save the ladder is held to. `async: true` saves with blocking=False.
Per row, beside the train pattern's figures: the seconds until durable in each tier, a restore from each tier
(the object one with the local copies removed) and the work at risk (ladder.py). `fault:` runs one fault instead
of the plain object restore (tier_faults.py): corrupt_local, lose_local, store_down, kill_upload. Every expectation that fails
(the wrong tier or step restored, a state that differs, a drain that should have failed and did not) fails the
row, naming what happened. The folder and the objects are this run's own, removed after it (keep_files: kept).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.keys import Key, one_of, positive_int
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import kill_upload, ladder, objects, tier_faults, train
from gdsbench.runners.checkpoint.base import CKPTIO, EXPECTED_ERRORS, TORCH, CheckpointRunner, Package, timed
from gdsbench.runners.checkpoint.conditions import set_cache, verify
from gdsbench.runners.checkpoint.distributed import DISTRIBUTED_OPTIONS, SHM
from gdsbench.runners.checkpoint.fastpersist import BACKENDS, odirect_reason
from gdsbench.runners.resources import Usage

#: The ladders `tiers:` takes, nearest first: a near tier a save writes from training memory (a folder in `directory`,
#: or one in RAM made under SHM), then S3; or S3 alone. Those with a peer tier (PEER_LADDERS) run on ranks: engine
#: tiered_ranks.
PEER_LADDERS = (("memory", "peer"), ("memory", "peer", "local"), ("memory", "peer", "s3"))
#: What tiered_ranks runs: the peer ladders, and RAM alone on the same ranks (their reference: the loop without a peer).
RANK_LADDERS = (("memory",), *PEER_LADDERS)
LADDERS = (("local",), ("local", "s3"), ("memory",), ("memory", "s3"), ("s3",), *PEER_LADDERS)


def tier_list(value: Any) -> str:
    """`tiers:` a list of tiers nearest first: [local], [local, s3], [memory], [memory, s3], [s3], or on ranks
    [memory, peer], [memory, peer, local] and [memory, peer, s3] (or the text local+s3); as text."""
    names = value.split("+") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise ValueError("not a list of tier names")
    if tuple(name.strip() for name in names) not in LADDERS:
        raise ValueError("not a ladder of local or memory, then s3 (or memory, peer, then local or s3)")
    return "+".join(name.strip() for name in names)


TIERS = Key(
    "tiers",
    tier_list,
    "a list of tiers, nearest first: [local], [local, s3], [memory], [memory, s3], [s3]; tiered_ranks: [memory] "
    "(the reference), [memory, peer], [memory, peer, local] or [memory, peer, s3] (in a matrix, a list of such lists)",
    "local+s3",
    "where each checkpoint goes: local (a folder in `directory`) or memory (a private folder in /dev/shm, ckptio's "
    "memory:// place), then s3 (a prefix of `bucket`, drained in the background); [s3] alone saves straight to S3; "
    "peer (tiered_ranks): each rank's copy also in the RAM of the same local rank on the next node",
    patterns=train.TRAIN,
)
FAULT = Key(
    "fault",
    one_of(*tier_faults.FAULTS),
    "one of " + ", ".join(tier_faults.FAULTS),
    "none",
    "a fault before the object tier's restore: corrupt_local (one byte of the newest local copy flipped), "
    "lose_local (the local folder removed), store_down (the drains sent to a closed port), kill_upload (a child "
    "saving the next step SIGKILLed during its upload, `kills` times), exit_unpersisted (the exit right after a save "
    "S3 never got: refused, then persisted by the restarted job; tiers [local, s3] or [memory, s3])",
    patterns=train.TRAIN,
)
KILLS = Key(
    "kills",
    positive_int,
    "a positive integer",
    20,
    "kill_upload: how many children are killed during their upload",
    patterns=train.TRAIN,
    used_with=(("fault", ("kill_upload",)),),
)
ASYNC = next(key for key in DISTRIBUTED_OPTIONS if key.name == "async")


MEMORY = "memory://"


@dataclass(frozen=True)
class Tiers:
    """A run's tier locations, nearest first (a local folder, an s3:// prefix), and the bucket the prefix is in."""

    locations: tuple[str, ...]
    bucket: Any = None  # gdsbench's client of the case's bucket (the object tier's listing and clean-up)

    @property
    def local(self) -> Path | None:
        """The near tier's folder (a local folder, or a memory tier's in RAM), when the ladder has one."""
        first = self.locations[0]
        if first.startswith("s3://"):
            return None
        return Path(first.removeprefix(MEMORY))

    @property
    def in_memory(self) -> bool:
        """Whether the near tier is in RAM."""
        return self.locations[0].startswith(MEMORY)

    @property
    def objects(self) -> int | None:
        """The object tier's index, when the ladder has one."""
        return len(self.locations) - 1 if self.locations[-1].startswith("s3://") else None


class TierPending(train.Pending):
    """A TieredCheckpointer save behind the loop: drained once every tier holds it or failed; the next save waits
    only for its local copy (as TieredCheckpointer.save does itself)."""

    def __init__(self, saved: Any) -> None:
        super().__init__(time.perf_counter())
        self.saved = saved

    @property
    def done(self) -> bool:
        """Whether every tier holds the checkpoint or failed to."""
        return bool(self.saved.done())

    def wait(self) -> float:
        """Until the local copy is durable (or failed); its seconds from the save's start."""
        self.saved.wait(tier=0)
        return float(self.saved.durable_seconds.get(0, float("nan")))


class Tiered(CheckpointRunner):
    """ckptio.TieredCheckpointer (or ckptio.save straight to S3) in a training loop, then a restore per tier."""

    name = "tiered"
    description = (
        "ckptio.TieredCheckpointer in a training loop: a local folder, then S3 drained in the background; restores "
        "from the nearest verified copy"
    )
    patterns = frozenset({Pattern.TRAIN})
    transfers = frozenset(BACKENDS)
    packages: tuple[Package, ...] = (TORCH, CKPTIO)
    modules = ("torch", "ckptio")
    extra_options = (TIERS, FAULT, KILLS, ASYNC, *objects.OPTIONS)
    columns = (*CheckpointRunner.columns, *ladder.COLUMNS, *ladder.FAULT_COLUMNS)

    def requirements(self, case: Case) -> tuple[Package, ...]:
        """ckptio, and the AWS CRT (ckptio's s3 extra) where a tier is S3."""
        return (*super().requirements(case), *((objects.AWSCRT,) if "s3" in case["tiers"] else ()))

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """A ckptio without the ladder, an S3 tier out of reach, a fault or async mode the ladder cannot take,
        O_DIRECT refused (CPU_ONLY)."""
        import ckptio

        if not hasattr(ckptio, "TieredCheckpointer"):
            return "this ckptio has no TieredCheckpointer (issue 33): pip install -e lib/ckptio"
        tiers = case["tiers"].split("+")
        if "peer" in tiers:
            return "a peer tier is held by other ranks: run it with engine tiered_ranks (world_size 2 or more)"
        takes = tier_faults.FAULT_LADDERS.get(case["fault"], tier_faults.DEFAULT_LADDERS)
        if case["fault"] != "none" and tuple(tiers) not in takes:
            named = " or ".join(f"[{', '.join(ladder)}]" for ladder in takes)
            return f"fault {case['fault']} is a fault of the ladder: run it with tiers {named}"
        if case["async"] and tiers == ["s3"]:
            return "tiers [s3] saves straight to S3 with ckptio.save, which blocks: async needs a local tier first"
        if "memory" in tiers and case.transfer is not Transfer.CPU_CACHED:
            return "a memory tier is RAM (tmpfs): O_DIRECT has no meaning there; run it with transfer CPU_CACHED"
        reason = objects.reason(case) if "s3" in tiers else None
        if reason or tiers == ["s3"]:
            return reason
        return odirect_reason(str(ctx.directory)) if BACKENDS[case.transfer] == "direct" else None

    def call(self, case: Case) -> str:
        """The ladder's calls, as --dry-run and the rows show them."""
        tiers = case["tiers"].split("+")
        if tiers == ["s3"]:
            return f"training loop: ckptio.save(s3://) every {case['interval']} steps, then ckptio.load(s3://)"
        blocking = "" if not case["async"] else ", blocking=False"
        return (
            f"training loop: ckptio.TieredCheckpointer([{', '.join(tiers)}]).save(step{blocking}) every "
            f"{case['interval']} steps, then load() from each tier (fault: {case['fault']})"
        )

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The shared checkpoint command, its location the tiers' (each run makes new ones under them)."""
        argv = super().command(case, ctx)
        where = [f"{ctx.directory}/gdsbench-tiers.*/"] if "local" in case["tiers"] else []
        where += [f"{MEMORY}{SHM}/gdsbench-tiers.*/"] if "memory" in case["tiers"] else []
        where += [f"s3://{case['bucket']}/{case['prefix']}/{self.name}.*/"] if "s3" in case["tiers"] else []
        return [*argv[:2], " ".join(where), *argv[3:], f"tiers={case['tiers']}", f"fault={case['fault']}"]

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """A training loop saving to the case's tiers, then a restore from each tier (or the case's fault)."""
        workload = self.workload(case, ctx)
        with self._tiers(case, ctx) as tiers, tier_faults.ckptio_warnings() as said:
            measured = (
                self._direct(case, workload, tiers) if tiers.local is None else self._ladder(case, ctx, workload, tiers)
            )
        return self._with_warnings(case, measured, said)

    def _with_warnings(self, case: Case, measured: Measurement, said: list[str]) -> Measurement:
        """The row with what its fault must do and what ckptio warned of while it ran (expected or not)."""
        fault = case["fault"]
        figures = {**measured.figures, "ckptio_warnings": len(said)}
        if fault in tier_faults.EXPECTED:
            figures["fault_expected"] = tier_faults.EXPECTED[fault]
        note = "; ".join(filter(None, [measured.note, tier_faults.warnings_note(fault, said)]))
        return replace(measured, figures=figures, note=note or None)

    @contextlib.contextmanager
    def _tiers(self, case: Case, ctx: RunContext) -> Iterator[Tiers]:
        """This run's own tier locations: a private folder in `directory`, a fresh prefix in the bucket."""
        with contextlib.ExitStack() as stack:
            found: list[str] = []
            bucket = None
            keep = ctx.resources.keep_files
            if "local" in case["tiers"]:
                found.append(str(stack.enter_context(ladder.private_folder(ctx.directory, "gdsbench-tiers", keep))))
            if "memory" in case["tiers"]:  # memory:///dev/shm/<private folder>: ckptio's place for a RAM folder
                folder = stack.enter_context(ladder.private_folder(SHM, "gdsbench-tiers", keep))
                found.append(f"{MEMORY}{folder}")
            if "s3" in case["tiers"]:
                bucket, prefix = stack.enter_context(ladder.private_prefix(case, ctx, self.name))
                found.append(f"s3://{case['bucket']}/{prefix}")
            yield Tiers(tuple(found), bucket)

    def errors(self) -> tuple[type[BaseException], ...]:
        """ckptio's named errors and the engines' usual ones."""
        from ckptio import CheckpointError

        return (*EXPECTED_ERRORS, CheckpointError)

    # -- the ladder -----------------------------------------------------------------------------------------

    def _ladder(self, case: Case, ctx: RunContext, workload: Any, tiers: Tiers) -> Measurement:
        """The loop through TieredCheckpointer, its figures checked, then the restores."""
        step = train.Step(case["step_time"])
        loop = self._train(case, workload, tiers, step)
        figures, notes = loop.figures, loop.notes
        local = tiers.local
        assert local is not None
        newest = local / step_name(loop.saves[-1].step)
        figures["bytes_on_disk"] = newest.stat().st_size if newest.exists() else None
        cache_note = (
            "memory (the tier is RAM: no page cache to set)"
            if tiers.in_memory
            else set_cache(sorted(p for p in local.iterdir() if p.is_file()), case["cache"])
        )
        restore = self._restore(case, tiers, workload, 0, loop.saves[-1].step)
        restore_seconds = restore.seconds + ladder.step_seconds(step)
        figures["restore_local_seconds"] = restore.seconds
        if case["fault"] == "store_down":  # the local copy stays good: restored from it, exactly
            figures.update(tier_faults.restored(case["fault"], restore, 0))
        if case["fault"] == "kill_upload":
            figures.update(self._kills(case, tiers, workload, loop.saves[-1].step))
            notes.append(f"kill_upload: {figures['kills_made']} children killed while saving, then a save drained")
        elif case["fault"] == "exit_unpersisted":
            figures.update(self._exit_unpersisted(case, tiers, workload, loop.saves[-1].step))
            notes.append("exit_unpersisted: the exit after a save S3 never got refused; the restarted job persisted it")
        elif tiers.objects is not None and case["fault"] != "store_down":
            fault_note = tier_faults.apply(case["fault"], local, newest)
            found = self._restore(case, tiers, workload, tiers.objects, loop.saves[-1].step)
            figures.update(tier_faults.restored(case["fault"], found, tiers.objects))
            notes.append(fault_note)
        notes.append(f"near-tier restore from {cache_note}, verified")
        return self._measurement(loop.times, restore_seconds, figures, workload, notes, loop.usage)

    def _train(self, case: Case, workload: Any, tiers: Tiers, step: train.Step) -> tier_faults.Loop:
        """Train with a TieredCheckpointer saving every `interval` steps; every drain waited for at the end (and,
        store_down, once more after the store is back: tier_faults.store)."""
        from ckptio import TieredCheckpointer

        options = _io_options(case)
        loop = tier_faults.Loop()
        with tier_faults.store(case["fault"]) as store:
            made = timed(self.name, self.errors(), lambda: TieredCheckpointer(list(tiers.locations), options=options))
            ckpt = made[0]
            try:
                loop.times, loop.usage = self._loop(case, step, self._tiered_save(case, workload, ckpt, tiers, loop))
                timed(self.name, self.errors(), ckpt.wait_drained)
                loop.figures, loop.notes = tier_faults.checked_saves(case["fault"], loop, tiers.objects)
                loop.notes += store.resume(ckpt, tiers, loop.saves)
            finally:
                ckpt.close()
        return loop

    def _tiered_save(
        self, case: Case, workload: Any, ckpt: Any, tiers: Tiers, loop: tier_faults.Loop
    ) -> Callable[[], TierPending]:
        """The loop's checkpoint: the work at risk sampled, then TieredCheckpointer.save."""

        def checkpoint() -> TierPending:
            number = (len(loop.saves) + 1) * case["interval"]
            if tiers.objects is not None:
                durable = [s.step for s in loop.saves if tiers.objects in s.durable_seconds]
                loop.risk.append(ladder.at_risk(number, durable))
            saved = ckpt.save(workload.tensors, number, blocking=not case["async"])
            loop.saves.append(saved)
            return TierPending(saved)

        return checkpoint

    def _restore(self, case: Case, tiers: Tiers, workload: Any, tier: int, step: int) -> tier_faults.Restore:
        """A restarted job's restore (a new TieredCheckpointer), timed; it must read `step` from `tier`, exactly
        the saved state, else the row fails naming what it read and what it skipped."""
        from ckptio import TieredCheckpointer
        from ckptio.records import Restored

        with TieredCheckpointer(list(tiers.locations), options=_io_options(case)) as ckpt:
            _, seconds, _ = timed(self.name, self.errors(), lambda: ckpt.load(map_location="cpu"))
            found = ckpt.last
        assert isinstance(found, Restored)  # what the load made
        if (found.tier, found.step) != (tier, step):
            raise ToolError(
                f"{self.name}: restore read step {found.step} from tier {found.tier} ({tiers.locations[found.tier]}),"
                f" expected step {step} from tier {tier} ({tiers.locations[tier]}); skipped: "
                f"{tier_faults.skipped_text(found.skipped) or 'none'}"
            )
        verify(workload.tensors, found.state, Path(tiers.locations[tier]))
        return tier_faults.Restore(found.tier, found.step, tuple(found.skipped), seconds)

    def _kills(self, case: Case, tiers: Tiers, workload: Any, good: int) -> dict[str, Any]:
        """kill_upload: children saving the next step killed during their upload, a restore from S3 checked after
        each; then the next step saved through the ladder, restored exactly from S3 (timed); the uploads it left."""
        from ckptio import CheckpointError, TieredCheckpointer

        local, objects = tiers.local, tiers.objects
        assert local is not None and objects is not None
        after = good + case["interval"]
        url = f"{tiers.locations[objects]}/{step_name(after)}"
        key = url.split("/", 3)[3]

        def restore() -> str | None:
            tier_faults.apply("none", local, local)
            try:
                with TieredCheckpointer(list(tiers.locations), options=_io_options(case)) as ckpt:
                    ckpt.load(map_location="cpu")
                    found = ckpt.last
            except CheckpointError as exc:
                return f"{type(exc).__name__}: {exc}"
            return kill_upload.check_restore(found, objects, good, after, exact)

        def exact(state: Any) -> None:
            verify(workload.tensors, state, Path(url))

        store = tiers.bucket  # gdsbench's own client of the case's bucket (the run's prefix in it)
        size = kill_upload.child_size(workload.nbytes)
        done = kill_upload.kill_uploads(store, key, url, case["kills"], size, restore)
        with TieredCheckpointer(list(tiers.locations), options=_io_options(case)) as ckpt:
            saved = timed(self.name, self.errors(), lambda: ckpt.save(workload.tensors, after))[0]
            ckpt.wait_drained()
        final = self._from_objects(case, tiers, workload, saved, "kill_upload: the save after the kills")
        left = kill_upload.key_uploads(store, key)
        for upload in left:  # this run's own prefix: nothing else to keep them for
            store.abort(upload)
        said = {"restore_object_seconds": final.seconds, "restored_tier": "s3", "state_exact": "yes"}
        return {**kill_upload.figures(done, len(left)), **said}

    def _exit_unpersisted(self, case: Case, tiers: Tiers, workload: Any, good: int) -> dict[str, Any]:
        """exit_unpersisted: the next step saved with the store down, then close(): it must raise NotDurable naming
        that step and S3; the store back, a restarted job restores the step from the near tier and saves it again,
        then it must restore from S3 exactly (the near tier's copies removed)."""
        from ckptio import TieredCheckpointer
        from ckptio.errors import NotDurable
        from ckptio.records import Restored

        objects = tiers.objects
        assert objects is not None
        after = good + case["interval"]
        with tier_faults.store("store_down"):
            ckpt = TieredCheckpointer(list(tiers.locations), options=_io_options(case))
            timed(self.name, self.errors(), lambda: ckpt.save(workload.tensors, after))
            try:
                ckpt.close()
            except NotDurable as refused:
                said = refused
            else:
                raise ToolError(f"exit_unpersisted: close() returned though step {after} never reached S3: lost")
        if said.step != after or objects not in said.missing:
            raise ToolError(f"exit_unpersisted: close() refused, but not for step {after} in S3: {said}")
        with TieredCheckpointer(list(tiers.locations), options=_io_options(case)) as ckpt:
            state = ckpt.load(map_location="cpu")
            found = ckpt.last
            if not isinstance(found, Restored) or (found.tier, found.step) != (0, after):
                raise ToolError(f"exit_unpersisted: the restarted job did not find step {after} in the near tier")
            saved = ckpt.save(state, after)
            ckpt.wait_drained()
        final = self._from_objects(case, tiers, workload, saved, f"exit_unpersisted: step {after} saved again")
        said_text = str(said)[:300]
        return {
            "restore_object_seconds": final.seconds,
            "restored_tier": "s3",
            "state_exact": "yes",
            "exit_refused": said_text,
        }

    def _from_objects(self, case: Case, tiers: Tiers, workload: Any, saved: Any, what: str) -> tier_faults.Restore:
        """A save that must have reached S3 (ToolError naming `what` where it did not), then a restore of its step
        from S3 with the near tier's copies removed, exactly."""
        local, objects = tiers.local, tiers.objects
        assert local is not None and objects is not None
        if objects not in saved.durable_seconds:
            raise ToolError(f"{what} never reached S3: {saved.errors.get(objects)}")
        tier_faults.apply("none", local, local)
        return self._restore(case, tiers, workload, objects, saved.step)

    # -- straight to S3 -----------------------------------------------------------------------------------------

    def _direct(self, case: Case, workload: Any, tiers: Tiers) -> Measurement:
        """The loop saving straight to S3 with ckptio.save (durable when it returns), then ckptio.load from there."""
        import ckptio

        step, durable = train.Step(case["step_time"]), list[float]()

        def checkpoint() -> None:
            durable.append(timed(self.name, self.errors(), lambda: ckptio.save(workload.tensors, url(len(durable))))[1])

        def url(index: int) -> str:
            return f"{tiers.locations[0]}/{step_name((index + 1) * case['interval'])}"

        times, usage = self._loop(case, step, checkpoint)
        loaded, seconds, _ = timed(self.name, self.errors(), lambda: ckptio.load(url(len(durable) - 1)))
        restore_seconds = seconds + ladder.step_seconds(step)
        try:
            verify(workload.tensors, loaded, Path(url(len(durable) - 1)))
        finally:
            del loaded
        stored = tiers.bucket.sizes(url(len(durable) - 1).split("/", 3)[3])
        figures = {
            "durable_object_seconds": ladder.median(durable),
            "restore_object_seconds": seconds,
            "work_at_risk_steps": float(case["interval"]),  # the previous checkpoint is in S3 when the next starts
            "bytes_on_disk": sum(stored.values()),
        }
        notes = ["straight to S3: each save durable when it returns", "restore verified"]
        return self._measurement(times, restore_seconds, figures, workload, notes, usage)

    # -- shared -------------------------------------------------------------------------------------------------

    def _loop(self, case: Case, step: train.Step, checkpoint: Callable[[], Any]) -> tuple[train.LoopTimes, Usage]:
        """The training loop, timed and costed; a ckptio failure inside it fails the row, named."""
        times, _, usage = timed(
            self.name, self.errors(), lambda: train.run_loop(step, case["steps"], case["interval"], checkpoint)
        )
        return times, usage

    def _measurement(
        self,
        times: train.LoopTimes,
        restore_seconds: float,
        figures: Mapping[str, Any],
        workload: Any,
        notes: list[str],
        usage: Usage | None,
    ) -> Measurement:
        """A train row (seconds: until durable in the farthest tier reached) with the ladder's figures."""
        farthest = figures.get("durable_object_seconds") or figures.get("durable_local_seconds")
        notes = [f"{len(times.stalls)} checkpoints in {len(times.steps)} steps", *notes, workload.description]
        return ladder.row(times, restore_seconds, farthest, figures, workload.nbytes, notes, usage)


def step_name(step: int) -> str:
    """The name of a step's checkpoint in every tier (TieredCheckpointer's)."""
    return f"step-{step:012d}.ckpt"


def _io_options(case: Case) -> Any:
    """ckptio's IOOptions of the case's transfer: O_DIRECT (CPU_ONLY) or buffered (CPU_CACHED)."""
    from ckptio import IOOptions

    return IOOptions(backend=BACKENDS[case.transfer])


ENGINE = Tiered()
