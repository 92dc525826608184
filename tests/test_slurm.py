"""The one-host Slurm for real (root, Debian's packages, real slurmctld, slurmd and munged): srun starts ranks with
Slurm's rank variables, on loopback only; a request for more than the node has is refused at once; `down`
(and an interrupted `up`) cancels the jobs and leaves no process or directory; what others planted is left alone.

The rank tests share one cluster per run (tests/slurm_cluster.py); the life-cycle tests make their own (under 1 s).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench.cli import cli
from gdsbench.testbeds import slurm
from gdsbench.testbeds.daemons import alive, argv_of, other_pids
from tests.helpers import assert_exits
from tests.slurm_cluster import slurm_installed

RANKS = 'echo "$SLURM_PROCID $SLURM_NTASKS $SLURM_LOCALID $SLURM_NODEID $SLURMD_NODENAME"'


def client_env(cluster: slurm.Cluster) -> dict[str, str]:
    """The environment for srun against `cluster` (no SLURM_* of an allocation this test may run in)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | cluster.env()


def srun(cluster: slurm.Cluster, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """srun against `cluster`: its exit status and output."""
    argv = ["srun", *args]
    return subprocess.run(argv, env=client_env(cluster), capture_output=True, text=True, timeout=timeout, check=False)


def listening(port: int) -> set[str]:
    """The local addresses (as /proc/net/tcp* write them) of the sockets listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                found.add(local.rsplit(":", 1)[0])
    return found


def test_srun_starts_two_ranks_with_slurm_rank_variables_and_listens_on_loopback_only(slurm_cluster):
    done = srun(slurm_cluster, "-n2", "sh", "-c", RANKS)
    assert done.returncode == 0, done.stderr
    node = slurm_cluster.nodename
    assert sorted(done.stdout.splitlines()) == [f"0 2 0 0 {node}", f"1 2 1 0 {node}"]
    assert [listening(port) for port in slurm_cluster.ports] == [{"0100007F"}, {"0100007F"}]  # 127.0.0.1 only


@pytest.mark.parametrize(
    ("asks", "refusal"),
    [("-N2", "Node count specification invalid"), ("-n{more}", "More processors requested than permitted")],
)
def test_more_than_the_cluster_has_is_refused_at_once_not_queued(slurm_cluster, asks, refusal):
    """EnforcePartLimits=ALL: refused at submission, even with --immediate=30 (without it, Slurm queues such a
    request: srun waits --immediate's seconds, then says "Requested nodes are busy")."""
    started = time.monotonic()
    done = srun(slurm_cluster, asks.format(more=slurm_cluster.cpus + 1), "--immediate=30", "true")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"srun: error: Unable to allocate resources: {refusal}\n"
    assert time.monotonic() - started < 5


@pytest.fixture
def scratch_dir() -> Iterator[Path]:
    """A fresh directory name under /var/tmp for a cluster of the test's own; taken down after."""
    slurm_installed()
    directory = Path(tempfile.mkdtemp(prefix="gdsbench-slurm-own-", dir="/var/tmp"))
    yield directory
    slurm.down(directory)
    if directory.exists():  # an `up` refused before it marked the directory
        directory.rmdir()


def ours_left(directory: Path) -> list[int]:
    """Processes whose arguments name something in `directory`."""
    return [pid for pid in other_pids() if alive(pid) and any(str(directory) in a for a in argv_of(pid))]


def test_up_and_down_by_the_cli_cancel_a_running_job_and_leave_no_process_or_directory(scratch_dir):
    up = CliRunner().invoke(cli, ["slurm", "up", "--dir", str(scratch_dir)])
    assert_exits(up, 0)
    assert up.stdout == f"export SLURM_CONF={scratch_dir}/slurm.conf\n"
    cluster = slurm.attach(scratch_dir)
    assert cluster and len(pids := cluster.pids()) == 3 and all(map(alive, pids))
    argv = ["srun", "-n1", "sh", "-c", "echo $$; exec sleep 60"]  # the task says its pid once it runs
    job = subprocess.Popen(argv, env=client_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert job.stdout and select.select([job.stdout], [], [], 20)[0], "the job never started"
        task = int(job.stdout.readline())
        down = CliRunner().invoke(cli, ["slurm", "down", "--dir", str(scratch_dir)])
        assert job.wait(timeout=10) != 0 and not alive(task)
    finally:
        job.kill()
        job.communicate()
    assert_exits(down, 0)
    assert down.stdout.splitlines()[0].startswith("cancelled job ")
    assert down.stdout.splitlines()[1:] == [
        f"stopped slurmd (pid {pids[2]})",
        f"stopped slurmctld (pid {pids[1]})",
        f"stopped munged (pid {pids[0]})",
        f"removed {scratch_dir}",
    ]
    assert not any(map(alive, pids)) and ours_left(scratch_dir) == [] and not scratch_dir.exists()
    again = CliRunner().invoke(cli, ["slurm", "down", "--dir", str(scratch_dir)])
    assert again.stdout == f"nothing to remove: no cluster in {scratch_dir}\n"


def test_an_interrupted_up_stops_what_it_started_and_removes_its_directory(scratch_dir, monkeypatch):
    """Ctrl-C once munged, slurmctld and slurmd run (slurmd's pid file may not be written yet): `up` undoes itself
    through `down`."""
    started: list[int] = []

    def interrupt(made: slurm.Made, timeout: float) -> None:
        started.extend(p for p in other_pids() for name in made.daemons if slurm._ours(p, made.directory, name))
        raise KeyboardInterrupt

    monkeypatch.setattr(slurm, "_wait_ready", interrupt)
    with pytest.raises(KeyboardInterrupt):
        slurm.up(scratch_dir)
    assert len(started) == 3 and not any(map(alive, started))
    assert ours_left(scratch_dir) == [] and not scratch_dir.exists()


def as_nobody(script: str, *args: str) -> None:
    """Run a shell script as the unprivileged user `nobody` (its arguments as $1...)."""
    subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", script, "sh", *args], check=True, timeout=30)


def lookalike(name: str, conf: Path) -> subprocess.Popen[bytes]:
    """A root process whose arguments are exactly `<name> -f <conf>`, as `up` starts slurmd (it is `tail -f`)."""
    return subprocess.Popen([name, "-f", str(conf)], executable="/usr/bin/tail", stdout=subprocess.DEVNULL)


@pytest.fixture
def planted_dir() -> Iterator[Path]:
    """A folder name in world-writable /var/tmp that `nobody` will make (removed after)."""
    directory = Path(tempfile.mkdtemp(prefix="gdsbench-slurm-planted-", dir="/var/tmp"))
    directory.rmdir()
    yield directory
    if os.path.lexists(directory):
        subprocess.run(["rm", "-rf", "--one-file-system", str(directory)], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root and runuser")
def test_down_refuses_a_directory_nobody_made_and_kills_nothing_its_pid_file_names(planted_dir):
    """`nobody` plants the marker, a state, a slurm.conf and a pid file naming a root process that looks exactly like
    our slurmd: nothing is stopped or removed."""
    state = json.dumps(slurm.Made(str(planted_dir), "x", 1, 1, [1, 2], ["slurmd"]).__dict__)
    plant = 'mkdir -p "$1/run" && printf x > "$1/.gdsbench-slurm" && printf %s "$2" > "$1/gdsbench-slurm.json" && '
    plant += 'printf x > "$1/slurm.conf"'
    as_nobody(plant, str(planted_dir), state)
    victim = lookalike("slurmd", planted_dir / "slurm.conf")
    try:
        as_nobody('printf %s "$2" > "$1/run/slurmd.pid"', str(planted_dir), str(victim.pid))
        run = CliRunner().invoke(cli, ["slurm", "down", "--dir", str(planted_dir)])
        assert_exits(run, 2, one_line_error=True)
        assert f"{planted_dir}: owned by nobody (uid " in run.output and "left alone" in run.output
        assert victim.poll() is None
        assert sorted(os.listdir(planted_dir)) == [".gdsbench-slurm", "gdsbench-slurm.json", "run", "slurm.conf"]
    finally:
        victim.kill()
        victim.wait()


def test_down_stops_only_what_up_starts_not_a_process_that_merely_names_the_conf():
    """Our own directory whose pid file names a root process with the conf in its arguments, but not exactly
    `slurmd -f <conf>` (one argument more, or another binary): it is not ours to stop."""
    directory = Path(tempfile.mkdtemp(prefix="gdsbench-slurm-kill-", dir="/var/tmp"))
    (directory / slurm.MARKER).write_text("x")
    (directory / "run").mkdir()
    conf = directory / "slurm.conf"
    made = slurm.Made(str(directory), "x", 1, 1, [1, 2], ["munged", "slurmd"])
    (directory / slurm.STATE).write_text(json.dumps(made.__dict__))
    conf.write_text("x")
    victims = [
        subprocess.Popen(["slurmd", "-f", str(conf), "/dev/null"], executable="/usr/bin/tail"),  # one more
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-f", str(conf)]),
    ]
    (directory / "run" / "slurmd.pid").write_text(str(victims[0].pid))
    try:
        assert slurm.down(directory) == [f"removed {directory}"]
        assert [v.poll() for v in victims] == [None, None] and not directory.exists()
    finally:
        for victim in victims:
            victim.kill()
            victim.wait()
