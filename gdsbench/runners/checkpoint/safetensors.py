"""safetensors: safetensors.torch.save_file, then fsync; load_file (lazy views of an mmap in 0.8), then
one byte of every page read so the bytes are really in memory. Through the page cache (CPU_CACHED)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.runners.checkpoint.base import EXPECTED_ERRORS, SAFETENSORS, TORCH, InProcessRunner
from gdsbench.runners.checkpoint.conditions import touch_pages


class Safetensors(InProcessRunner):
    """safetensors save_file + fsync / load_file."""

    name = "safetensors"
    description = "safetensors.torch save_file + fsync; load_file (mmap) with every page touched (page cache)"
    calls = {Pattern.SAVE: "safetensors.torch.save_file", Pattern.LOAD: "safetensors.torch.load_file"}
    packages = (TORCH, SAFETENSORS)
    modules = ("torch", "safetensors.torch")
    suffix = ".safetensors"

    def errors(self) -> tuple[type[BaseException], ...]:
        """safetensors' own error type besides the usual ones."""
        from safetensors import SafetensorError

        return (*EXPECTED_ERRORS, SafetensorError)

    def save(self, staged: Any, path: Path, case: Case) -> str | None:
        """save_file (the runner fsyncs the file)."""
        from safetensors.torch import save_file

        save_file(dict(staged), str(path))
        return None

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """load_file onto the CPU, then every page touched: its tensors may be lazy views of an mmap."""
        from safetensors.torch import load_file

        tensors = load_file(str(path), device="cpu")
        touch_pages(tensors.values())
        return tensors


ENGINE = Safetensors()
