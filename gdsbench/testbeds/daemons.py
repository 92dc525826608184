"""The daemons a testbed starts (ceph.py, slurm.py): a free loopback port, pid files, a process's arguments and
whether it is alive, and stopping processes for sure (SIGTERM, then SIGKILL, then waiting for each to exit)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path


def read_pid(pidfile: Path) -> int | None:
    """The pid in a pid file, or None."""
    with contextlib.suppress(OSError, ValueError):
        return int(pidfile.read_text().strip())
    return None


def argv_of(pid: int) -> list[str]:
    """A process's arguments ([] when it is gone)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    return []


def owned_by_us(pid: int) -> bool:
    """The process runs as this process's effective user."""
    with contextlib.suppress(OSError):
        return os.stat(f"/proc/{pid}").st_uid == os.geteuid()
    return False


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (no init may reap the daemons for a while)."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    return False


def other_pids() -> list[int]:
    """Every process's pid but this one's."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def stop(pids: list[int], timeout: float = 20.0) -> None:
    """SIGTERM each process, SIGKILL those left after `timeout`, and wait until every one has exited."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(map(alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in filter(alive, pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    while any(map(alive, pids)):
        time.sleep(0.05)


def stop_daemons(daemons: dict[int, str], stray: Callable[[int], str | None], timeout: float = 20.0) -> list[str]:
    """Stop `daemons` (pid: name, in the order they started) one by one, last started first, then every other
    process `stray` names (one started whose pid file was not written yet); what was stopped, in words."""
    for pid in reversed(daemons):
        stop([pid], timeout)
    strays = {pid: name for pid in other_pids() if (name := stray(pid))}
    stop(list(strays), timeout)
    return [f"stopped {daemons[pid]} (pid {pid})" for pid in reversed(daemons)] + [
        f"stopped {name} (pid {pid}, no pid file)" for pid, name in strays.items()
    ]
