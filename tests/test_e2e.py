"""End to end with real fio: sweep a tiny config, then report it; figures match fio's own output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gdsbench import results
from gdsbench.report.fio_style import status_line
from tests.helpers import write_config

pytestmark = [pytest.mark.needs_fio, pytest.mark.needs_odirect]  # CPU_ONLY cases are O_DIRECT


def gdsbench(*args):
    return subprocess.run([sys.executable, "-m", "gdsbench", *map(str, args)], capture_output=True, text=True)


def test_sweep_then_report(tmp_path):
    path = write_config(
        tmp_path,
        matrix={
            "engine": ["fio"],
            "pattern": ["write", "read"],
            "io_size": ["1M"],
            "threads": [1, 2],
            "transfer": ["CPU_ONLY", "CPU_CACHED"],
        },
    )
    swept = gdsbench("sweep", path, "-o", tmp_path / "out")
    assert swept.returncode == 0, swept.stderr
    [csv_path] = (tmp_path / "out").glob("tiny-*.csv")
    frame = results.load([csv_path])
    assert len(frame) == 16 and set(frame["status"]) == {"ok"}
    assert set(frame["transfer"]) == {"CPU_ONLY", "CPU_CACHED"}
    meta = json.loads(results.sidecar_path(csv_path).read_text())
    assert meta["target"]["fstype"] and meta["tools"]["fio"].startswith("fio-") and meta["config"]["name"] == "tiny"
    assert meta["machine"]["cpu_count"] >= 1 and meta["run_id"] == frame["run_id"].iloc[0]

    reported = gdsbench("report", csv_path)
    assert reported.returncode == 0, reported.stderr
    for _, row in frame.iterrows():  # every row's numbers are fio's: the raw JSON agrees
        raw = Path(row["raw_output"]).read_text()
        jobs = json.loads(raw[raw.index("{") :])["jobs"]
        section = "write" if row["pattern"] == "write" else "read"
        assert row["bytes"] == sum(j[section]["io_bytes"] for j in jobs)
        assert row["bw_bytes"] == row["bytes"] * 1000 // max(j[section]["runtime"] for j in jobs)
    some = frame[(frame["threads"] == 2)].iloc[0].to_dict()
    assert status_line(some).startswith(("  WRITE: bw=", "   READ: bw="))
    assert "Run status, fio style" in reported.stdout and "Results: median" in reported.stdout
    markdown = gdsbench("report", csv_path, "--by", "transfer,pattern", "--format", "markdown")
    assert "| transfer | pattern | n |" in markdown.stdout
