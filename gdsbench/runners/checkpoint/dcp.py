"""dcp: torch.distributed.checkpoint with its own storage layer, the baseline of distributed checkpoints.

FileSystemWriter(thread_count=threads, sync_files=True) (each item a torch.save archive through buffered
writes, every file fsynced; compression "zstd" is DCP's ZStandard stream extension) and
FileSystemReader, on `world_size` ranks launched by torchrun (distributed.py). Through the page cache.
"""

from __future__ import annotations

from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.columns import DISTRIBUTED, FILES, FILES_CEILING, Traits
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.distributed import DistributedRunner
from gdsbench.runners.checkpoint.rank_half import StorageLayer
from gdsbench.runners.checkpoint.rank_job import RankJob


class DcpStorage(StorageLayer):
    """The rank half: DCP's FileSystemWriter (fsynced; zstd as DCP's stream extension) and FileSystemReader."""

    def writer(self, job: RankJob) -> Any:
        """FileSystemWriter with the case's threads and codec."""
        import torch.distributed.checkpoint as dcp

        extensions = [_zstd()] if job.compression == "zstd" else None
        threads = job.threads or 1  # dcp's cases always carry threads
        return dcp.FileSystemWriter(job.path, thread_count=threads, sync_files=True, _extensions=extensions)

    def reader(self, job: RankJob) -> Any:
        """FileSystemReader."""
        import torch.distributed.checkpoint as dcp

        return dcp.FileSystemReader(job.path)


def _zstd() -> Any:
    """DCP's own zstd stream extension."""
    from torch.distributed.checkpoint._extension import ZStandard

    return ZStandard()


class Dcp(DistributedRunner):
    """DCP's FileSystemWriter / FileSystemReader."""

    name = "dcp"
    rank_file_pattern = r"__(\d+)_\d+\.distcp"  # FileSystemWriter's data files
    ranks = DcpStorage()
    traits = Traits(FILES, ceiling=FILES_CEILING, baseline=DISTRIBUTED)  # distributed engines' x dcp
    description = (
        "torch.distributed.checkpoint: FileSystemWriter(thread_count=threads) / FileSystemReader, torchrun ranks"
    )
    calls = {
        Pattern.SAVE: "torch.distributed.checkpoint.save(FileSystemWriter)",
        Pattern.LOAD: "torch.distributed.checkpoint.load(FileSystemReader)",
    }

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """DCP compresses whole item streams (zstd); the float codecs need the bytes' dtype: dcp_fast's."""
        if case.get("compression") not in ("none", "zstd"):
            return f"dcp compresses with its zstd stream extension only; {case.get('compression')} is dcp_fast's"
        return None

    def call(self, case: Case) -> str:
        """The DCP call, async with its executor where the case says so."""
        if case.pattern is Pattern.TRAIN:
            return super().call(case)
        if case.pattern is Pattern.SAVE and case.get("async"):
            return f"torch.distributed.checkpoint.async_save(FileSystemWriter, {case.get('executor')} executor)"
        return super().call(case)


ENGINE = Dcp()
