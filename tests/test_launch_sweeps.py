"""One checkpoint sweep under each of the cluster's launchers, for real on this host: torchrun with two "nodes"
meeting at a rendezvous on 127.0.0.1, Open MPI's mpirun with two ranks, Slurm's srun on the test suite's one-host
Slurm. The same config gives the same rows, and report, compare and qualify read them as on one host; a rank
that dies and a node that never joins end as failed rows within the case's timeout."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from gdsbench.cli import cli
from gdsbench.config import load as load_config
from gdsbench.launchers import free_port
from tests.helpers import HANG_S, data_rows

pytestmark = [pytest.mark.needs_torch, pytest.mark.slow, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]
#: The MLPerf Storage geometry shrunk to a few MiB: every rank its own tensors, so the rules' per-rank metrics.
MATRIX = {
    "engine": ["dcp_fast"],
    "pattern": ["save", "load"],
    "world_size": [2],
    "workload": ["mlperf-llama3-8b"],
    "scale": ["1/8192"],
    "checkpoints": [2],
    "threads": [2],
}
#: A few MiB per checkpoint, beside the rest of the suite: the rows are tested for what they carry, not for speed.
ALLOWED = ["too_short", "busy_machine", "unstable"]
SAVE = {**MATRIX, "pattern": ["save"]}
CHECKS = [
    {"where": {"pattern": "save"}, "min_rank_bw": "1MiB/s", "allow_flags": ALLOWED},
    {"where": {"pattern": "save"}, "max_rank_time": "60s", "allow_flags": ALLOWED},
]


def launch_config(folder: Path, launcher: Any, matrix: dict[str, list[Any]] = MATRIX, **more: Any) -> Path:
    """A sweep of `matrix` on ranks started by `launcher`, in `folder`."""
    document = {
        "name": "launched",
        "directory": str(folder / "target"),
        "allow_root_filesystem": True,
        "repetitions": 1,
        "timeout": "120s",
        "launcher": launcher,
        "matrix": matrix,
        "checks": CHECKS,
        **more,
    }
    path = folder / "launched.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def gdsbench(*args: str, env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """A gdsbench command as a user runs it."""
    command = [sys.executable, "-m", "gdsbench", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)


def only_csv(out: Path) -> Path:
    [csv_path] = out.glob("*.csv")
    return csv_path


def check_rows(csv_path: Path, launcher: str, nodes: int, patterns: tuple[str, ...]) -> list[dict[str, str]]:
    """The sweep's rows: one per case, ok, the launcher and its nodes recorded, the rules' per-rank metrics."""
    rows = data_rows(csv_path)
    assert [(r["pattern"], r["status"]) for r in rows] == [(p, "ok") for p in patterns], rows
    for row in rows:
        assert (row["launcher"], row["nodes"]) == (launcher, str(nodes))
        assert float(row["min_rank_bw_bytes"]) > 0 and float(row["max_rank_seconds"]) > 0
        assert float(row["slowest_node_seconds"]) > 0 and row["slowest_node"].split(" ")[0] in {"0", "1"}
    assert ("per node: node 0" in rows[0]["note"]) == (nodes > 1)
    return rows


def in_process(*args: str) -> Result:
    """A gdsbench command run in this process (report, compare, qualify of files: no start-up to pay)."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_torchrun_on_two_nodes_reads_back_across_nodes_and_report_compare_qualify_read_its_rows(tmp_path):
    """Two torchrun "nodes" of one rank each: the MLPerf geometry's load reads what the other node wrote (DLIO's
    recovery_rank_shift); the rows' case keys are the local launcher's; report, compare and qualify read them."""
    config = launch_config(tmp_path, {"name": "torchrun", "nodes": 2})
    done = gdsbench("sweep", str(config), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-3000:]
    csv_path = only_csv(tmp_path / "out")
    rows = check_rows(csv_path, "torchrun", 2, ("save", "load"))
    assert "read back across nodes: rank 0 <- 1, rank 1 <- 0" in rows[1]["note"]
    assert [r["case"] for r in rows] == [case.key for case in load_config(config).cases]  # the local launcher's too
    judged = in_process("qualify", str(config), "--results", str(csv_path), "--format", "json")
    outcomes = json.loads(judged.stdout)
    assert judged.exit_code == 0 and [o["status"] for o in outcomes["checks"]] == ["pass", "pass"], outcomes
    report = in_process("report", str(csv_path))
    assert report.exit_code == 0 and "MLPerf" in report.stdout, report.stdout
    table = report.stdout[report.stdout.index("Ranks across nodes") :].splitlines()
    assert any(
        line.split()[:6] == ["dcp_fast", "save", "1", "torchrun", "2", rows[0]["slowest_node"].split()[0]]
        for line in table
    ), table
    allowed = ",".join(ALLOWED)  # the rows are judged for what they carry (a tiny checkpoint beside the suite)
    assert in_process("compare", str(csv_path), str(csv_path), "--allow-flags", allowed).exit_code == 0
    assert not [p for p in (tmp_path / "target").rglob("*") if p.is_file()], "the sweep removes what it wrote"


def test_mpirun_gives_the_same_rows(tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (make test installs Open MPI)")
    config = launch_config(tmp_path, "mpirun", matrix=SAVE)  # a load places its ranks alike (the torchrun test's)
    done = gdsbench("sweep", str(config), "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-3000:]
    check_rows(only_csv(tmp_path / "out"), "mpirun", 1, ("save",))


def test_srun_on_the_one_host_slurm_gives_the_same_rows(tmp_path, slurm_cluster):
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}, **slurm_cluster.env()}
    config = launch_config(tmp_path, "srun", matrix=SAVE)
    done = gdsbench("sweep", str(config), "-o", str(tmp_path / "out"), env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    check_rows(only_csv(tmp_path / "out"), "srun", 1, ("save",))
    too_many = launch_config(tmp_path, {"name": "srun", "nodes": 2}, matrix=SAVE)
    started = time.monotonic()
    done = gdsbench("sweep", str(too_many), "-o", str(tmp_path / "refused"), env=env)
    [row] = data_rows(only_csv(tmp_path / "refused"))
    assert done.returncode == 1 and row["status"] == "failed", row
    said = "dcp_fast: srun: error: Unable to allocate resources: Node count specification invalid"
    assert row["error"].startswith(said) and "(the launcher's output: " in row["error"], row["error"]
    assert Path(row["error"].split("(the launcher's output: ")[1].rstrip(")")).is_file()
    assert time.monotonic() - started < 100, "a refused allocation is a failed row, not a wait"


def rank_pids(marker: str) -> dict[int, int]:
    """The rank programs (by rank) whose command line holds `marker`: their pids."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = dict(v.split(b"=", 1) for v in (proc / "environ").read_bytes().split(b"\0") if b"=" in v)
        except OSError:
            continue
        if b"gdsbench.cli_rank" in cmdline and any(marker.encode() in part for part in cmdline):
            rank = environ.get(b"OMPI_COMM_WORLD_RANK")
            if rank is not None:
                found[int(rank)] = int(proc.name)
    return found


def test_a_rank_killed_mid_case_is_a_failed_row_and_the_sweep_goes_on(tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun is not installed (make test installs Open MPI)")
    train = {
        "engine": ["dcp_fast"],
        "pattern": ["train"],
        "world_size": [2],
        "checkpoint_size": ["8M"],
        "steps": [400],
        "interval": [100],
        "step_time": ["50ms"],
    }
    config = launch_config(tmp_path, "mpirun", matrix=train, timeout="90s", checks=[])
    started = time.monotonic()
    sweep = subprocess.Popen(
        [sys.executable, "-m", "gdsbench", "sweep", str(config), "-o", str(tmp_path / "out")],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while len(ranks := rank_pids(str(tmp_path))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(3)  # both ranks in the loop
    os.kill(ranks[1], signal.SIGKILL)
    _, stderr = sweep.communicate(timeout=120)
    [row] = data_rows(only_csv(tmp_path / "out"))
    assert sweep.returncode == 1 and row["status"] == "failed", stderr
    assert "dcp_fast: " in row["error"] and "rank 1" in row["error"], row["error"]
    assert time.monotonic() - started < 90, "ended within the case's timeout"
    assert not rank_pids(str(tmp_path))


def test_a_node_that_never_joins_ends_the_rank_waiting_for_it_within_its_join_timeout(tmp_path):
    """Rank 0 of 2 alone (its peer's node never came up): it waits --join-timeout, then fails, naming the wait."""
    env = {
        **os.environ,
        "OMPI_COMM_WORLD_RANK": "0",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "0",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "1",
    }
    case = "engine=dcp_fast,pattern=save,world_size=2,checkpoint_size=1M"
    argv = [
        sys.executable,
        "-m",
        "gdsbench.cli_rank",
        "--case",
        case,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--out",
        str(tmp_path / "out"),
        "--rendezvous",
        f"127.0.0.1:{free_port()}",
        "--join-timeout",
        "3",
    ]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S, cwd=ROOT, env=env)
    assert done.returncode != 0 and time.monotonic() - started < 30
    assert done.stderr.startswith("gdsbench.cli_rank: rank 0 of 2: joining at 127.0.0.1:"), done.stderr[-2000:]
    assert "1/2 clients joined" in done.stderr and "Traceback" not in done.stderr
