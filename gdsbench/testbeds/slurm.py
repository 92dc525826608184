"""A one-host Slurm for tests and demos: slurmctld, one slurmd (this host, every CPU) and a munged of its own, on
127.0.0.1 only, on ports free at `up` (docs/slurm.md: what it is, the commands, pitfalls).

Everything lives in one data directory, ours alone (made by `up`, or an empty one of ours: never one others made
or can write), marked as gdsbench's before anything is made in it: slurm.conf, munge's key and socket, the pid
files, logs, spool and state. What `up` makes is recorded in a journal (testbeds/journal.py) as it is made: `down`
removes only that, and a failed or interrupted `up` undoes its own steps before it re-raises. `down` cancels the
cluster's jobs, then stops only the processes `up` starts (the pid file's process, or any other, running as us with
exactly the arguments `up` gives that daemon). The host's own munged and Slurm, if any, are never used or touched.
Root only; every tool runs as an argument list.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from gdsbench import trusted
from gdsbench.errors import GdsbenchError
from gdsbench.hosts import free_port
from gdsbench.sysinfo import host
from gdsbench.testbeds.base import Testbed
from gdsbench.testbeds.daemons import alive, argv_of, owned_by_us, read_pid, stop_daemons
from gdsbench.testbeds.journal import undone_on_failure

DEFAULT_DIR = Path("/var/tmp/gdsbench-slurm")
STATE, MARKER, CONF = "gdsbench-slurm.json", ".gdsbench-slurm", "slurm.conf"
PACKAGES = ("slurmd", "slurmctld", "slurm-client", "munge")
BINARIES = ("slurmctld", "slurmd", "munged", "srun", "sbatch", "sinfo", "squeue", "scancel")
#: The daemons in the order `up` starts them (`down` stops them in reverse).
DAEMONS = ("munged", "slurmctld", "slurmd")
PARTITION, START_TIMEOUT, READY_TIMEOUT, CANCEL_TIMEOUT = "gdsbench", 10.0, 30.0, 10.0
#: The longest unix socket path of ours: slurmstepd's, <directory>/spool/<node>_<job>.<step> (at most 107 bytes).
STEP_SOCKET = "/spool/{node}_4294967295.4294967295"


class SlurmError(GdsbenchError):
    """The cluster cannot be installed, brought up or taken down: says why and what to do."""

    exit_code = 2


BED = Testbed("slurm", SlurmError, PACKAGES, BINARIES, "`make slurm-deps` installs Debian's Slurm and munge packages")
#: Install the Debian packages when a binary is missing (root); True when it installed them.
install = BED.install


@dataclass
class Made:
    """What `up` created, recorded as each thing exists (the state file)."""

    directory: str
    nodename: str
    cpus: int
    memory_mib: int
    ports: list[int]
    daemons: list[str] = field(default_factory=list)
    complete: bool = False
    steps: list[str] = field(default_factory=list)

    @property
    def conf(self) -> str:
        """The cluster's slurm.conf."""
        return f"{self.directory}/{CONF}"


@dataclass
class Cluster:
    """A cluster that is up: where it lives and how a client (srun, sbatch, sinfo) reaches it."""

    directory: Path
    conf: Path
    nodename: str
    cpus: int
    memory_mib: int
    ports: list[int]  # slurmctld's, slurmd's (127.0.0.1)
    pidfiles: list[Path]
    partition: str = PARTITION

    def env(self) -> dict[str, str]:
        """What a client's environment needs: SLURM_CONF (drop any SLURM_* inherited from another allocation)."""
        return {"SLURM_CONF": str(self.conf)}

    def pids(self) -> list[int]:
        """The pids in the daemons' pid files (those that exist)."""
        return [pid for pid in map(read_pid, self.pidfiles) if pid]


def up(directory: Path = DEFAULT_DIR, *, timeout: float = READY_TIMEOUT) -> Cluster:
    """Bring a cluster up in `directory` and wait (`timeout` s) for its node to run a task; undone on failure."""
    directory = trusted.safe_path(Path(directory))
    check_can_make(directory)
    made = Made(str(directory), _nodename(), _cpus(), _memory_mib(), _free_ports(2))
    with undone_on_failure(lambda: down(directory)):
        BED.data_dir(directory).make()
        directory.chmod(0o755)  # an empty one of ours given (mkdtemp's 0700): munged's socket needs its x bit
        BED.journal(directory).record(made, "directory")
        _write_files(made)
        for name in DAEMONS:
            _start(made, name)
        _wait_ready(made, timeout)
        made.complete = True
        BED.journal(directory).record(made, "complete")
    return _cluster(made)


def check_can_make(directory: Path) -> None:
    """Refuse, in one line, what cannot work: not root, a directory others made or in use, a path too long."""
    if os.geteuid() != 0:
        raise SlurmError("needs root (slurmd runs jobs as their users, munged): run it as root, or with sudo")
    directory = trusted.safe_path(directory)
    BED.data_dir(directory).check_can_make()
    if len(longest := str(directory) + STEP_SOCKET.format(node=_nodename())) > 107:
        raise SlurmError(f"{directory}: too long for the unix sockets under it ({longest}: at most 107 characters)")


def _nodename() -> str:
    """This host's short name, as slurmd finds its node by (`hostname -s`)."""
    return socket.gethostname().split(".")[0]


def _cpus() -> int:
    """The CPUs this process may run on (`nproc`)."""
    return len(os.sched_getaffinity(0))


def _memory_mib() -> int:
    """95 % of MemTotal, in MiB: what the node offers jobs."""
    return (host.meminfo("MemTotal") or 0) // (1 << 20) * 95 // 100


def _free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now (never Slurm's 6817/6818: a real Slurm may use them)."""
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


def _write_new(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    """A new file (never one there already, nor through a link) holding `text`."""
    data = text.encode() if isinstance(text, str) else text
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode), "wb") as out:
        out.write(data)


def _write_files(made: Made) -> None:
    """The folders, munge's key (random, 0600, in a 0700 folder) and slurm.conf."""
    d = Path(made.directory)
    for sub, mode in (("run", 0o755), ("log", 0o755), ("spool", 0o755), ("state", 0o700), ("munge", 0o700)):
        (d / sub).mkdir(mode)
    _write_new(d / "munge" / "munge.key", os.urandom(1024), 0o600)
    _write_new(Path(made.conf), _conf_text(made))


def _conf_text(made: Made) -> str:
    """slurm.conf: loopback only, munge through our own socket, every file under the directory, one node."""
    d, (ctld_port, slurmd_port) = made.directory, made.ports
    settings = {
        "ClusterName": "gdsbench",
        "SlurmctldHost": f"{made.nodename}(127.0.0.1)",
        "SlurmctldPort": ctld_port,
        "SlurmdPort": slurmd_port,
        "CommunicationParameters": "NoCtldInAddrAny,NoInAddrAny",  # bind the node's address, not 0.0.0.0
        "AuthType": "auth/munge",
        "CredType": "cred/munge",
        "AuthInfo": f"socket={d}/run/munge.socket",
        "SlurmUser": "root",
        "ProctrackType": "proctrack/linuxproc",  # no cgroup set-up
        "TaskPlugin": "task/none",
        "MpiDefault": "none",
        "ReturnToService": 2,  # the node comes back by itself once slurmd registers
        "SlurmdParameters": "config_overrides",  # the node is what this file says, never drained for a mismatch
        "EnforcePartLimits": "ALL",  # more nodes or CPUs than the partition has: refused at once, never queued
        "SchedulerType": "sched/builtin",
        "SelectType": "select/cons_tres",
        "SelectTypeParameters": "CR_Core",
        "SlurmctldPidFile": f"{d}/run/slurmctld.pid",
        "SlurmdPidFile": f"{d}/run/slurmd.pid",
        "SlurmctldLogFile": f"{d}/log/slurmctld.log",
        "SlurmdLogFile": f"{d}/log/slurmd.log",
        "SlurmdSpoolDir": f"{d}/spool",
        "StateSaveLocation": f"{d}/state",
    }
    node = f"NodeName={made.nodename} NodeAddr=127.0.0.1 CPUs={made.cpus} RealMemory={made.memory_mib} State=UNKNOWN"
    partition = f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
    return "".join(f"{key}={value}\n" for key, value in settings.items()) + f"{node}\n{partition}\n"


def _daemon_args(directory: str, name: str) -> list[str]:
    """The arguments `up` gives daemon `name` (after its binary): how `down` knows a process is ours."""
    if name == "munged":  # its own socket, key, log, pid and seed: the host's munged is never used or touched
        return [
            f"--socket={directory}/run/munge.socket",
            f"--key-file={directory}/munge/munge.key",
            f"--log-file={directory}/log/munged.log",
            f"--pid-file={directory}/run/munged.pid",
            f"--seed-file={directory}/munge/munged.seed",
        ]
    return ["-f", f"{directory}/{CONF}"]


def _pidfile(directory: str, name: str) -> Path:
    """Where daemon `name` writes its pid."""
    return Path(directory, "run", f"{name}.pid")


def _start(made: Made, name: str) -> None:
    """Start a daemon, recorded before it starts; it forks, then writes its pid file: wait for that (or fail)."""
    binary = shutil.which(name)
    if binary is None:
        raise SlurmError(f"{name} not found: `make slurm-deps` installs Debian's Slurm and munge packages")
    made.daemons.append(name)
    BED.journal(made.directory).record(made, name)
    out = Path(made.directory, "log", f"{name}.out")
    with out.open("ab") as log:
        argv = [binary, *_daemon_args(made.directory, name)]
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=_env(made.conf), timeout=60)
    if done.returncode != 0:
        raise SlurmError(f"{name} did not start (exit {done.returncode}): {_said(out)}")
    deadline = time.monotonic() + START_TIMEOUT  # its pid file names it once it has forked (twice, for some)
    while not ((pid := read_pid(_pidfile(made.directory, name))) and _ours(pid, made.directory, name)):
        if time.monotonic() > deadline:
            raise SlurmError(f"{name} wrote no pid file of its own in {START_TIMEOUT:.0f} s: {_said(out)}")
        time.sleep(0.01)


def _wait_ready(made: Made, timeout: float) -> None:
    """Wait until the node is idle, then run one task through srun; else fail naming the state and the logs."""
    deadline, state = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        if dead := [n for n in made.daemons if (pid := read_pid(_pidfile(made.directory, n))) and not alive(pid)]:
            raise SlurmError(f"{', '.join(dead)} exited after it started: {_logs(made)}")
        state = _run(["sinfo", "-h", "-N", "-o", "%T"], env=_env(made.conf), timeout=10, check=False).strip()
        if state == "idle":
            _run(["srun", "-n1", "true"], env=_env(made.conf), timeout=timeout)
            return
        time.sleep(0.1)
    raise SlurmError(
        f"node {made.nodename} not idle after {timeout:.0f} s (sinfo: {state or 'nothing'}): {_logs(made)}"
    )


def _logs(made: Made) -> str:
    """The last lines of slurmctld's and slurmd's logs."""
    return " ".join(_tail(Path(made.directory, "log", f"{name}.log")) for name in ("slurmctld", "slurmd"))


def _said(out: Path) -> str:
    """What a daemon said when it started (log/<name>.out) and in its log (log/<name>.log)."""
    return f"{_tail(out)} {_tail(out.with_suffix('.log'))}".strip()


def _tail(log: Path, lines: int = 4) -> str:
    """`log/<name>: <its last lines>` on one line ('' when it is empty or missing)."""
    try:
        text = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return f"[{log.parent.name}/{log.name}: {' | '.join(text)}]" if text else ""


def _env(conf: str) -> dict[str, str]:
    """A Slurm tool's environment: ours, without SLURM_* from an allocation we may run in, with SLURM_CONF."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"SLURM_CONF": conf}


def _cluster(made: Made) -> Cluster:
    """The client's view of what was made."""
    pidfiles = [_pidfile(made.directory, name) for name in made.daemons]
    d = Path(made.directory)
    return Cluster(d, d / CONF, made.nodename, made.cpus, made.memory_mib, list(made.ports), pidfiles)


def attach(directory: Path = DEFAULT_DIR) -> Cluster | None:
    """The cluster `up` finished in `directory`, or None (none there, or one whose `up` did not finish)."""
    made = BED.attach(directory, _load_state)
    return _cluster(made) if made else None


def _load_state(directory: Path) -> Made:
    """The state `up` wrote in a trusted `directory`: ours, of the expected form, naming only our daemons."""
    state = BED.journal(directory)
    made = state.read(Made)
    wrong = [made.directory] if made.directory != str(directory) else []
    wrong += [name for name in made.daemons if name not in DAEMONS]
    if wrong or len(made.ports) != 2:
        what = ", ".join(wrong) or f"ports {made.ports}"
        raise SlurmError(f"{state.path}: names {what}, not what `up` makes in {directory}: left alone")
    return made


def down(directory: Path = DEFAULT_DIR) -> list[str]:
    """Undo what the state file says `up` made: cancel the jobs, stop the daemons, remove the directory."""
    if (folder := BED.data_dir(Path(directory).absolute()).ours()) is None:
        return []
    directory = folder
    made = _load_state(directory) if BED.journal(directory).exists() else Made(str(directory), "", 0, 0, [])
    removed = _cancel_jobs(made) + _stop_daemons(made)
    shutil.rmtree(directory)
    return [*removed, f"removed {directory}"]


def _ours(pid: int, directory: str, name: str) -> bool:
    """Process `pid` is daemon `name` as `up` starts it in `directory`: run by us, with exactly those arguments."""
    argv = argv_of(pid)[:-1]  # /proc's cmdline ends with a NUL
    return owned_by_us(pid) and bool(argv) and Path(argv[0]).name == name and argv[1:] == _daemon_args(directory, name)


def _cancel_jobs(made: Made) -> list[str]:
    """Cancel every job of the cluster (their steps outlive slurmd) and wait for them to end (10 s at most)."""
    ctld = read_pid(_pidfile(made.directory, "slurmctld"))
    if not (ctld and _ours(ctld, made.directory, "slurmctld")):
        return []
    trusted.read_text(Path(made.conf))  # the conf `up` wrote, not one planted
    env, deadline = _env(made.conf), time.monotonic() + CANCEL_TIMEOUT
    jobs = _run(["squeue", "-h", "-o", "%A"], env=env, timeout=10, check=False).split()
    if not jobs or not all(job.isdigit() for job in jobs):
        return []
    _run(["scancel", *jobs], env=env, timeout=10, check=False)
    while _run(["squeue", "-h", "-o", "%A"], env=env, timeout=10, check=False).split() and time.monotonic() < deadline:
        time.sleep(0.1)
    return [f"cancelled job{'s' * (len(jobs) > 1)} {', '.join(jobs)}"]


def _stop_daemons(made: Made) -> list[str]:
    """Stop the pid files' daemons one by one, last started first, then any process left with our arguments."""
    d = made.directory
    daemons = {pid: name for name in made.daemons if (pid := read_pid(_pidfile(d, name))) and _ours(pid, d, name)}
    return stop_daemons(daemons, lambda pid: next((name for name in DAEMONS if _ours(pid, d, name)), None))


def _run(argv: list[str], timeout: float = 60, env: dict[str, str] | None = None, check: bool = True) -> str:
    """BED.run with this cluster's default timeout."""
    return BED.run(argv, timeout, env, check)
