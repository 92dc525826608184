"""Capability markers from real probes: a test that needs what this machine lacks is skipped with why."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from gdsbench import sysinfo
from gdsbench.sysinfo import gpu

DATA = Path(__file__).parent / "data"
#: The fio-server fixtures (servers, short_dir) for every test module.
pytest_plugins = ["tests.fio_servers"]


def _odirect_reason() -> str | None:
    """None when O_DIRECT works in the temp directory, else why not."""
    works, why = sysinfo.odirect_works(Path(tempfile.gettempdir()))
    return None if works else why


def _cuda_reason() -> str | None:
    """None when a CUDA device is usable from torch, else why not."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    return None if torch.cuda.is_available() else "no CUDA device"


PROBES = {
    "needs_fio": lambda: None if shutil.which("fio") else "fio is not installed (apt-get install fio)",
    "needs_root": lambda: None if os.geteuid() == 0 else "needs root",
    "needs_odirect": _odirect_reason,
    "needs_torch": lambda: None if importlib.util.find_spec("torch") else "torch is not installed",
    "needs_cuda": _cuda_reason,
    "needs_gdsio": lambda: None if gpu.find_gdsio(None)[0] else "NVIDIA gdsio is not installed",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip each test whose capability marker's probe says this machine cannot run it."""
    reasons: dict[str, str | None] = {}
    for item in items:
        for name, probe in PROBES.items():
            if item.get_closest_marker(name) is None:
                continue
            if name not in reasons:
                reasons[name] = probe()
            if reasons[name]:
                item.add_marker(pytest.mark.skip(reason=f"{name}: {reasons[name]}"))


@pytest.fixture(autouse=True)
def _wide_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text output at the width a file or pipe gets (xdist's workers set COLUMNS=80); a test of another width
    sets COLUMNS itself."""
    monkeypatch.setenv("COLUMNS", "160")


@pytest.fixture
def disk_tmp(tmp_path: Path) -> Path:
    """A temporary directory on a real disk filesystem that takes O_DIRECT (tmp_path is on the root ext4
    here); the test is skipped, saying why, where O_DIRECT is refused (tmpfs on older kernels, overlayfs)."""
    works, why = sysinfo.odirect_works(tmp_path)
    if not works:
        pytest.skip(f"needs O_DIRECT in {tmp_path}: {why}")
    return tmp_path
