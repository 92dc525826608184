"""benchmarks/codecs.py on a small size: every codec on every data kind, bit-exact, with the disk verdict."""

from __future__ import annotations

import json
import re
import runpy
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


def test_codec_benchmark_compares_each_codec_with_a_save_of_the_same_tensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--save: the codec alone and a DCP save with it, one line each (rates, CPU per GiB, ratios, bytes saved),
    and the save's private folder removed afterwards."""
    bench = runpy.run_path(str(ROOT / "benchmarks" / "codecs.py"), run_name="codecs_bench")
    argv = ["--size", "4M", "--chunk", "1M", "--reps", "1", "--codecs", "blosc", "--kinds", "mixed"]
    assert bench["main"]([*argv, "--save", str(tmp_path), "--save-threads", "2"]) == 0
    out = capsys.readouterr().out
    assert "save: ckptio Writer, 2 I/O threads, O_DIRECT, durable" in out
    [row] = re.findall(r"^blosc" + r"\s+([\d.]+)" * 6 + r"\s+([\d.]+)%$", out, re.M)
    # rates of 4 MiB print as 0.03 GB/s, 0.00 on a loaded machine: CPU per GiB is what must be there
    assert all(float(value) >= 0 for value in row) and float(row[1]) > 0 and float(row[3]) > 0
    assert 15 < float(row[-1]) < 40  # mixed: ~27% saved
    assert list(tmp_path.iterdir()) == []
