"""The probe scripts behind docs/benchmarks.md run on a small size, print every way they measure and
leave nothing behind in the directory they were given."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.needs_torch


def run(*argv: str) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_save_pipeline_measures_four_ways_and_cleans_up(disk_tmp: Path) -> None:
    out = run("benchmarks/save_pipeline.py", "--dir", str(disk_tmp), "--size", "96M", "--reps", "2")
    medians = dict(re.findall(r"^  (save|recycled|raw write|raw copy)\s+([\d.]+)", out, re.M))
    assert set(medians) == {"save", "recycled", "raw write", "raw copy"}
    assert all(float(v) > 0 for v in medians.values())
    assert re.search(r"^  raw write\s+[\d.]+\s+x1\.00$", out, re.M)
    assert list(disk_tmp.iterdir()) == []


def test_first_touch_measures_every_way(disk_tmp: Path) -> None:
    sample = disk_tmp / "sample.bin"
    sample.write_bytes(b"\x5a" * (32 << 20))
    out = run("benchmarks/first_touch.py", str(sample), "--idle", "0", "--reps", "1")
    lines = re.findall(r"^idle\s+0\.0 s  (.+?)\s+([\d.]+) GB/s$", out, re.M)
    assert [name for name, _ in lines] == ["anon 1 thread", "anon 2 threads", "page cache", "O_DIRECT"]
    assert sample.read_bytes() == b"\x5a" * (32 << 20)  # read, never written


def test_dcp_ab_compares_two_checkouts_and_cleans_up(disk_tmp: Path) -> None:
    out = run("benchmarks/dcp_ab.py", "--old", ".", "--new", ".", "--dir", str(disk_tmp), "--size", "32M",
              "--pairs", "1")  # fmt: skip
    ratios = dict(re.findall(r"^  (save|load)  old [\d.]+ .+ new/old x([\d.]+)$", out, re.M))
    assert set(ratios) == {"save", "load"} and all(float(r) > 0 for r in ratios.values())
    assert list(disk_tmp.iterdir()) == []
