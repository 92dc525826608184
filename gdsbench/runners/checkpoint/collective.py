"""collective: what torch.distributed moves between the sweep's ranks (gloo on host memory; pattern `exchange`), the
ceiling the peer tier's rows are held to as fio's is for files and the s3 engine's for objects. `op: ring` is the
peer tier's own pattern (each rank sends to the same local rank on the next node while receiving from the previous
one), `broadcast` rank 0 to all, `all_gather` every rank's part to all; `checkpoint_size` bytes per rank in
`io_size` messages, on `world_size` ranks of the sweep's launcher (`launcher: {name: torchrun, nodes: 2}`: two
"nodes" on this host). A row is the median of `passes` passes (after one unmeasured), each timed between barriers
as the slowest rank's; bw_bytes what all ranks received per second, rank_bw_bytes one rank's; CPU every rank's.
"""

from __future__ import annotations

import statistics
from typing import Any, ClassVar

from gdsbench.cases import Case, Pattern
from gdsbench.columns import FABRIC, Column, Traits
from gdsbench.keys import Key, one_of, positive_int
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint.distributed import DistributedRunner, measured_cost, with_nodes
from gdsbench.runners.checkpoint.rank_job import RankJob
from gdsbench.runners.file_sets import FileSet

OPS = ("ring", "broadcast", "all_gather")
PASSES = 5
OP = Key(
    "op",
    one_of(*OPS),
    "one of " + ", ".join(OPS),
    "ring",
    "collective: what the ranks move: ring (each rank to the same local rank on the next node, as the peer tier's "
    "copies go), broadcast (rank 0 to all) or all_gather",
    patterns=(Pattern.EXCHANGE.value,),
)
PASSES_KEY = Key(
    "passes",
    positive_int,
    "a positive integer",
    PASSES,
    "collective: timed passes per run (after one unmeasured); the row is their median",
    patterns=(Pattern.EXCHANGE.value,),
)


class Exchange:
    """The rank half: the case's op timed on a gloo group of its own (ranks/fabric.py)."""

    uses_workload: ClassVar[bool] = False

    def run(self, job: RankJob) -> dict[str, Any]:
        """Passes of the op (one unmeasured first), each the slowest rank's seconds; this rank's CPU meanwhile."""
        import torch.distributed as dist

        from gdsbench.runners.checkpoint.ranks import fabric
        from gdsbench.runners.resources import Usage

        nbytes, message = int(job.checkpoint_size or 0), int(job.io_size or 0)
        on = fabric.group(1800.0)
        one = fabric.moves(job.op, nbytes, message, on)
        fabric.timed(one, on)
        with Usage() as usage:
            passes = [fabric.timed(one, on) for _ in range(job.passes)]
        moved = fabric.received_bytes(job.op, nbytes, message, dist.get_rank(), dist.get_world_size())
        return {"passes": passes, "received_bytes": moved, **usage.columns()}


class Collective(DistributedRunner):
    name = "collective"
    description = "torch.distributed between the ranks (gloo): ring, broadcast, all_gather; the peer tier's ceiling"
    calls = {Pattern.EXCHANGE: "torch.distributed isend/irecv, broadcast, all_gather"}
    patterns = frozenset({Pattern.EXCHANGE})
    traits = Traits(FABRIC)
    ranks = Exchange()
    engine_options = (OP, PASSES_KEY)
    columns = (
        *DistributedRunner.columns,
        Column(
            "rank_bw_bytes", "bytes/s", "what a receiving rank received per second (the slowest rank's pass, median)"
        ),
        Column("passes_spread", "ratio", "the slowest pass's seconds / the fastest's"),
    )

    threaded = False

    @property
    def axes(self) -> frozenset[str]:
        """Every distributed engine's axes, and the message size (io_size)."""
        return super().axes | {"io_size"}

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """Bytes and messages named; at least two ranks."""
        if not case.get("checkpoint_size") or not case.get("io_size"):
            return "collective moves checkpoint_size bytes per rank in io_size messages: name both"
        if case.get("world_size") < 2:
            return "collective needs world_size 2 or more (ranks to move bytes between)"
        return None

    def file_sets(self, cases: list[Case], ctx: RunContext) -> list[FileSet]:
        """No files: it moves bytes between ranks."""
        return []

    def memory_bytes(self, case: Case, ctx: RunContext) -> int:
        """Two messages per rank."""
        return 2 * int(case.get("io_size") or 0) * int(case.get("world_size") or 1)

    def _job(self, case: Case, path: Any, shared: Any, out: str, warmup: int) -> list[str]:
        """The rank program's arguments (no workload: the ranks move buffers of their own)."""
        return ["--case", case.key, "--checkpoint", "-", "--out", out, "--warmup", "0"]

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """One launch of the ranks; the row is the median pass."""
        ranks = self._launch(case, ctx, "-", None, warmup=0)
        passes = ranks[0]["passes"]
        seconds = statistics.median(passes)
        total = sum(int(r["received_bytes"]) for r in ranks)
        received = max(int(r["received_bytes"]) for r in ranks)
        note = (
            f"{case.get('op')}: {received} bytes received per rank in {case.get('io_size')}-byte messages, "
            f"{len(ranks)} ranks (gloo); median of {len(passes)} passes {min(passes):.4f}-{max(passes):.4f} s"
        )
        cost = measured_cost(ranks, rank_bw_bytes=received / seconds, passes_spread=max(passes) / min(passes))
        measured = Measurement(bytes=total, seconds=seconds, bw_bytes=total / seconds, note=note, **cost)
        return with_nodes(measured, ranks, ctx.launch, case)


ENGINE = Collective()
