"""tiered_ranks: the memory-first ladder on ranks (issue 39), ckptio.TieredCheckpointer with a peer tier in a training
loop on every rank of the sweep's launcher (`launcher: {name: torchrun, nodes: 2}`: two "nodes" on this host).

`tiers: [memory, peer]` saves each rank's state into its node's RAM (a private folder under /dev/shm) and replicates
it to the same local rank on the next node over torch.distributed (gloo); `[memory, peer, local]` drains it to a
folder in the sweep's `directory` too, `[memory, peer, s3]` to a fresh prefix of `bucket` (S3 as ckptio reaches it:
AWS_* in the environment, which the ranks inherit). Beside the loop's figures each row holds what the same ranks measured on the
same bytes just before it: a copy into host memory (the RAM tier's ceiling, `host_copy_seconds`) and a ring
exchange (`ring_seconds`, the collective engine's op `ring`), and the ratios to them. Then the last node is lost
(its RAM folder removed) and a restarted job restores: that node's ranks from their peers, the others from their
own RAM, each exactly the newest step, or the row fails; with a third tier, every node's RAM is lost next (several
nodes at once) and every rank restores from it (ranks/peer_ladder.py). `peer_fault: kill_replicating` takes two
more launches after the loop's (ranks/peer_kill.py): a rank SIGKILLed while a peer copy lands in it (the job dies
with it), then a restarted job with the last node lost. Every folder and prefix is this run's own, removed after it
(keep_files: kept).
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import TEXT, TIER_COLUMNS, Column
from gdsbench.errors import ToolError
from gdsbench.keys import Key, one_of
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import ladder, objects, train
from gdsbench.runners.checkpoint.base import CKPTIO, TORCH, Package, workload_bytes
from gdsbench.runners.checkpoint.distributed import SHM, DistributedRunner, measured_cost, with_nodes
from gdsbench.runners.checkpoint.tiered import RANK_LADDERS, TIERS

PEER_FAULTS = ("none", "corrupt_peer", "kill_replicating")
PEER_FAULT = Key(
    "peer_fault",
    one_of(*PEER_FAULTS),
    "none, corrupt_peer or kill_replicating",
    "none",
    "tiered_ranks: corrupt_peer flips a byte of each copy the lost node's ranks would fetch from their peers: they "
    "must skip it by its checksum and restore from the third tier (tiers [memory, peer, local] or [memory, peer, s3]); "
    "kill_replicating SIGKILLs the rank receiving the last rank's copy as it lands, then loses the last node: the torn "
    "copy is never used, every rank restores the newest step the peers hold whole (tiers [memory, peer])",
    patterns=train.TRAIN,
)
#: The ladders a peer fault runs on (a fault not named here: every ladder of RANK_LADDERS).
FAULT_LADDERS = {
    "corrupt_peer": (("memory", "peer", "local"), ("memory", "peer", "s3")),
    "kill_replicating": (("memory", "peer"),),
}
#: What a peer fault must do, as its row says it (`fault_expected`): a row that does otherwise fails.
EXPECTED = {
    "corrupt_peer": "the lost node's ranks skip their peers' damaged copies by checksum and restore the newest step "
    "from the third tier, exactly; the others from their own RAM",
    "kill_replicating": "the rank killed while it received the last rank's newest copy kept none of it (a torn temp "
    "file at most); every copy the holders keep verifies; every rank restores the same step exactly, the newest the "
    "peers hold whole: the lost node's ranks from their peers, the others from their own RAM",
}
RAM_COPIES = 6  # the state, 2 own copies in RAM, 2 held for the peer, the workload file (every rank's share)
COLUMNS = (
    Column("durable_peer_seconds", "s", "median seconds from a save's start until its copy is held by the peer"),
    Column("durable_disk_seconds", "s", "median seconds from a save's start until durable in the local folder"),
    Column("replicate_seconds", "s", "median seconds from the RAM copy until the peer holds it (the replication)"),
    Column("replicate_idle_seconds", "s", "the same for one save before the loop, nothing else running (slowest rank)"),
    Column("restore_peer_seconds", "s", "the lost node's slowest rank's restore, from its peer, verified"),
    Column("restore_disk_seconds", "s", "every node's RAM lost: the slowest rank's restore from the local folder"),
    Column("host_copy_seconds", "s", "a copy of the rank's bytes into host memory, the same run (slowest rank)"),
    Column("ring_seconds", "s", "a ring exchange of the rank's bytes over torch.distributed, the same run"),
    Column("stall_vs_copy", "ratio", "the loop's stall per checkpoint / host_copy_seconds"),
    Column("replicate_vs_ring", "ratio", "replicate_seconds / ring_seconds"),
    Column("replicate_idle_vs_ring", "ratio", "replicate_idle_seconds / ring_seconds"),
    Column("restore_vs_ring", "ratio", "restore_peer_seconds / ring_seconds"),
    Column("tier_errors", "", "the first failures of a tier's copies, where any failed", TEXT),
)


class TieredRanks(DistributedRunner):
    name = "tiered_ranks"
    description = (
        "ckptio.TieredCheckpointer [memory(, peer(, local|s3))] in a training loop on ranks; a node lost, restored"
    )
    patterns = frozenset({Pattern.TRAIN})
    transfers = frozenset({Transfer.CPU_CACHED})
    packages: tuple[Package, ...] = (TORCH, CKPTIO)
    engine_options = (TIERS, PEER_FAULT, *objects.OPTIONS)
    columns = (
        *DistributedRunner.columns,
        *ladder.COLUMNS,
        *COLUMNS,
        *(
            c
            for c in ladder.FAULT_COLUMNS
            if c.name in ("fault_expected", "restored_tier", "skipped_reason", "state_exact", "kills_made", "torn_seen")
        ),
    )

    def requirements(self, case: Case) -> tuple[Package, ...]:
        """torch and ckptio, and the AWS CRT (ckptio's s3 extra) where a tier is S3."""
        return (*super().requirements(case), *((objects.AWSCRT,) if "s3" in case["tiers"] else ()))

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """A ladder with a peer, on two nodes or more (the launcher's), a ckptio with the peer place, S3 in reach
        where a tier is S3."""
        from ckptio import errors

        tiers = case["tiers"].split("+")
        if tuple(tiers) not in RANK_LADDERS:
            return "tiered_ranks runs [memory] and ladders with a peer tier ([memory, peer], then local or s3); others: tiered"
        if not hasattr(errors, "PeerError"):
            return "this ckptio has no peer place (issue 39): pip install -e lib/ckptio"
        fault = case["peer_fault"]
        if tuple(tiers) not in FAULT_LADDERS.get(fault, RANK_LADDERS):
            ladders = " or ".join(f"[{', '.join(ladder)}]" for ladder in FAULT_LADDERS[fault])
            return f"peer_fault {fault} runs on tiers {ladders}"
        if ctx.launch.nodes < 2 and "peer" in tiers:
            return "a peer tier needs two nodes or more: launcher: {name: torchrun, nodes: 2} (two on this host)"
        return objects.reason(case) if "s3" in tiers else None

    def path(self, case: Case, ctx: RunContext) -> Path:
        """Where a run's folders go: a new one of this name's in `directory`, and its twin in /dev/shm (the RAM)."""
        return Path(ctx.directory) / "gdsbench-peers.<run>"

    def memory_bytes(self, case: Case, ctx: RunContext) -> int:
        """The state, the RAM tier's `keep` (2) copies and the copies held for a peer (2), the workload mapped."""
        return int(workload_bytes(case, ctx) * RAM_COPIES)

    def call(self, case: Case) -> str:
        """The ladder's calls, as --dry-run and the rows show them."""
        blocking = ", blocking=False" if case.get("async") else ""
        return (
            f"training loop on every rank: ckptio.TieredCheckpointer([{case['tiers'].replace('+', ', ')}])"
            f".save(step{blocking}) every {case['interval']} steps; the last node's RAM lost; load() on every rank"
        )

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """The ranks' loop and restores in this run's own folders (RAM and `directory`, one name) or prefix."""
        ctx.resources.close_at_end(self.release)
        shared, workload = self._workload(case, ctx)
        keep = ctx.resources.keep_files
        with ladder.private_folder(SHM, "gdsbench-peers", keep) as ram, self._durable(case, ctx, ram.name) as durable:
            ranks = self._launch(case, ctx, durable, shared, warmup=0)
            if case["peer_fault"] == "kill_replicating":  # the kill and the restarted job, launches of their own
                survivors = self._launch_to_fail(case, ctx, durable, shared, "kill")
                restarted = self._launch(case, ctx, durable, shared, 0, "restart")
                ranks = [{**loop, **again, "survivors": survivors} for loop, again in zip(ranks, restarted)]
        return with_nodes(self._row(case, ranks, workload.nbytes), ranks, ctx.launch, case)

    @contextlib.contextmanager
    def _durable(self, case: Case, ctx: RunContext, name: str) -> Iterator[str]:
        """Where the ranks' durable tier goes (each rank a folder or prefix of its own in it), named `name` as the
        run's RAM folder is: under a fresh prefix of `bucket` for s3, else a new folder in `directory` (made for
        [memory, peer] too, left empty)."""
        if "s3" in case["tiers"]:  # named as the RAM folder is (the ranks find their RAM by this name)
            with ladder.private_prefix(case, ctx, self.name) as (_, prefix):
                yield f"s3://{case['bucket']}/{prefix}/{name}"
            return
        durable = Path(ctx.directory) / name
        durable.mkdir(mode=0o700)
        try:
            yield str(durable)
        finally:
            if not ctx.resources.keep_files:
                ladder.remove_private(durable)

    def _row(self, case: Case, ranks: list[dict[str, Any]], nbytes: int) -> Measurement:
        """The train row: the slowest rank's steps and stalls, the ladder's medians, the references and ratios."""
        times = train.LoopTimes(
            *[[max(v) for v in zip(*(r[k] for r in ranks))] for k in ("steps", "draining", "stalls", "durable")]
        )
        tiers = case["tiers"].split("+")
        per_tier = [worst(r["durable_tier_seconds"][i] for r in ranks) for i in range(len(tiers))]
        peer = "peer" in tiers
        lost = [r for r in ranks if peer and r.get("node") == r["lost_node"]]
        kept = [r for r in ranks if r not in lost]
        figures: dict[str, Any] = {
            "durable_local_seconds": per_tier[0],
            "durable_peer_seconds": per_tier[1] if peer else None,
            "replicate_seconds": worst(r["replicate_seconds"] for r in ranks) if peer else None,
            "replicate_idle_seconds": worst(r["replicate_idle_seconds"] for r in ranks) if peer else None,
            "restore_local_seconds": max(r["restore_seconds"] for r in kept),
            "restore_peer_seconds": max(r["restore_seconds"] for r in lost) if lost else None,
            **far_figures(tiers, per_tier, ranks),
            "host_copy_seconds": max(r["host_copy_seconds"] for r in ranks),
            "ring_seconds": max(r["ring_seconds"] for r in ranks),
            "tier_errors": "; ".join(e for r in ranks for e in r["tier_errors"][:1]) or None,
            "restored_tier": ", ".join(f"rank {r['rank']}: tier {r['restored_tier']}" for r in ranks),
            "skipped_reason": "; ".join(f"rank {r['rank']} {s}" for r in ranks for s in r["skipped"]) or None,
            "fault_expected": EXPECTED.get(case["peer_fault"]),
            "state_exact": "yes",  # every rank checked its restores exactly (ranks/peer_ladder.py), else no row
        }
        stall = statistics.median(times.stalls)
        figures["stall_vs_copy"] = stall / figures["host_copy_seconds"]
        figures["replicate_vs_ring"] = ratio(figures["replicate_seconds"], figures["ring_seconds"])
        figures["replicate_idle_vs_ring"] = ratio(figures["replicate_idle_seconds"], figures["ring_seconds"])
        if case["peer_fault"] == "kill_replicating":
            figures.update(kill_figures(ranks))
        if tiers[-1] == "s3":  # the ladder's work at risk: since the newest step durable in S3
            figures["work_at_risk_steps"] = worst(r["work_at_risk_steps"] for r in ranks)
        figures["restore_vs_ring"] = ratio(figures["restore_peer_seconds"], figures["ring_seconds"])
        restore = max(r["restore_seconds"] for r in ranks)
        notes = [
            f"{len(times.stalls)} checkpoints in {len(times.steps)} steps of {ranks[0]['step_reps']} matmuls and an "
            f"all-reduce on {len(ranks)} ranks",
            restores_note(case, tiers, ranks),
            f"{ranks[0]['own_bytes']} bytes per rank",
        ]
        farthest = per_tier[-1]
        measured = ladder.row(times, restore, farthest, figures, nbytes, notes, None)
        return replace(measured, **measured_cost(ranks, **measured.figures))

    @property
    def ranks(self) -> Any:  # type: ignore[override]
        """The rank half (ranks/peer_ladder.py: torch imported by the ranks only)."""
        from gdsbench.runners.checkpoint.ranks.peer_ladder import PeerLadder

        return PeerLadder()


def restores_note(case: Case, tiers: list[str], ranks: list[dict[str, Any]]) -> str:
    """What the row's restores read, for its note."""
    if "peer" not in tiers:
        return "a restarted job restored every rank from its own RAM, verified (RAM alone: no node loss survives)"
    if case["peer_fault"] == "kill_replicating":
        return kill_note(ranks)
    damaged = case["peer_fault"] != "none"
    return (
        f"node {ranks[0]['lost_node']} lost (its RAM removed): its ranks restored from "
        + (f"{tiers[-1]} past their peers' damaged copies" if damaged else "their peers")
        + ", the others from their own RAM, verified"
        + (f"; then every node's RAM lost, every rank restored from {tiers[-1]}" if len(tiers) > 2 else "")
    )


def kill_note(ranks: list[dict[str, Any]]) -> str:
    """kill_replicating's note: when the kill landed, what the survivors said, what the restarted job read."""
    kill, survivors = ranks[0]["kill"], ranks[0]["survivors"]
    return (
        f"rank {kill['rank']} SIGKILLed receiving rank {kill['source']}'s step {kill['step']} ({kill['temp_bytes']} "
        f"bytes of it landed{'' if kill['attempt'] == 1 else ', try ' + str(kill['attempt'])}), node "
        f"{ranks[0]['lost_node']} lost (its RAM removed); "
        + (f"a survivor said: {survivors[0][:120]}; " if survivors else "")
        + f"{ranks[0]['held_checked']} copies its peers kept verified ({ranks[0]['temps_left']} torn temp files beside "
        f"them, never read; the tier's next save removes them); every rank restored step {ranks[0]['restored_step']}: the lost node's from their peers, the "
        "others from their own RAM, verified"
    )


def kill_figures(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """kill_replicating's counts (a torn copy, a kill after the copy was whole, or a mix of steps fails the row)."""
    steps = {r["restored_step"] for r in ranks}
    if len(steps) != 1:
        raise ToolError(f"tiered_ranks: kill_replicating: the ranks restored different steps: {sorted(steps)}")
    return {"kills_made": 1, "torn_seen": 0}


def far_figures(tiers: list[str], per_tier: list[float | None], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """A third tier's median seconds until durable, and the slowest rank's restore from it (none: no figures)."""
    if len(tiers) < 3:
        return {}
    durable, restore = TIER_COLUMNS[tiers[2]]
    return {durable: per_tier[2], restore: worst(r["restore_far_seconds"] for r in ranks)}


def worst(values: Any) -> float | None:
    """The largest of the figures every rank gave (None where a rank has none)."""
    found = list(values)
    return None if not found or any(v is None for v in found) else max(found)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None where either is missing."""
    return None if a is None or not b else a / b


ENGINE = TieredRanks()
