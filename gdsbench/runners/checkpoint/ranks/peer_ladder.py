"""One rank of a tiered_ranks case: ckptio.TieredCheckpointer with a peer tier (`tiers: [memory, peer]`, or with a
durable folder after them) in a training loop on every rank, then a node lost and a restarted job's restore; or
RAM alone (`[memory]`, the reference of the others: the same loop without a peer), restored from each rank's RAM.

The tiers of rank r on node n: memory://SHM/<run>/node<n>/own<r> (its RAM), peer://SHM/<run>/node<n> (its copies
held by the same local rank of the next node), then <checkpoint>/rank<r> where the ladder has `local` or `s3`. Before the loop each rank measures, on the same bytes, the references its figures are held to: a copy
into host memory (the RAM tier's ceiling) and a ring exchange of torch.distributed (ranks/fabric.py: the peer
tier's). After it, the last node is lost (its RAM folder removed: its own copies and what it held for others) and
every rank restores with a new TieredCheckpointer: the lost node's ranks from their peers, the others from their
own RAM, every rank the newest step, exactly; a rank that reads another tier or step fails the row. `peer_fault:
corrupt_peer` flips a byte of each copy the lost node's ranks would fetch: they must skip it (its checksum) and read
the third tier. With a third tier (a folder of the sweep's directory, or a prefix of its bucket: <checkpoint>/rank<r>
either way), every node's RAM is lost next and every rank restores from it."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from gdsbench.runners.checkpoint import ladder, train
from gdsbench.runners.checkpoint.rank_job import RankJob
from gdsbench.runners.checkpoint.ranks import fabric, peer_kill
from gdsbench.runners.checkpoint.ranks.peer_tiers import (
    held_folder,
    locations,
    lose_ram,
    lost_node,
    ranks_per_node,
    source_of,
    timed_restore,
)
from gdsbench.runners.checkpoint.ranks.rank import host_copy_seconds
from gdsbench.runners.checkpoint.ranks.state import local_tensors, preset_state
from gdsbench.runners.checkpoint.tiered import TierPending
from gdsbench.runners.resources import Usage

MESSAGE = 16 << 20  # the ring reference's messages: the peer tier's own (ckptio's peers.CHUNK_BYTES)


def references(state: dict[str, Any], nbytes: int) -> dict[str, float]:
    """The same-run ceilings of this rank's bytes: a host-memory copy, and a ring exchange (warm, median of 3)."""
    on = fabric.group(600.0)
    ring = fabric.moves("ring", nbytes, MESSAGE, on)
    fabric.timed(ring, on)
    exchange = statistics.median(fabric.timed(ring, on) for _ in range(3))
    return {"host_copy_seconds": host_copy_seconds(state), "ring_seconds": exchange}


class PeerLadder:
    """The rank half of tiered_ranks (rank_half.WholeJob)."""

    uses_workload = True

    def run(self, job: RankJob) -> dict[str, Any]:
        """References, the loop, the node lost, the restore; this rank's figures."""
        from ckptio import IOOptions, TieredCheckpointer

        rank, node = dist.get_rank(), int(os.environ.get("GROUP_RANK", "0"))
        state = {name: t.contiguous() for name, t in local_tensors(preset_state(job)[0]).items()}
        options = IOOptions(backend="buffered")
        if job.stage:  # a later launch of kill_replicating (ranks/peer_kill.py)
            return peer_kill.STAGES[job.stage](job, rank, node, state, options)
        nbytes = sum(t.nbytes for t in state.values())
        figures: dict[str, Any] = {"own_bytes": nbytes, **references(state, nbytes)}
        compute, gradient = train.Step(job.step_time), torch.zeros(1)
        saves: list[Any] = []

        def step() -> None:
            compute()
            dist.all_reduce(gradient)

        tiers = job.tiers.split("+")
        far, peer = len(tiers) - 1, "peer" in tiers
        risk: list[int] = []

        def checkpoint() -> Any:
            number = (len(saves) + 1) * job.interval
            risk.append(ladder.at_risk(number, (s.step for s in saves if far in s.durable_seconds)))
            saves.append(ckpt.save(state, number, blocking=not job.asynchronous))
            return TierPending(saves[-1])

        with TieredCheckpointer(locations(job, rank, node), options=options, require_durable=False) as ckpt:
            figures["replicate_idle_seconds"] = idle_replication(ckpt, state) if peer else None
            dist.barrier()
            with Usage() as usage:
                times = train.run_loop(step, job.steps, job.interval, checkpoint)
            ckpt.wait_drained()
        figures.update(usage.columns(), **loop_figures(times, saves), step_reps=compute.reps)
        figures["work_at_risk_steps"] = statistics.median(risk) if risk else None
        if job.peer_fault == "kill_replicating":  # the kill and the restart are launches of their own
            return figures
        if not peer:  # RAM alone, the peer ladders' reference: a restarted job restores from each rank's RAM
            seconds = timed_restore(job, rank, node, state, saves[-1].step, 0, options)[0]
            return {**figures, "restore_seconds": seconds, "restored_tier": 0, "skipped": []}
        figures.update(restore_after_loss(job, rank, node, state, saves[-1].step, options))
        if len(tiers) > 2:
            figures["restore_far_seconds"] = restore_after_all_lost(job, rank, node, state, saves[-1].step, options)
        return figures


def idle_replication(ckpt: Any, state: dict[str, Any]) -> float:
    """One save of the state as step 0 before the loop, nothing else running: seconds from its RAM copy until the
    peer holds it (the replication's own cost, beside the loop's, where training competes for the CPU; it also warms
    the buffers the loop's saves reuse). Step 0 is older than every step of the loop: trimmed, never restored."""
    dist.barrier()
    saved = ckpt.save(state, 0)
    saved.wait(tier=1)
    if 1 not in saved.durable_seconds:
        raise RuntimeError(f"the idle save's peer copy failed: {saved.errors.get(1)}")
    return float(saved.durable_seconds[1] - saved.durable_seconds[0])


def loop_figures(times: train.LoopTimes, saves: list[Any]) -> dict[str, Any]:
    """The loop's times, and per tier the median seconds until durable (the peer's replication: after the RAM
    copy); a tier's first failure, where one failed."""
    durable = {i: [s.durable_seconds[i] for s in saves if i in s.durable_seconds] for i in range(3)}
    replicated = [s.durable_seconds[1] - s.durable_seconds[0] for s in saves if {0, 1} <= set(s.durable_seconds)]
    errors = [f"step {s.step} tier {i}: {why}" for s in saves for i, why in sorted(s.errors.items())]
    return {
        "steps": times.steps,
        "draining": times.draining,
        "stalls": times.stalls,
        "durable": times.durable,
        "durable_tier_seconds": [statistics.median(v) if v else None for v in durable.values()],
        "replicate_seconds": statistics.median(replicated) if replicated else None,
        "tier_errors": errors[:3],
        "saves": len(saves),
    }


def restore_after_loss(
    job: RankJob, rank: int, node: int, state: dict[str, Any], newest: int, options: Any
) -> dict[str, Any]:
    """The last node's RAM lost, then every rank's restore (timed, the slowest rank's is the row's): the step and
    tier it read, checked exactly; RuntimeError where it is not the newest step from the tier expected."""
    per_node, lost = ranks_per_node(), lost_node()
    dist.barrier()
    if node == lost:
        lose_ram(job, node)
    source = source_of(rank)
    if job.peer_fault == "corrupt_peer" and source // per_node == lost:
        flip(held_folder(job, node, rank, source) / f"step-{newest:012d}.ckpt")
    dist.barrier()
    expected = 0 if node != lost else 2 if job.peer_fault == "corrupt_peer" else 1
    seconds, found = timed_restore(job, rank, node, state, newest, expected, options)
    said = [f"tier {s.tier} step {s.step}: {s.reason}" for s in found.skipped if s.step is not None]
    return {"restore_seconds": seconds, "restored_tier": found.tier, "lost_node": lost, "skipped": said}


def restore_after_all_lost(
    job: RankJob, rank: int, node: int, state: dict[str, Any], newest: int, options: Any
) -> float:
    """Every node's RAM lost at once (several nodes: only the third tier outlives them), then every rank's restore
    from that tier, checked exactly; its seconds."""
    dist.barrier()
    lose_ram(job, node)
    dist.barrier()
    return timed_restore(job, rank, node, state, newest, len(job.tiers.split("+")) - 1, options)[0]


def flip(path: Path) -> None:
    """One byte in the middle of a held copy's largest storage flipped (its index says where: never padding), the
    copy a lost node's rank would fetch (corrupt_peer)."""
    from ckptio.inspect import read_index

    largest = max(read_index(path).storages, key=lambda s: s.nbytes)
    with open(path, "r+b") as held:
        held.seek(largest.offset + largest.nbytes // 2)
        byte = held.read(1)
        held.seek(-1, os.SEEK_CUR)
        held.write(bytes([byte[0] ^ 0xFF]))
