"""dcp: torch.distributed.checkpoint in one process (no_dist=True): FileSystemWriter with `threads`
writer threads and sync_files=True (it fsyncs each file), a directory of .distcp files and .metadata
(written last); loads read in place into destination tensors allocated before the measured call, as a
model's parameters would be."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, Pattern
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.base import CheckpointRunner
from gdsbench.runners.checkpoint.conditions import initialised_like


class Dcp(CheckpointRunner):
    """torch.distributed.checkpoint in a single process."""

    name = "dcp"
    description = "torch.distributed.checkpoint (one process): FileSystemWriter(thread_count=threads) / load in place"
    calls = {
        Pattern.SAVE: "torch.distributed.checkpoint.save(FileSystemWriter)",
        Pattern.LOAD: "torch.distributed.checkpoint.load(FileSystemReader)",
    }
    modules = ("torch", "torch.distributed.checkpoint")
    threaded = True
    suffix = ".dcp"
    marker = ".metadata"

    def prepare(self, case: Case, workload: workloads.Workload, path: Path, ctx: RunContext) -> Any:
        """Loads fill destination tensors, initialised as a model's are."""
        if case.pattern is Pattern.LOAD:
            return initialised_like(workload.tensors)
        return super().prepare(case, workload, path, ctx)

    def save(self, staged: Any, path: Path, case: Case) -> str | None:
        """dcp.save with FileSystemWriter(sync_files=True) and `threads` writer threads."""
        import torch.distributed.checkpoint as dcp

        writer = dcp.FileSystemWriter(str(path), thread_count=case.get("threads"), sync_files=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "assuming the intent is to save in a single process"
            dcp.save(dict(staged), storage_writer=writer, no_dist=True)
        return None

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """dcp.load into the prepared destination tensors."""
        import torch.distributed.checkpoint as dcp

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(staged, storage_reader=dcp.FileSystemReader(str(path)), no_dist=True)
        return staged


ENGINE = Dcp()
