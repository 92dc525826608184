"""Helpers for tests that start fio servers: free loopback ports, stopping a server's whole session, and
the fixtures that start servers on unix sockets and loopback ports and stop them in their finalisers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gdsbench.hosts import Host, HostKind
from gdsbench.serve import server_argv, wait_listening


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_session(proc: subprocess.Popen) -> None:
    """Stop a server (SIGINT: it removes its socket), then SIGKILL its session: job processes it forked
    outlive it when their client went away (a job runs on to its runtime once its client is killed)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder with a short path for sockets (sun_path holds 107 bytes; pytest's tmp_path can be longer)."""
    folder = Path(tempfile.mkdtemp(prefix="gdsb-"))
    yield folder
    for path in folder.glob("s*.sock"):  # sockets of servers that were killed; fio removes its own on SIGINT
        path.unlink()
    folder.rmdir()


@pytest.fixture
def servers(short_dir: Path) -> Iterator[Callable[[str, int], list[tuple[Host, subprocess.Popen]]]]:
    """Start `count` fio servers (`sock` or `tcp`); the finaliser stops every one of them."""
    started: list[subprocess.Popen] = []

    def start(kind: str, count: int) -> list[tuple[Host, subprocess.Popen]]:
        result = []
        for _ in range(count):
            n = len(started)
            host = Host(HostKind.SOCK, str(short_dir / f"s{n}.sock"))
            if kind == "tcp":
                host = Host(HostKind.TCP, "127.0.0.1", free_port())
            proc = subprocess.Popen(
                server_argv("fio", host), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            started.append(proc)
            assert wait_listening(host, lambda p=proc: p.poll() is None), f"fio server on {host.label} did not start"
            result.append((host, proc))
        return result

    yield start
    for proc in started:
        stop_session(proc)
