"""torch_save_ranks: every rank torch.saves its own state into a file of its own, then fsyncs it and the directory;
a load is torch.load(weights_only=True) of the rank's file. DLIO's checkpoint writer (which MLPerf Storage runs),
on torchrun's ranks (distributed.py): the baseline of the MLPerf Storage checkpoint geometry. Through the page
cache. Rank 0 marks a checkpoint whole (`.complete`) once every rank's file is durable.
"""

from __future__ import annotations

from gdsbench.cases import Case, Pattern
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.distributed import DistributedRunner


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
    marker = ".complete"
    rank_file_pattern = r"rank-(\d+)\.pt"

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """torch.save writes on the caller's thread, whole and uncompressed."""
        if case.get("async"):
            return "torch_save_ranks saves synchronously; async saves are DCP's (dcp, dcp_fast)"
        if case.get("compression") != "none":
            return "torch_save_ranks writes uncompressed; compression is dcp's and dcp_fast's"
        return None


ENGINE = TorchSaveRanks()
