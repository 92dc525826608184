"""Helpers for tests that start fio servers: free loopback ports, stopping a server's whole session, a silent
host (a hung server's test double), and the fixtures that start servers on unix sockets and loopback ports
and stop them in their finalisers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gdsbench.hosts import Host, HostKind, free_port
from gdsbench.serve import server_argv, wait_listening


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


class SilentHost:
    """A test double for a hung fio server: it accepts connections (TCP on 127.0.0.1, or a unix socket) and
    never answers; stopped by the test."""

    def __init__(self, kind: str, folder: Path) -> None:
        family = socket.AF_UNIX if kind == "sock" else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        if kind == "sock":
            self.listener.bind(str(folder / "silent.sock"))
            self.host = Host(HostKind.SOCK, str(folder / "silent.sock"))
        else:
            self.listener.bind(("127.0.0.1", 0))
            self.host = Host(HostKind.TCP, "127.0.0.1", self.listener.getsockname()[1])
        self.listener.listen(8)
        self.accepted: list = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stopped.is_set():
            try:
                self.accepted.append(self.listener.accept()[0])
            except OSError:
                continue

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()
        for conn in self.accepted:
            conn.close()
        self.listener.close()


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
