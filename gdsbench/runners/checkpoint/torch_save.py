"""torch_save: torch.save into an open file (zip format, crc32 over every byte), then fsync; loads are
torch.load(weights_only=True), every record read into fresh memory. Through the page cache
(CPU_CACHED): the baseline every engine is compared to."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.columns import FILES, FILES_CEILING, SINGLE_PROCESS, Traits
from gdsbench.runners.checkpoint.base import InProcessRunner


class TorchSave(InProcessRunner):
    """torch.save + fsync / torch.load(weights_only=True)."""

    name = "torch_save"
    description = "torch.save into a file + fsync; torch.load(weights_only=True) (page cache)"
    calls = {Pattern.SAVE: "torch.save", Pattern.LOAD: "torch.load(weights_only=True)"}
    traits = Traits(FILES, ceiling=FILES_CEILING, baseline=SINGLE_PROCESS)  # every checkpoint engine's x torch_save

    def save(self, staged: Any, path: Path, case: Case) -> str | None:
        """torch.save into an open file (the runner fsyncs it)."""
        import torch

        with open(path, "wb") as f:
            torch.save(dict(staged), f)
        return None

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """torch.load with weights_only semantics onto the CPU."""
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)


ENGINE = TorchSave()
