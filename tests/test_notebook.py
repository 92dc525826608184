"""notebooks/analysis.ipynb runs on the results sample and shows every figure of gdsbench.report.plots."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("nbclient", reason="the notebook test's tools are not installed: pip install 'gdsbench[test]'")
import nbformat  # nbclient's own requirement
from nbclient import NotebookClient

ROOT = Path(__file__).parents[1]
NOTEBOOK = ROOT / "notebooks" / "analysis.ipynb"
SAMPLE = ROOT / "results" / "sample"


def test_notebook_reproduces_the_figures(monkeypatch) -> None:
    monkeypatch.setenv("GDSBENCH_RESULTS", str(SAMPLE / "*.csv"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # The sample has fio write/read x CPU_ONLY/CPU_CACHED rows (GDS skipped): 4 heatmaps, 2 + 2 line figures.
    expected = [f"heatmap-{p}-{t}" for p in ("read", "write") for t in ("CPU_CACHED", "CPU_ONLY")]
    expected += [f"{kind}-{p}" for kind in ("bandwidth", "latency") for p in ("read", "write")]
    assert len(images) == len(expected)
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert all(name in printed for name in expected)
    assert "rows from 1 file(s): host vm, run" in printed
    tables = [o for o in outputs if "text/html" in o.get("data", {})]
    assert tables and "bw_median" in tables[0]["data"]["text/html"]
    # the report's tables as the CLI prints them: sizes as people write them, latency in fio's unit
    [shown] = [o["data"]["text/markdown"] for o in outputs if "text/markdown" in o.get("data", {})]
    assert "### Results: median and min-max over repetitions" in shown
    assert "| 4K |" in shown and "| 16M |" in shown and "4194304" not in shown and "nan" not in shown
    assert "| lat mean | lat p99 |" in shown and "us |" in shown
