"""torch_mmap: torch.load(mmap=True, weights_only=True) of a file torch.save wrote, every page touched
so the reads happen inside the timing: torch's own zero-copy load (loads only)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.runners.checkpoint.conditions import touch_pages
from gdsbench.runners.checkpoint.torch_save import TorchSave


class TorchMmap(TorchSave):
    """torch.load(mmap=True) of a torch.save file, every page touched."""

    name = "torch_mmap"
    description = "torch.load(mmap=True, weights_only=True), every page touched (loads only; written by torch.save)"
    patterns = frozenset({Pattern.LOAD})
    calls = {Pattern.LOAD: "torch.load(mmap=True, weights_only=True)"}

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """torch.load over an mmap of the file, then every page touched."""
        import torch

        tensors = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        touch_pages(tensors.values())
        return tensors


ENGINE = TorchMmap()
