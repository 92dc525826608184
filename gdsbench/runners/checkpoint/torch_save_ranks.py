"""torch_save_ranks: every rank torch.saves its own state into a file of its own, then fsyncs it and the directory;
a load is torch.load(weights_only=True) of the rank's file. DLIO's checkpoint writer (which MLPerf Storage runs),
on torchrun's ranks (distributed.py): the baseline of the MLPerf Storage checkpoint geometry. Through the page
cache. Rank 0 marks a checkpoint whole (`.complete`) once every rank's file is durable.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint import cycle
from gdsbench.runners.checkpoint.distributed import DistributedRunner
from gdsbench.runners.checkpoint.rank_half import Loading, Saving
from gdsbench.runners.checkpoint.rank_job import RankJob

MARKER = ".complete"  # written by rank 0 once every rank's file is durable


def rank_file(rank: int) -> str:
    """The file a rank's torch.save writes."""
    return f"rank-{rank}.pt"


class FilePerRank:
    """The rank half: torch.save of the rank's own tensors into its own file, fsynced, then rank 0's marker; a load
    is torch.load(weights_only=True) of the file the source rank wrote."""

    def saving(self, job: RankJob, state: dict[str, Any], rank: int) -> Saving:
        """One durable torch.save of this rank's tensors (DLIO's checkpoint writer), then the marker once every
        rank's is durable (the checkpoint's commit, timed with it as DCP's is)."""
        import torch

        from gdsbench.runners.checkpoint.conditions import fsync_path
        from gdsbench.runners.checkpoint.ranks.state import local_tensors

        local = local_tensors(state)

        def save(directory: Path) -> None:
            directory.mkdir(parents=True, exist_ok=True)
            with open(directory / rank_file(rank), "wb") as f:
                torch.save(local, f)
                f.flush()
                os.fsync(f.fileno())
            fsync_path(directory)
            mark_complete(directory)

        return Saving(lambda directory: cycle.timed(lambda: save(directory)))

    def loading(self, job: RankJob, source: int, expected: dict[str, Any]) -> Loading:
        """torch.load of the source rank's file (the last load's tensors dropped first)."""
        import torch

        loaded: dict[str, Any] = {}

        def load(directory: Path) -> None:
            loaded.clear()
            loaded.update(torch.load(directory / rank_file(source), map_location="cpu", weights_only=True))

        return Loading(load, lambda: loaded)


def mark_complete(directory: Path) -> None:
    """Once every rank's file is durable, rank 0 writes the marker that says the checkpoint is whole."""
    import torch.distributed as dist

    from gdsbench.runners.checkpoint.conditions import fsync_path

    dist.barrier()
    if dist.get_rank() == 0:
        marker = directory / MARKER
        marker.write_text(f"{dist.get_world_size()}\n")
        fsync_path(marker)
        fsync_path(directory)


class TorchSaveRanks(DistributedRunner):
    """torch.save / torch.load of one file per rank."""

    name = "torch_save_ranks"
    description = "torch.save of every rank's own file + fsync; torch.load(weights_only=True), torchrun ranks"
    calls = {
        Pattern.SAVE: "torch.save per rank",
        Pattern.LOAD: "torch.load(weights_only=True) per rank",
    }
    patterns = frozenset({Pattern.SAVE, Pattern.LOAD})
    threaded = False
    suffix = ".ranks"
    marker = MARKER
    rank_file_pattern = r"rank-(\d+)\.pt"
    ranks = FilePerRank()

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """torch.save writes on the caller's thread, whole and uncompressed."""
        if case.get("async"):
            return "torch_save_ranks saves synchronously; async saves are DCP's (dcp, dcp_fast)"
        if case.get("compression") != "none":
            return "torch_save_ranks writes uncompressed; compression is dcp's and dcp_fast's"
        return None


ENGINE = TorchSaveRanks()
