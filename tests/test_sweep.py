"""The sweep with real fio: failures recorded and the sweep goes on, resume, Ctrl-C keeps rows, cleanup."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gdsbench import config, results, sweep
from gdsbench.errors import TargetError
from tests.helpers import data_rows, write_config

pytestmark = [pytest.mark.needs_fio, pytest.mark.needs_odirect]  # CPU_ONLY cases are O_DIRECT


def run_sweep(config_path: Path, csv_path: Path, done=frozenset()):
    """Run a sweep the way the CLI does; return the rows it yielded (not the fill step's progress rows)."""
    loaded = config.load(config_path)
    ctx = sweep.context(loaded, csv_path)
    writer = results.ResultWriter(csv_path, sweep.columns(loaded))
    try:
        return [row for row in sweep.run(loaded, writer, ctx, "test-run", done) if row["status"] != "fill"]
    finally:
        writer.close()


def start_sweep(config_path: Path, out: Path) -> subprocess.Popen[str]:
    """`gdsbench sweep CONFIG -o OUT` as a user starts it, in a process of its own (to be signalled)."""
    command = [sys.executable, "-m", "gdsbench", "sweep", str(config_path), "-o", str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def resume_sweep(csv_path: Path) -> subprocess.CompletedProcess[str]:
    """`gdsbench sweep --resume CSV`, run to its end."""
    command = [sys.executable, "-m", "gdsbench", "sweep", "--resume", str(csv_path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def fio_slow_to_answer_version(folder: Path, on_version: str) -> Path:
    """A wrapper around the real fio that runs the shell line `on_version` before answering --version."""
    wrapper = folder / "slow-fio"
    script = f'#!/bin/sh\nif [ "$1" = --version ]; then {on_version}; fi\nexec "{shutil.which("fio")}" "$@"\n'
    wrapper.write_text(script)
    wrapper.chmod(0o755)
    return wrapper


def test_failed_case_is_recorded_and_the_sweep_goes_on(tmp_path):
    # 1000-byte O_DIRECT I/O is refused by the kernel (EINVAL): a real fio failure.
    path = write_config(
        tmp_path, repetitions=1, matrix={"engine": ["fio"], "pattern": ["write"], "io_size": ["1000", "1M"]}
    )
    rows = run_sweep(path, tmp_path / "r.csv")
    assert [r["status"] for r in rows] == ["failed", "ok"]
    assert "Invalid argument" in rows[0]["error"] and rows[0]["command"].startswith("fio ")
    assert rows[1]["bytes"] == 16 << 20
    on_disk = data_rows(tmp_path / "r.csv")
    assert [r["status"] for r in on_disk] == ["failed", "ok"]


def test_rows_hold_fios_numbers_and_raw_output(tmp_path):
    path = write_config(tmp_path, repetitions=1)
    rows = run_sweep(path, tmp_path / "r.csv")
    for row in rows:
        raw = Path(row["raw_output"]).read_text()
        document = json.loads(raw[raw.index("{") :])
        job = document["jobs"][0]["write" if row["pattern"] == "write" else "read"]
        assert row["bytes"] == job["io_bytes"] == 16 << 20
        assert row["bw_bytes"] == job["bw_bytes"]  # one job: the group figure is the job's
        assert row["seconds"] == job["runtime"] / 1000
        assert row["busy_cpus_before"] >= 0  # the machine's load just before the run (flags.busy_machine)


def test_cleanup_removes_only_files_the_sweep_created(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    mine = target / "gdsbench.16777216.0.0"  # the name fio would use: it existed before, so it stays
    mine.write_bytes(b"x" * 4096)
    other = target / "precious.dat"
    other.write_text("keep me")
    run_sweep(
        write_config(
            tmp_path, repetitions=1, matrix={"engine": ["fio"], "pattern": ["write"], "threads": [2], "io_size": ["1M"]}
        ),
        tmp_path / "r.csv",
    )
    assert other.read_text() == "keep me" and mine.exists()
    assert not (target / "gdsbench.16777216.1.0").exists()


def test_keep_files_keeps_them(tmp_path):
    run_sweep(write_config(tmp_path, repetitions=1, keep_files=True), tmp_path / "r.csv")
    assert (tmp_path / "target" / "gdsbench.16777216.0.0").stat().st_size == 16 << 20


def test_resume_runs_only_missing_cases(tmp_path):
    path = write_config(tmp_path)
    csv_path = tmp_path / "r.csv"
    run_sweep(path, csv_path)
    lines = csv_path.read_text().splitlines()
    csv_path.write_text("\n".join(lines[:3]) + "\n")  # header + 2 finished rows: write rep 1, 2
    done = results.done_keys(csv_path)
    assert len(done) == 2
    rows = run_sweep(path, csv_path, done)
    assert [(r["pattern"], r["repetition"]) for r in rows] == [("read", 1), ("read", 2)]
    assert len(data_rows(csv_path)) == 4


def pairs_of(csv_path: Path) -> list[tuple[str, str, str]]:
    """(case, repetition, status) of every row, in file order."""
    return [(r["case"], r["repetition"], r["status"]) for r in data_rows(csv_path)]


def sweep_cli(*args) -> int:
    """The sweep command in-process; its exit status (no exception other than SystemExit)."""
    from click.testing import CliRunner

    from gdsbench.cli import cli

    result = CliRunner().invoke(cli, ["sweep", *map(str, args)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code


def test_resume_reruns_failed_pairs_and_keeps_one_row_per_pair(tmp_path):
    """A case fails for real (fio's file is a directory); --skip-failed leaves it; a plain --resume runs it
    again and replaces its failed rows, whether it fails again or, once the cause is gone, succeeds."""
    path = write_config(
        tmp_path, matrix={"engine": ["fio"], "pattern": ["write"], "io_size": ["1M"], "unlink": [False, True]}
    )
    blocker = tmp_path / "target" / "gdsbench.16777216.0.0"  # the overwrite case's file; the unlink case has its own
    blocker.mkdir(parents=True)
    assert sweep_cli(path, "-o", tmp_path / "out") == 1
    [csv_path] = (tmp_path / "out").glob("*.csv")
    first = pairs_of(csv_path)
    broken, fine = first[0][0], first[2][0]
    assert first == [(broken, "1", "failed"), (broken, "2", "failed"), (fine, "1", "ok"), (fine, "2", "ok")]
    assert "Is a directory" in data_rows(csv_path)[0]["error"]

    before = csv_path.read_bytes()
    assert sweep_cli("--resume", csv_path, "--skip-failed") == 0
    assert csv_path.read_bytes() == before, "--skip-failed counts failed pairs as done"

    assert sweep_cli("--resume", csv_path) == 1  # still broken: failed again, rows replaced, not added
    assert sorted(pairs_of(csv_path)) == sorted(first)

    blocker.rmdir()
    assert sweep_cli("--resume", csv_path) == 0
    assert pairs_of(csv_path) == [(fine, "1", "ok"), (fine, "2", "ok"), (broken, "1", "ok"), (broken, "2", "ok")]
    assert len({r["run_id"] for r in data_rows(csv_path)}) == 1
    assert not list(tmp_path.glob("out/.*.tmp")), "no temp file left beside the results"


def test_failing_warmup_records_one_failed_row_and_the_sweep_goes_on(tmp_path):
    path = write_config(tmp_path, warmup=1, matrix={"engine": ["fio"], "pattern": ["write"], "io_size": ["1000", "1M"]})
    csv_path = tmp_path / "r.csv"
    rows = run_sweep(path, csv_path)
    assert [(r["io_size"], r["repetition"], r["status"]) for r in rows] == [
        (1000, 0, "failed"),  # O_DIRECT refuses 1000-byte I/O: the warmup fails, the case's repetitions never run
        (1 << 20, 0, "warmup"),
        (1 << 20, 1, "ok"),
        (1 << 20, 2, "ok"),
    ]
    on_disk = pairs_of(csv_path)
    assert [(rep, status) for _, rep, status in on_disk] == [("0", "failed"), ("1", "ok"), ("2", "ok")]
    loaded = config.load(path)
    again = run_sweep(path, csv_path, sweep.resume(loaded, csv_path))  # the failed warmup is tried once more
    assert [(r["repetition"], r["status"]) for r in again] == [(0, "failed")]
    assert sorted(pairs_of(csv_path)) == sorted(on_disk), "still one row per (case, repetition)"


def test_interleave_runs_repetition_major(tmp_path):
    loaded = config.load(write_config(tmp_path, interleave=True, warmup=1))
    steps = [(s.case.pattern.value, s.repetition) for s in sweep.schedule(loaded)]
    assert steps == [("write", 0), ("write", 1), ("read", 0), ("read", 1), ("write", 2), ("read", 2)]


def test_skipped_case_recorded_once_with_reason(tmp_path):
    path = write_config(tmp_path, matrix={"engine": ["fio"], "pattern": ["read"], "transfer": ["GPU_BATCH", "GDS"]})
    rows = run_sweep(path, tmp_path / "r.csv")
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert rows[0]["error"] == "skipped: fio has no GPU_BATCH transfer"
    assert "libcufile" in rows[1]["error"]


@pytest.mark.parametrize("make", ["file", "readonly"])
def test_refuses_unusable_target(tmp_path, make):
    target = tmp_path / "target"
    if make == "file":
        target.write_text("not a dir")
    else:
        target.mkdir()
        target.chmod(0o500)
        if os.geteuid() == 0:
            pytest.skip("root can write anywhere")
    with pytest.raises(TargetError, match=str(target)):
        sweep.prepare_target(target)


@pytest.mark.parametrize(("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_keeps_every_finished_row(tmp_path, stop, status):
    path = write_config(
        tmp_path, runtime="1s", repetitions=6, matrix={"engine": ["fio"], "pattern": ["write"], "io_size": ["1M"]}
    )
    out = tmp_path / "out"
    proc = start_sweep(path, out)
    deadline = time.time() + 60
    while time.time() < deadline:
        csvs = list(out.glob("*.csv"))
        if csvs and len(data_rows(csvs[0])) >= 2:
            break
        time.sleep(0.2)
    proc.send_signal(stop)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status
    rows = data_rows(csvs[0])
    assert 2 <= len(rows) < 6 and all(r["status"] == "ok" for r in rows)
    assert f"kept {len(rows)} finished rows" in stderr and "--resume" in stderr
    assert "Traceback" not in stderr
    assert not list((tmp_path / "target").glob("gdsbench.*")), "test files are removed on interrupt"

    resumed = resume_sweep(csvs[0])
    assert resumed.returncode == 0, resumed.stderr
    after = data_rows(csvs[0])
    assert [int(r["repetition"]) for r in after] == list(range(1, 7)), "the rest ran once each, nothing twice"
    assert len({r["run_id"] for r in after}) == 1, "a resumed sweep keeps its run id"


def test_cleanup_removes_our_directories_only_when_empty(tmp_path):
    from gdsbench.runners.base import RunContext

    ctx = RunContext(directory=tmp_path, file_size=1)
    ours, theirs = tmp_path / "ours", tmp_path / "shared"
    ctx.resources.track_new([ours, theirs])
    ours.mkdir()
    theirs.mkdir()
    (ours / "a.bin").write_bytes(b"x")
    ctx.resources.created.append(ours / "a.bin")
    (theirs / "someone-elses.txt").write_text("keep")
    removed = ctx.resources.cleanup()
    assert removed == [ours / "a.bin", ours] and not ours.exists()
    assert (theirs / "someone-elses.txt").read_text() == "keep"


@pytest.mark.needs_torch
def test_environment_overrides_are_recorded_in_the_sidecar_and_the_rows_they_change(tmp_path, monkeypatch):
    """CKPTIO_* changes ckptio's IOOptions in the sweep and its ranks: the sidecar keeps
    every such variable, and a checkpoint row's command carries it as a shell would; fio's does not."""
    monkeypatch.setenv("CKPTIO_CHUNK_BYTES", "1048576")
    matrix = [
        {"engine": ["fio"], "pattern": ["write"], "io_size": ["1M"]},
        {"engine": ["fastpersist"], "pattern": ["save"], "transfer": ["CPU_CACHED"]},
    ]
    path = write_config(tmp_path, matrix=matrix, checkpoint_size="8M", repetitions=1)
    assert sweep_cli(path, "-o", tmp_path / "out") == 0
    [csv_path] = (tmp_path / "out").glob("*.csv")
    commands = {row["engine"]: row["command"] for row in data_rows(csv_path)}
    assert commands["fastpersist"].startswith("CKPTIO_CHUNK_BYTES=1048576 ")
    assert "GDSBENCH_IO" not in commands["fio"]
    assert results.read_sidecar(csv_path)["environment"]["CKPTIO_CHUNK_BYTES"] == "1048576"


def test_resume_cuts_a_torn_last_row_and_runs_it_again(tmp_path):
    """Power lost mid-row leaves a last line without its newline: --resume cuts it (it was merged into the
    next row before) and runs that repetition again; every row parses."""
    path = write_config(tmp_path, matrix={"engine": ["fio"], "pattern": ["write"], "io_size": ["1M"]})
    assert sweep_cli(path, "-o", tmp_path / "out") == 0
    [csv_path] = (tmp_path / "out").glob("*.csv")
    whole = csv_path.read_bytes()
    last = whole.rstrip(b"\n").rfind(b"\n") + 1
    csv_path.write_bytes(whole[: last + (len(whole) - last) // 2])  # the second row cut in its middle
    assert sweep_cli("--resume", csv_path) == 0
    rows = data_rows(csv_path)
    assert [(r["repetition"], r["status"]) for r in rows] == [("1", "ok"), ("2", "ok")]
    assert all(r["run_id"] == rows[0]["run_id"] and r["case"] for r in rows)
    assert csv_path.read_bytes().endswith(b"\n")


@pytest.mark.parametrize(("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_during_start_up_leaves_no_file_without_its_sidecar(tmp_path, stop, status):
    """The sidecar is written before the CSV, and a stop before the first case (here while the sidecar's
    facts are gathered: fio's --version answers slowly) leaves no file at all and says what to do. The fio
    named in the config is a wrapper around the real one that only slows --version down."""
    marker = tmp_path / "asked-version"
    slow_fio = fio_slow_to_answer_version(tmp_path, f': > "{marker}"; sleep 20')
    path = write_config(tmp_path, fio=str(slow_fio))
    out = tmp_path / "out"
    proc = start_sweep(path, out)
    deadline = time.time() + 60
    while not marker.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert marker.exists() and not list(out.glob("*.csv")), "no results file before its sidecar"
    proc.send_signal(stop)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == status, stderr
    assert "interrupted before the first case: no row was measured and no file is left" in stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr
    assert list(out.iterdir()) == []


def test_a_stop_once_the_csv_exists_leaves_its_sidecar_and_resume_finishes_the_run(tmp_path):
    """From the moment the CSV exists its sidecar does too, and a Ctrl-C once the run has begun leaves a run that
    `--resume CSV` (config found through the sidecar) finishes under the same run id (a stop before, while the
    CSV is being opened, removes both: the test before this one). fio's --version,
    asked for the sidecar's facts, answers slowly here: when the CSV came first, the stop landed while those
    facts were gathered and the CSV was left without its sidecar (exit 1, click's 'Aborted!')."""
    slow_fio = fio_slow_to_answer_version(tmp_path, "sleep 3")
    matrix = {"engine": ["fio"], "pattern": ["write"], "io_size": ["1M"]}
    path = write_config(tmp_path, fio=str(slow_fio), runtime="2s", matrix=matrix)
    out = tmp_path / "out"
    proc = start_sweep(path, out)
    deadline = time.time() + 60
    while not list(out.glob("*.csv")) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    [csv_path] = out.glob("*.csv")
    assert results.sidecar_path(csv_path).exists(), "the CSV appeared before its sidecar"
    said = [proc.stderr.readline()]
    while said[-1] and "repetitions ->" not in said[-1]:  # the run began: before, a stop removes both files
        said.append(proc.stderr.readline())
    proc.send_signal(signal.SIGINT)
    stderr = "".join(said) + proc.communicate(timeout=60)[1]
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr
    assert data_rows(csv_path) == [] and "continue with: gdsbench sweep --resume" in stderr and csv_path.name in stderr
    run_id = results.read_sidecar(csv_path)["run_id"]
    assert run_id and results.read_sidecar(csv_path)["config_file"] == str(path.resolve())

    resumed = resume_sweep(csv_path)
    assert resumed.returncode == 0, resumed.stderr
    rows = data_rows(csv_path)
    assert [(r["repetition"], r["status"]) for r in rows] == [("1", "ok"), ("2", "ok")]
    assert {r["run_id"] for r in rows} == {run_id} and all(float(r["bw_bytes"]) > 0 for r in rows)
