"""benchmarks/codecs.py on a small size: every codec on every data kind, bit-exact, with the disk verdict."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent.parent
pytestmark = pytest.mark.needs_torch

KINDS = ["bf16", "fp32", "exp_avg", "exp_avg_sq", "mixed", "train"]


def test_codec_benchmark_reports_every_codec_and_kind(tmp_path: Path) -> None:
    out_json = tmp_path / "rows.json"
    argv = ["benchmarks/codecs.py", "--size", "8M", "--chunk", "1M", "--reps", "1", "--codecs", "none,zstd,blosc"]
    argv += ["--disk-bw", "1G", "--json", str(out_json)]
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    rows = re.findall(
        r"^(none|zstd|blosc)\s+(\w+)\s+([-\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+(yes|NO)\s+(yes|no) x",
        done.stdout,
        re.M,
    )
    assert sorted({(name, kind) for name, kind, *_ in rows}) == sorted(
        (name, kind) for name in ("none", "zstd", "blosc") for kind in KINDS
    )
    assert all(exact == "yes" and float(comp) > 0 and float(dec) > 0 for *_, comp, dec, exact, _ in rows)
    saved = {(name, kind): float(pct) for name, kind, pct, *_ in rows}
    assert saved[("none", "bf16")] == 0.0
    assert saved[("blosc", "bf16")] > saved[("zstd", "bf16")] > 15
    assert re.search(r"^mixed: \d+ tensors, [\d.]+ MiB \(bfloat16 \d+%, float32 \d+%\)$", done.stdout, re.M)
    assert len(json.loads(out_json.read_text())) == 3 * len(KINDS)
