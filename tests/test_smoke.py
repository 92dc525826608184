"""`gdsbench smoke` (and `make gpu-smoke`) end to end on this machine, in its quick mode: every step runs or
says why not, and the folder holds what docs/gds-server.md says it holds."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gdsbench.cli import cli
from gdsbench.testbeds.smoke import Smoke, plan

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
    for name in (
        "make gpu-smoke",
        "00-summary.txt",
        "01-machine.txt",
        "03-kvikio.txt",
        "04-doctor.txt",
        "05-pytest.txt",
        "06-checkpoint",
        "07-gds-load.txt",
        "08-gds-smoke",
        "09-gdsio.txt",
    ):
        assert name in doc, name


def test_the_gpu_install_step_is_a_tool_that_installs_nothing_without_a_gpu(tmp_path):
    """tools/gpu_install.py (make gpu-smoke runs it before the smoke run): on a host without a GPU it says so
    in 02-install.log, leaves the venv alone and exits 0."""
    import subprocess
    import sys

    from gdsbench.testbeds.smoke import gpu_host

    if gpu_host():
        pytest.skip("a GPU host: the tool would install CUDA torch into this venv")
    done = subprocess.run(
        [sys.executable, "tools/gpu_install.py", str(tmp_path / "out")],
        cwd=plan.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "02-install.log").read_text() == "no GPU on this host: nothing installed\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["02-install.log"]


def tools_sweep(tmp_path: Path, **document: Any) -> Smoke:
    """A smoke run (GPU steps not asked) that has run one sweep step of `document`'s cases, fio and gdsio given as
    paths that do not exist: a host with neither."""
    smoke = Smoke(tmp_path / "out", tmp_path / "target", gpu=False, quick=True)
    smoke.out.mkdir()
    document = {
        "name": "tools",
        "directory": str(smoke.directory),
        "allow_root_filesystem": True,
        "file_size": "16M",
        "runtime": "1s",
        "repetitions": 1,
        "fio": "/nonexistent/fio",
        "gdsio": "/nonexistent/gdsio",
        **document,
    }
    plan.sweep(smoke, "08-tools", "08 tools", document, "the tools")
    return smoke


def test_a_sweep_step_whose_every_case_is_skipped_is_a_skip_that_says_what_to_install(tmp_path):
    smoke = tools_sweep(
        tmp_path,
        matrix=[
            {"engine": ["fio"], "pattern": ["read"], "transfer": ["CPU_ONLY", "GDS"]},
            {"engine": ["gdsio"], "pattern": ["read"], "transfer": ["GDS"]},
        ],
    )
    assert smoke.summary() == 0  # a host without the tools fails no step
    (outcome,) = smoke.outcomes
    assert outcome["status"] == (
        "skipped: every case skipped: fio not found (/nonexistent/fio); install it with your OS packages (apt-get "
        "install fio); fio not found (/nonexistent/fio); GDS needs a fio built with --enable-libcufile; gdsio not "
        "found at /nonexistent/gdsio (from the gdsio option)"
    )
    summary = (smoke.out / "00-summary.txt").read_text()
    assert f"proven:\n\nnot proven:\n  08 the tools: {outcome['status']}\n" in summary


def test_the_summary_says_which_cases_a_finished_sweep_skipped_and_why(tmp_path):
    smoke = tools_sweep(
        tmp_path,
        checkpoint_size="1M",
        matrix=[
            {"engine": ["torch_save"], "pattern": ["save"], "transfer": ["CPU_CACHED"]},
            {"engine": ["fio"], "pattern": ["read"], "transfer": ["CPU_ONLY"]},
        ],
    )
    assert smoke.summary() == 0 and smoke.outcomes[0]["status"] == "done"
    summary = (smoke.out / "00-summary.txt").read_text()
    assert "proven:\n  08 the tools: torch_save CPU_CACHED save measured\n" in summary
    assert summary.endswith(
        "not proven:\n  08 1 case skipped: fio not found (/nonexistent/fio); install it with your "
        "OS packages (apt-get install fio)\n"
    )
