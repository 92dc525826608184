"""`gdsbench smoke` (and `make gpu-smoke`) end to end on this machine, in its quick mode: every step runs or
says why not, and the folder holds what docs/gds-server.md says it holds."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench.cli import cli
from gdsbench.smoke import plan

pytestmark = [pytest.mark.slow, pytest.mark.needs_fio, pytest.mark.needs_torch]
STEPS = ["01", "03", "04", "05", "06", "07", "08", "09"]


def rows(folder: Path) -> list[dict]:
    """The rows of the one results CSV in `folder`."""
    (path,) = folder.glob("*.csv")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_smoke_runs_end_to_end_and_fills_its_folder(tmp_path):
    out, directory = tmp_path / "smoke", tmp_path / "target"
    result = CliRunner().invoke(cli, ["smoke", "--gpu", "--quick", "-o", str(out), "-d", str(directory)])
    summary = json.loads((out / "summary.json").read_text())
    assert result.exit_code == 0, (out / "00-summary.txt").read_text()
    assert [s["step"][:2] for s in summary] == STEPS
    status = {s["step"][:2]: s["status"] for s in summary}
    assert {status[n] for n in ("01", "04", "06", "08")} == {"done"}
    assert "02" not in status  # installing is tools/gpu_install.py's, before the run
    cuda = status["03"] != "skipped: no CUDA device"
    if not cuda:  # this machine: the GPU steps say why they did not run
        assert status["05"] == status["07"] == "skipped: no CUDA device" and status["09"].startswith("skipped")
    assert "$ uname -a" in (out / "01-machine.txt").read_text() and "findmnt -T" in (out / "01-machine.txt").read_text()
    doctor = json.loads((out / "04-doctor.json").read_text().split("\n", 1)[1])  # after the "$ command" line
    assert "kvikio" in doctor["can_run"] and "GDS path (nvidia-fs)" in doctor["can_run"]
    checkpoint = rows(out / "06-checkpoint")
    assert {r["status"] for r in checkpoint if r["engine"] == "fastpersist"} == {"ok"}
    assert {r["threads"] for r in checkpoint if r["engine"] == "kvikio"} == {"1", "8"}
    if not cuda:
        assert {r["error"] for r in checkpoint if r["engine"] == "kvikio"} == {
            "skipped: needs CUDA: no CUDA device visible to torch"
        }
    gds_smoke = rows(out / "08-gds-smoke")
    assert {r["status"] for r in gds_smoke if r["transfer"] == "CPU_ONLY" and r["engine"] == "fio"} == {"ok"}
    for name in ("06-checkpoint-report.txt", "08-gds-smoke-report.txt", "08-gds-smoke-plan.txt", "00-summary.txt"):
        assert (out / name).stat().st_size > 0
    assert not directory.exists()  # the smoke made it, its sweeps removed their files, so it went too


def test_make_gpu_smoke_is_the_documented_command():
    makefile = (plan.ROOT / "Makefile").read_text()
    assert "gpu-smoke: install" in makefile and "tools/gpu_install.py $(SMOKE_OUT)" in makefile
    assert "gdsbench smoke --gpu -o $(SMOKE_OUT)" in makefile
    doc = (plan.ROOT / "docs" / "gds-server.md").read_text()
    for name in ("make gpu-smoke", "00-summary.txt", "01-machine.txt", "03-kvikio.txt", "04-doctor.txt", "05-pytest.txt",
                 "06-checkpoint", "07-gds-load.txt", "08-gds-smoke", "09-gdsio.txt"):  # fmt: skip
        assert name in doc, name


def test_the_gpu_install_step_is_a_tool_that_installs_nothing_without_a_gpu(tmp_path):
    """tools/gpu_install.py (make gpu-smoke runs it before the smoke run): on a host without a GPU it says so
    in 02-install.log, leaves the venv alone and exits 0."""
    import subprocess
    import sys

    from gdsbench.smoke import gpu_host

    if gpu_host():
        pytest.skip("a GPU host: the tool would install CUDA torch into this venv")
    done = subprocess.run([sys.executable, "tools/gpu_install.py", str(tmp_path / "out")], cwd=plan.ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "02-install.log").read_text() == "no GPU on this host: nothing installed\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["02-install.log"]
