"""The rank half of a distributed engine: how one rank saves and loads its share, which every engine declares beside
its sweep half (DistributedRunner.ranks) and the rank program (rank.py) runs for the case's engine, never by name.

Three kinds exist: a DCP storage layer (StorageLayer: the engine names its writer and reader; DCP saves and loads
through them), a file of each rank's own (torch_save_ranks.FilePerRank), and a half that runs the whole job itself
(WholeJob: the collective engine's measure of the fabric). torch is imported where a rank runs
them, never by the sweep process that reads the declarations.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from gdsbench.runners.checkpoint import cycle
from gdsbench.runners.checkpoint.rank_job import RankJob


@dataclass(frozen=True)
class Saving:
    """A rank's save of its state: one durable save into a directory, and the storage layer it went through (its
    options and stats become figures; None for a file of the rank's own)."""

    one: cycle.One
    storage: Any = None


@dataclass(frozen=True)
class Loading:
    """A rank's load: one load from a directory, what it brought back (checked against what was saved) and the
    storage layer it read through."""

    load: Callable[[Any], None]
    loaded: Callable[[], Mapping[str, Any]]
    storage: Any = None


class RankHalf(Protocol):
    """What a distributed engine runs on each rank."""

    def saving(self, job: RankJob, state: dict[str, Any], rank: int) -> Saving:
        """How this rank saves `state`, prepared once for the phase (its writer, buffers and plans live across saves)."""

    def loading(self, job: RankJob, source: int, expected: dict[str, Any]) -> Loading:
        """How this rank loads what rank `source` saved (shaped as `expected`)."""


@runtime_checkable
class WholeJob(Protocol):
    """A rank half that runs the rank's whole job itself (the fabric's measure, a training loop of its own);
    `uses_workload`: whether each node's ranks need the case's workload preset made for them first."""

    uses_workload: ClassVar[bool]

    def run(self, job: RankJob) -> dict[str, Any]:
        """This rank's figures of the job."""


class StorageLayer(abc.ABC):
    """DCP's save and load through an engine's storage writer and reader (dcp: DCP's own; dcp_fast: ckptio's)."""

    @abc.abstractmethod
    def writer(self, job: RankJob) -> Any:
        """The engine's storage writer for the job."""

    @abc.abstractmethod
    def reader(self, job: RankJob) -> Any:
        """The engine's storage reader for the job."""

    def saving(self, job: RankJob, state: dict[str, Any], rank: int) -> Saving:
        """dcp.save (or async_save) through the writer, which lives across saves with DCP's plan cache."""
        storage = self.writer(job)
        return Saving(dcp_saver(job, state, storage), storage)

    def loading(self, job: RankJob, source: int, expected: dict[str, Any]) -> Loading:
        """dcp.load through the reader into tensors shaped like `expected` (reused across loads)."""
        import torch.distributed.checkpoint as dcp

        from gdsbench.runners.checkpoint.ranks.state import destination

        storage, dest = self.reader(job), destination(expected)
        return Loading(lambda d: dcp.load(dest, checkpoint_id=d, storage_reader=storage), lambda: dest, storage)


def start_save(
    job: RankJob, state: dict[str, Any], storage: Any, planner: Any, group: Any = None, checkpoint: Path | None = None
) -> Any:
    """Save as the case says (into `checkpoint`, else the writer's directory): dcp.save (None once durable), or
    dcp.async_save with the case's executor and, where given, its own process group (the future of the
    background save: a plain Future, both writers stage synchronously)."""
    import torch.distributed.checkpoint as dcp

    if not job.asynchronous:
        dcp.save(state, checkpoint_id=checkpoint, storage_writer=storage, planner=planner)
        return None
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    kind = AsyncCheckpointerType.PROCESS if job.executor == "process" else AsyncCheckpointerType.THREAD
    return dcp.async_save(
        state,
        checkpoint_id=checkpoint,
        storage_writer=storage,
        planner=planner,
        process_group=group,
        async_checkpointer_type=kind,
    )


def dcp_saver(job: RankJob, state: dict[str, Any], storage: Any) -> cycle.One:
    """One durable DCP save of `state` into a directory: (its seconds, the seconds the caller was blocked).
    The writer and the planner (so DCP's plan cache and the writer's staging buffers) live across saves."""
    from torch.distributed.checkpoint import DefaultSavePlanner

    planner = DefaultSavePlanner(enable_plan_caching=True)

    def save(directory: Path) -> float | None:
        started = time.perf_counter()
        future = start_save(job, state, storage, planner, checkpoint=directory)
        blocked = time.perf_counter() - started
        if future is None:
            return None
        future.result()
        return blocked

    return lambda directory: cycle.timed(lambda: save(directory))
