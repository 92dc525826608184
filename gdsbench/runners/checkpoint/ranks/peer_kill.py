"""tiered_ranks `peer_fault: kill_replicating`: a rank SIGKILLed while it receives a peer copy, then a restarted job.
Two launches after the loop's (tiered_ranks.py runs them, the RAM folders kept between):

- `kill`: every rank saves step C (whole everywhere), then step K; the rank holding the last rank's copies (on the
  first node) SIGKILLs itself once K's copy has landed in its temp file up to a random point (before 75% of it;
  where the copy was whole before it looked, K becomes C and the next step is tried, up to TRIES), having written what it
  saw to `<checkpoint>/kill.json`. The job dies with it (its peers lose a rank), as a real job does; the killed
  rank's RAM folder outlives it (a process crash), a torn temp file in it.
- `restart`: the last node is lost (its RAM folder removed), so its ranks must restore from the holders, the killed
  one among them. Every copy a holder keeps under a checkpoint's name must load verified (a torn copy there fails the
  row), K's copy of the last rank must not be kept (it was killed in flight; kept, nothing was tested: the row
  fails), and every rank restores step C exactly: the lost node's from their peers, the others from their own RAM.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist

from gdsbench.runners.checkpoint.rank_job import RankJob
from gdsbench.runners.checkpoint.ranks.peer_tiers import (
    held_folder,
    locations,
    lose_ram,
    lost_node,
    ranks_per_node,
    source_of,
    timed_restore,
)

KILL_BEFORE = 0.75  # the kill lands before this share of the copy (a random point of it)
TRIES = 5  # steps the kill may take (a copy whole before the holder looked: the next step)
POLL_SECONDS = 0.001  # between looks at the incoming temp file
WAIT_SECONDS = 120.0  # the most a holder waits for the copy it is to be killed receiving


def first_step(job: RankJob) -> int:
    """The step saved whole before the kill: after every step of the loop."""
    return job.steps + job.interval


def kill_record(job: RankJob) -> Path:
    """Where the killed rank says what it saw before it dies (the run's durable folder: it outlives every node)."""
    return Path(job.path) / "kill.json"


def kill(job: RankJob, rank: int, node: int, state: dict[str, Any], options: Any) -> dict[str, Any]:
    """Save a step and wait until every peer holds it, then the next: the holder of the last rank's copies dies
    once that copy has landed to a random point (where the copy was whole before it looked, the next step is tried,
    TRIES in all); the others wait for their copies and meet at a barrier it never reaches (their errors end the
    launch)."""
    from ckptio import TieredCheckpointer

    world, per_node = dist.get_world_size(), ranks_per_node()
    last = world - 1
    victim = (last + per_node) % world  # the ring's holder of the last rank's copies
    with TieredCheckpointer(locations(job, rank, node), options=options, require_durable=False) as ckpt:
        whole = first_step(job)
        replicated(ckpt.save(state, whole), rank)
        for attempt in range(1, TRIES + 1):
            step = whole + job.interval
            dist.barrier()
            saved = ckpt.save(state, step)  # the RAM copy made: the replication runs behind it
            if rank == victim:  # killed at a random point of the copy (its bytes about this rank's own)
                mark = int(random.uniform(0.0, KILL_BEFORE) * sum(t.nbytes for t in state.values()))
                die_receiving(job, held_folder(job, node, rank, last), (step, whole, attempt), last, mark)
            replicated(saved, rank)
            whole = step
            dist.barrier()  # passed only where the holder lived (the copy whole before it looked): the next step
    raise RuntimeError(f"rank {rank}: in {TRIES} saves no copy was still landing when its holder looked")


def replicated(saved: Any, rank: int) -> None:
    """Wait until the peer holds this rank's save; RuntimeError where it does not (the peer gone)."""
    saved.wait(tier=1)
    if 1 not in saved.durable_seconds:
        raise RuntimeError(f"rank {rank}: step {saved.step}'s peer copy failed: {saved.errors.get(1)}")


def die_receiving(job: RankJob, folder: Path, steps: tuple[int, int, int], source: int, mark: int) -> None:
    """Once a temp file of the step's copy in `folder` holds more than `mark` bytes, write what was seen and
    SIGKILL this process; return where the copy was kept first (it outran the looks: the caller tries again)."""
    step, whole, attempt = steps
    started = time.perf_counter()
    while time.perf_counter() - started < WAIT_SECONDS:
        landed = [(t, size) for t in folder.glob(f".step-{step:012d}.ckpt.*") if (size := size_of(t)) > mark]
        if landed:
            break
        if (folder / f"step-{step:012d}.ckpt").exists():
            return
        time.sleep(POLL_SECONDS)
    else:
        raise RuntimeError(f"no copy of rank {source}'s step {step} began to land within {WAIT_SECONDS:g} s")
    temp, size = landed[0]
    record: dict[str, Any] = {"rank": dist.get_rank(), "source": source, "step": step, "calibration": whole}
    record.update(temp=temp.name, temp_bytes=size, mark_bytes=mark, attempt=attempt)
    record.update(seconds=time.perf_counter() - started)
    kill_record(job).write_text(json.dumps(record))
    os.kill(os.getpid(), signal.SIGKILL)


def size_of(path: Path) -> int:
    """A file's size, -1 where it is gone (a temp file is renamed into place, or removed, at any moment)."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


def restart(job: RankJob, rank: int, node: int, state: dict[str, Any], options: Any) -> dict[str, Any]:
    """The last node lost, every copy its ranks' holders keep checked, then this rank's restore: the step every
    rank can get whole, exactly; its figures and the killed rank's record."""
    lost, per_node = lost_node(), ranks_per_node()
    facts = json.loads(kill_record(job).read_text())
    dist.barrier()
    if node == lost:
        lose_ram(job, node)
    source = source_of(rank)
    mine = held_copies(held_folder(job, node, rank, source)) if source // per_node == lost else None
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, {"source": source, **(mine or {})} if mine else None)
    held = [h for h in everyone if h]
    torn = [f"rank {h['source']}'s {name}: {why}" for h in held for name, why in h["torn"]]
    if torn:
        raise RuntimeError(f"a torn copy kept under a checkpoint's name: {torn[0]}")
    whole = {h["source"]: facts["step"] in h["steps"] for h in held}
    if whole.get(facts["source"]):
        raise RuntimeError(
            f"rank {facts['source']}'s copy of step {facts['step']} was kept whole, though its holder was killed "
            f"with {facts['temp_bytes']} bytes of it landed: nothing was killed in flight"
        )
    expected = facts["step"] if all(whole.values()) else facts["calibration"]
    dist.barrier()
    seconds, found = timed_restore(job, rank, node, state, expected, 1 if node == lost else 0, options)
    said = [f"tier {s.tier} step {s.step}: {s.reason}" for s in found.skipped if s.step is not None]
    return {
        "restore_seconds": seconds,
        "restored_tier": found.tier,
        "restored_step": found.step,
        "lost_node": lost,
        "skipped": said,
        "kill": facts,
        "held_checked": sum(len(h["steps"]) for h in held),
        "temps_left": sum(h["temps"] for h in held),
    }


def held_copies(folder: Path) -> dict[str, Any]:
    """The steps of the copies kept in `folder` under a checkpoint's name, those that do not load verified (name,
    why), and the temp files of copies never kept."""
    import ckptio
    from ckptio.errors import CheckpointError

    copies = sorted(folder.glob("step-*.ckpt"))
    torn = []
    for copy in copies:
        try:
            ckptio.load(str(copy))
        except CheckpointError as exc:
            torn.append((copy.name, str(exc)))
    return {"steps": [int(c.name[5:17]) for c in copies], "torn": torn, "temps": len(list(folder.glob(".step-*")))}


STAGES: dict[str, Callable[[RankJob, int, int, dict[str, Any], Any], dict[str, Any]]] = {
    "kill": kill,
    "restart": restart,
}
