"""tiered_ranks `peer_fault: kill_replicating`: a rank SIGKILLed while it receives a peer copy, then a restarted job.
Two launches after the loop's (tiered_ranks.py runs them, the RAM folders kept between):

- `kill`: every rank saves step C (whole everywhere), then step K; the rank holding the last rank's copies (on the
  first node) SIGKILLs itself once K's copy has landed in its temp file up to a random point (before 75% of it), having written what it
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
import shutil
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
    lost_node,
    node_root,
    ranks_per_node,
    timed_restore,
)

KILL_BEFORE = 0.75  # the kill lands before this share of the copy (a random point of it)
POLL_SECONDS = 0.001  # between looks at the incoming temp file
WAIT_SECONDS = 120.0  # the most a holder waits for the copy it is to be killed receiving


def steps(job: RankJob) -> tuple[int, int]:
    """The step saved whole before the kill (C) and the one killed in flight (K): after every step of the loop."""
    return job.steps + job.interval, job.steps + 2 * job.interval


def kill_record(job: RankJob) -> Path:
    """Where the killed rank says what it saw before it dies (the run's durable folder: it outlives every node)."""
    return Path(job.path) / "kill.json"


def kill(job: RankJob, rank: int, node: int, state: dict[str, Any], options: Any) -> dict[str, Any]:
    """Save C, wait until every peer holds it, then save K: the holder of the last rank's copies dies once K's copy
    has begun to land; the others wait for their copies and meet at a barrier it never reaches (their errors end
    the launch)."""
    from ckptio import TieredCheckpointer

    calibration, killed = steps(job)
    world, per_node = dist.get_world_size(), ranks_per_node()
    last = world - 1
    victim = (last + per_node) % world  # the ring's holder of the last rank's copies
    with TieredCheckpointer(locations(job, rank, node), options=options, require_durable=False) as ckpt:
        dist.barrier()
        first = ckpt.save(state, calibration)
        first.wait(tier=1)
        if 1 not in first.durable_seconds:
            raise RuntimeError(f"rank {rank}: step {calibration}'s peer copy failed: {first.errors.get(1)}")
        dist.barrier()
        saved = ckpt.save(state, killed)  # the RAM copy made: the replication runs behind it
        if rank == victim:  # killed at a random point of the copy (its bytes about this rank's own)
            mark = int(random.uniform(0.0, KILL_BEFORE) * sum(t.nbytes for t in state.values()))
            die_receiving(job, held_folder(job, node, rank, last), (killed, calibration), last, mark)
        saved.wait(tier=1)
        dist.barrier()  # never passed: the victim is gone
    raise RuntimeError(f"rank {rank}: the job went on after rank {victim} was killed")


def die_receiving(job: RankJob, folder: Path, steps: tuple[int, int], source: int, mark: int) -> None:
    """Once a temp file of the killed step's copy in `folder` holds more than `mark` bytes, write what was seen and
    SIGKILL this process; RuntimeError where the copy was kept first (the replication outran the looks)."""
    step, calibration = steps
    started = time.perf_counter()
    while time.perf_counter() - started < WAIT_SECONDS:
        torn = [(t, t.stat().st_size) for t in folder.glob(f".step-{step:012d}.ckpt.*") if exists(t)]
        landed = [(t, size) for t, size in torn if size > mark]
        if landed:
            break
        if (folder / f"step-{step:012d}.ckpt").exists():
            raise RuntimeError(f"rank {source}'s copy of step {step} was kept before its temp file was seen")
        time.sleep(POLL_SECONDS)
    else:
        raise RuntimeError(f"no copy of rank {source}'s step {step} began to land within {WAIT_SECONDS:g} s")
    temp, size = landed[0]
    record: dict[str, Any] = {"rank": dist.get_rank(), "source": source, "step": step, "calibration": calibration}
    record.update(temp=temp.name, temp_bytes=size, mark_bytes=mark, seconds=time.perf_counter() - started)
    kill_record(job).write_text(json.dumps(record))
    os.kill(os.getpid(), signal.SIGKILL)


def exists(path: Path) -> bool:
    """Whether a file is still there (a temp file is renamed into place, or removed, at any moment)."""
    try:
        path.stat()
    except FileNotFoundError:
        return False
    return True


def restart(job: RankJob, rank: int, node: int, state: dict[str, Any], options: Any) -> dict[str, Any]:
    """The last node lost, every copy its ranks' holders keep checked, then this rank's restore: the step every
    rank can get whole, exactly; its figures and the killed rank's record."""
    lost, per_node = lost_node(), ranks_per_node()
    facts = json.loads(kill_record(job).read_text())
    dist.barrier()
    if node == lost and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        shutil.rmtree(node_root(job, node), ignore_errors=True)
    source = (rank - per_node) % dist.get_world_size()  # whose copies this rank holds (the peer tier's ring)
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
