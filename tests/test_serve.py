"""`gdsbench serve`: one chosen address or a private socket, never all interfaces unless asked; live runs."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench.cases import Pattern
from gdsbench.cli import cli
from gdsbench.errors import UsageError
from gdsbench.hosts import Host, HostKind
from gdsbench.runners.fio_client import run_clients
from gdsbench.runners.fio_jobfile import host_jobs
from gdsbench.serve import listen_host, listening, private_socket, server_argv, wait_listening
from tests.fio_servers import free_port
from tests.helpers import HANG_S, assert_exits


@pytest.mark.parametrize(
    "listen",
    [
        "0.0.0.0:8765",
        ":8765",
        ",8765",
        "*",
        "",
        "::",
        "[::]:9000",
        "ip6:::,9000",
        "0:8765",
        "0.0.0.0,1",
        "[::ffff:0.0.0.0]:8765",
        "[::ffff:0:0]:8765",
        "ip6:::ffff:0.0.0.0,8765",
    ],
)
def test_all_interfaces_are_refused_by_default(listen):
    with pytest.raises(UsageError, match="binds every interface"):
        listen_host(listen, allow_all=False)


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("[::%lo]", "binds every interface"),
        ("xn--a", "'xn--a' does not resolve"),
        ("nosuch.invalid:9000", "does not resolve"),
        ("[fe80::1%nosuchif]", "does not resolve"),
        ("a" * 64, "labels 1 to 63"),
        ("a..b", "labels 1 to 63"),
        ("a." * 127 + "a", "at most 253 characters"),
    ],
)
def test_an_address_that_cannot_be_bound_is_one_error_line(listen, expected):
    result = CliRunner().invoke(cli, ["serve", "--listen", listen])
    assert_exits(result, 2, one_line_error=True)
    assert expected in result.output


def test_all_interfaces_only_when_asked_and_with_a_warning():
    host, warning = listen_host(":9000", allow_all=True)
    assert (host.address, host.port) == ("0.0.0.0", 9000)
    assert warning and "anyone who reaches it can run any job" in warning
    assert listen_host("[::]", allow_all=True)[0] == Host(HostKind.TCP6, "::", 8765)


def test_one_address_or_socket():
    assert listen_host("127.0.0.1:8766", allow_all=False) == (Host(HostKind.TCP, "127.0.0.1", 8766), None)
    host, warning = listen_host("sock:/tmp/fio.sock", allow_all=False)
    assert host == Host(HostKind.SOCK, "/tmp/fio.sock")
    assert warning and "open to other users" in warning  # /tmp is world-enterable; fio's socket is 0777
    with pytest.raises(UsageError, match="--listen: expected a port number"):
        listen_host("127.0.0.1:0", allow_all=False)


def test_private_socket_folder_is_this_users_only():
    host = private_socket()
    folder = Path(host.address).parent
    try:
        assert host.kind is HostKind.SOCK and folder.stat().st_mode & 0o777 == 0o700
        assert listen_host(host.spec, allow_all=False)[1] is None
    finally:
        folder.rmdir()


def test_server_argv():
    host = Host(HostKind.TCP, "127.0.0.1", 8766)
    assert server_argv("fio", host) == ["fio", "--server=ip:127.0.0.1,8766"]
    assert server_argv("fio", host, Path("/run/fio.pid")) == [
        "fio",
        "--server=ip:127.0.0.1,8766",
        "--daemonize=/run/fio.pid",
    ]


def gdsbench(*args: str, tmpdir: Path | None = None) -> subprocess.Popen:
    """`python -m gdsbench ARGS` in the background, stderr captured (TMPDIR set when given)."""
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir else None
    return subprocess.Popen([sys.executable, "-m", "gdsbench", *args], stderr=subprocess.PIPE, text=True, env=env)


def ends(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    """Send `sig`, wait for the exit; (status, stderr)."""
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=15)
    return proc.returncode, stderr


def one_case(host: Host, tmp_path: Path) -> bool:
    """Run a 4 MiB write through the server; True when it reported."""
    (tmp_path / "data").mkdir(exist_ok=True)
    options = [("name", "serve"), ("directory", str(tmp_path / "data")), ("size", "4M"), ("rw", "write")]
    run = run_clients("fio", host_jobs([host], options), Pattern.WRITE, tmp_path / "jobs", timeout=60)
    return run.results[0].ok


@pytest.mark.needs_fio
def test_serve_on_a_socket_runs_cases_and_stops_on_ctrl_c(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="gdsb-"))
    host = Host(HostKind.SOCK, str(folder / "fio.sock"))
    proc = gdsbench("serve", "--listen", host.spec)
    try:
        assert wait_listening(host, lambda: proc.poll() is None)
        assert one_case(host, tmp_path)
        status, stderr = ends(proc, signal.SIGINT)
        assert status == 130 and f"listening on {host.label}" in stderr
        assert not Path(host.address).exists()  # fio removed its socket on SIGINT
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        folder.rmdir()


@pytest.mark.needs_fio
def test_serve_default_is_a_private_socket_removed_after():
    tmpdir = Path(tempfile.mkdtemp(prefix="gdsb-"))
    proc = gdsbench("serve", tmpdir=tmpdir)
    try:
        deadline = time.monotonic() + 10
        while not list(tmpdir.glob("gdsbench-fio-*/fio.sock")) and time.monotonic() < deadline:
            time.sleep(0.05)
        folder = next(tmpdir.glob("gdsbench-fio-*"))
        assert folder.stat().st_mode & 0o777 == 0o700
        status, stderr = ends(proc, signal.SIGTERM)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        tmpdir.rmdir()  # fails if serve left its private folder behind
    assert status == 143 and f"hosts: ['sock:{folder}/fio.sock']" in stderr


@pytest.mark.needs_fio
def test_serve_daemonized_on_loopback(tmp_path):
    host = Host(HostKind.TCP, "127.0.0.1", free_port())
    pidfile = tmp_path / "fio.pid"
    done = subprocess.run(
        [sys.executable, "-m", "gdsbench", "serve", "--listen", host.label, "--daemonize", str(pidfile)],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    pid = int(pidfile.read_text())
    try:
        assert done.returncode == 0, done.stderr
        assert f"kill -INT {pid}" in done.stderr and listening(host)
        assert one_case(host, tmp_path)
    finally:
        for _ in range(10):  # as the message says: repeat SIGINT until it is gone
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
            time.sleep(0.5)
            if not listening(host):
                break
    assert not listening(host)


@pytest.mark.needs_fio
def test_serve_refuses_a_socket_path_that_exists(tmp_path):
    taken = tmp_path / "taken.sock"
    taken.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "gdsbench", "serve", "--listen", f"sock:{taken}"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "exists (a socket left by a killed server?)" in done.stderr
    assert taken.read_text() == ""  # never removed


@pytest.mark.needs_fio
def test_serve_fails_with_fios_message_when_fio_cannot_bind():
    done = subprocess.run(
        [sys.executable, "-m", "gdsbench", "serve", "--listen", f"[fe80::1%lo]:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 1, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("gdsbench: error: fio server did not listen on [fe80::1%lo]")
    assert "): fio: " in error  # what fio said (bind: Invalid argument), though it exited 0


def test_serve_refuses_a_port_something_listens_on():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        result = CliRunner().invoke(cli, ["serve", "--listen", f"127.0.0.1:{other.getsockname()[1]}"])
    assert_exits(result, 2, one_line_error=True)
    assert "something listens there already" in result.output
