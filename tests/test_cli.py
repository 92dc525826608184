"""The command line: exit codes 0/1/2, one-line errors without tracebacks, dry runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench.cli import cli
from tests.helpers import assert_exits, write_config

ROOT = Path(__file__).parent.parent


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_bad_config_exits_2_with_file_key_and_no_traceback(tmp_path):
    path = write_config(tmp_path, matrix={"engine": ["fio"], "pattern": ["read"], "transfer": ["CPU"]})
    result = invoke("sweep", path)
    assert_exits(result, 2, one_line_error=True)
    assert result.output.startswith(f"gdsbench: error: {path}: matrix.transfer[0]: expected one of GDS")
    real = subprocess.run([sys.executable, "-m", "gdsbench", "sweep", str(path)], capture_output=True, text=True)
    assert (real.returncode, real.stdout) == (2, "")
    assert real.stderr.splitlines() == [result.output.strip()], "one line on stderr, no traceback"


def test_a_bug_is_not_taken_for_a_clean_exit(monkeypatch, tmp_path):
    """assert_exits fails on an exception escaping a command, which CliRunner would otherwise swallow."""
    monkeypatch.setattr("gdsbench.config.load", lambda path: 1 / 0)
    result = invoke("sweep", write_config(tmp_path))
    with pytest.raises(AssertionError, match="ZeroDivisionError"):
        assert_exits(result, 1)


def test_target_that_is_a_file_exits_2(tmp_path):
    (tmp_path / "target").write_text("x")
    result = invoke("sweep", write_config(tmp_path), "-o", tmp_path / "out")
    assert_exits(result, 2, one_line_error=True)
    assert "exists and is not a directory" in result.output
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.csv"))


def test_results_folder_under_a_regular_file_exits_2(tmp_path):
    (tmp_path / "a-file").write_text("x")
    result = invoke("sweep", write_config(tmp_path), "-o", tmp_path / "a-file" / "results")
    assert_exits(result, 2, one_line_error=True)
    assert "the results folder cannot be made: Not a directory" in result.output


def test_a_sweep_with_every_case_skipped_says_why_and_fails(tmp_path):
    matrix = {"engine": ["gdsio"], "pattern": ["read", "write"], "transfer": ["GDS"]}
    result = invoke(
        "sweep", write_config(tmp_path, matrix=matrix, gdsio=str(tmp_path / "no-gdsio")), "-o", tmp_path / "out"
    )
    assert_exits(result, 1)
    assert "nothing was measured" in result.output and "2 cases skipped: " in result.output


def test_dry_run_prints_each_case_and_its_command(tmp_path):
    result = invoke("sweep", write_config(tmp_path), "--dry-run")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("tiny: 2 cases x 2 repetitions")
    assert lines[1].startswith("[1] engine=fio,pattern=write,transfer=CPU_ONLY,io_size=1M")
    assert lines[2].strip().startswith("fio --name=gdsbench.16777216") and "--rw=write" in lines[2]
    assert not (tmp_path / "target").exists(), "a dry run touches nothing"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_dry_runs(path):
    result = invoke("sweep", path, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "[1] engine=" in result.output


def test_report_of_missing_file_exits_2(tmp_path):
    result = invoke("report", tmp_path / "none.csv")
    assert_exits(result, 2, one_line_error=True)
    assert "no such results file" in result.output


def test_report_of_a_csv_that_is_not_ours_exits_2(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    result = invoke("report", other)
    assert_exits(result, 2, one_line_error=True)
    assert "not a gdsbench results file" in result.output


def test_resume_without_config_or_sidecar_exits_2(tmp_path):
    csv_path = tmp_path / "r.csv"
    csv_path.write_text("run_id,case\n")
    result = invoke("sweep", "--resume", csv_path)
    assert_exits(result, 2, one_line_error=True)
    assert "no sidecar names its config" in result.output


def test_runners_lists_engines_and_options():
    result = invoke("runners")
    assert result.exit_code == 0 and "fio:" in result.output and "ioengine (default 'libaio')" in result.output


@pytest.mark.needs_fio
@pytest.mark.needs_odirect  # the failure is O_DIRECT refusing 1000-byte I/O
def test_exit_1_when_a_case_failed(tmp_path):
    path = write_config(tmp_path, repetitions=1, matrix={"engine": ["fio"], "pattern": ["write"], "io_size": ["1000"]})
    result = invoke("sweep", path, "-o", tmp_path / "out")
    assert_exits(result, 1)
    assert "rows: 0 ok, 1 failed, 0 skipped" in result.output


def test_an_explicit_gdsio_that_does_not_exist_exits_2(tmp_path):
    result = invoke("sweep", write_config(tmp_path), "--gdsio", tmp_path / "no-such-gdsio", "-o", tmp_path / "out")
    assert_exits(result, 2, one_line_error=True)
    assert "--gdsio" in result.output and "no executable file there" in result.output
