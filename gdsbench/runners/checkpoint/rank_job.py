"""What one rank of a distributed checkpoint case runs: the case's values it reads, typed and frozen, where it works,
and the workload it maps. The rank program's entry (gdsbench.cli_rank) builds it from the case's key."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, plain

#: Fields named otherwise in a case (`async` is a Python keyword).
CASE_NAMES = {"asynchronous": "async"}


@dataclass(frozen=True)
class RankJob:
    """A rank's job: engine, phase and its options, the checkpoint directory, where rank 0 writes ranks.json, and
    the workload (a file every rank maps, else the node's generated preset or the ranks' own tensors)."""

    engine: str
    pattern: str  # save, load or train
    path: str  # the checkpoint directory, shared by every node
    out: str  # where rank 0 writes ranks.json
    world_size: int
    workload: str
    dtype: str
    seed: int
    layout: str  # sharded or replicated
    compression: str
    asynchronous: bool  # dcp.async_save
    executor: str  # where an async save persists: thread or process
    cache: str  # the page cache before a load
    checkpoint_size: int | None = None
    threads: int | None = None  # None: the library's default (ckptio's IOOptions(); io_options)
    broadcast: bool = False
    checkpoints: int = 1
    scale: float = 1.0
    steps: int = 0  # the train pattern's loop
    interval: int = 0
    step_time: float = 0.0
    workload_file: str | None = None  # a torch.save state dict every rank maps
    warmup: int = 1  # unmeasured saves before the measured phase
    op: str = "ring"  # the collective engine's op (ranks/fabric.py)
    io_size: int | None = None  # the collective engine's message bytes
    passes: int = 5  # the collective engine's timed passes
    tiers: str = ""  # tiered_ranks: the ladder, nearest first (memory+peer, memory+peer+local)
    peer_fault: str = "none"  # tiered_ranks: none, corrupt_peer or kill_replicating
    stage: str = ""  # a case of several launches: which this one is (tiered_ranks kill_replicating: kill, restart)

    @classmethod
    def from_case(
        cls, case: Case, path: str, out: str, workload_file: str | None, warmup: int, stage: str = ""
    ) -> RankJob:
        """The job of a case (every value it holds, the rest at the field's default) and where to work."""
        params = dict(case.params)
        values: dict[str, Any] = {
            f.name: plain(params[CASE_NAMES.get(f.name, f.name)])
            for f in fields(cls)
            if CASE_NAMES.get(f.name, f.name) in params
        }
        where: dict[str, Any] = {"engine": case.engine, "path": path, "out": out, "workload_file": workload_file}
        return cls(**values, **where, warmup=warmup, stage=stage)

    @property
    def kind(self) -> workloads.Kind:
        """The workload's kind."""
        return workloads.kind(self.workload)
