"""Helpers for tests that start fio servers: free loopback ports, stopping a server's whole session."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess


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
