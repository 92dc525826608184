"""`gdsbench serve`: a fio server for multi-host sweeps, bound to one chosen address or a private socket.

A fio server runs any job file it is sent, `exec_prerun` commands included, with its own privileges,
and fio makes its unix socket world-writable (0777). So the default is a socket in a new folder only
this user can enter; a TCP address must be named (`--listen 127.0.0.1:8765`), and all interfaces
(0.0.0.0, ::, an empty host) are refused unless `--allow-all-interfaces` is given.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from gdsbench.errors import ToolError, UsageError
from gdsbench.hosts import DEFAULT_PORT, MAX_SOCKET_PATH, Host, HostKind, parse_host


def listen_host(listen: str, allow_all: bool) -> tuple[Host, str | None]:
    """The address to bind (`host:port`, `[ipv6]:port`, `sock:/path`) and a warning; UsageError if refused or
    if a name does not resolve."""
    try:
        host = parse_host(_spell_wildcard(listen))
    except ValueError as exc:
        raise UsageError(f"--listen: expected {exc} (got {listen!r})") from None
    if host.kind is HostKind.SOCK:
        host = Host(HostKind.SOCK, str(Path(host.address).absolute()))
        return host, _socket_warning(host)
    if all_interfaces(host):
        if not allow_all:
            raise UsageError(
                f"--listen {listen!r} binds every interface: anyone who reaches the port can run any job "
                "(exec_prerun too) as this user; name one address, or add --allow-all-interfaces"
            )
        return host, _open_warning(listen)
    return host, None


def _spell_wildcard(listen: str) -> str:
    """An empty or `*` host (`:8765`, `*`, `::`) spelled as an address, so it parses and is then refused."""
    text = listen.strip()
    if text in ("", "*"):
        return "0.0.0.0"
    if text == "::":
        return "[::]"
    if text.startswith(("*:", "*,")) or (text.startswith((":", ",")) and not text.startswith("::")):
        return "0.0.0.0" + text.lstrip("*")
    return text


def all_interfaces(host: Host) -> bool:
    """True when the address is, or a name resolves to, 0.0.0.0 or :: (IPv4-mapped forms and scopes included: `::%lo`);
    UsageError for a name or address that does not resolve (fio resolves them as here)."""
    if host.kind is HostKind.SOCK:
        return False
    return _unspecified([host.address]) or _unspecified(resolve(host))


def resolve(host: Host) -> set[str]:
    """The addresses a TCP host's name or address resolves to; UsageError naming it when it does not (no such
    name, a scope `%if` with no such interface, a label IDNA refuses)."""
    family = socket.AF_INET6 if host.kind is HostKind.TCP6 else socket.AF_INET
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host.address, None, family, socket.SOCK_STREAM)}
    except (OSError, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--listen {host.label}: {host.address!r} does not resolve ({reason})") from None


def _unspecified(addresses: Iterable[str]) -> bool:
    """True when one of these is an IP address binding every interface (names are not)."""
    for address in addresses:
        try:
            if _as_ipv4(address).is_unspecified:
                return True
        except ValueError:
            continue
    return False


def _as_ipv4(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address, an IPv4-mapped IPv6 one (`::ffff:0.0.0.0`, `::ffff:0:0`) as the IPv4 address it binds."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped or ip


def _open_warning(listen: str) -> str:
    """The warning printed when all interfaces were allowed explicitly."""
    return f"fio server on all interfaces ({listen}): anyone who reaches it can run any job as this user"


def _socket_warning(host: Host) -> str | None:
    """A warning when other users can reach a socket's folder (fio makes the socket itself 0777)."""
    if host.kind is not HostKind.SOCK:
        return None
    folder = Path(host.address).parent
    try:
        mode = folder.stat().st_mode
    except OSError:
        return None
    if mode & (stat.S_IXOTH | stat.S_IXGRP):
        return f"{folder} is open to other users and fio makes its socket 0777: they can run any job as this user"
    return None


def private_socket() -> Host:
    """A unix socket in a new folder only this user can enter (mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gdsbench-fio-")) / "fio.sock"
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        path.parent.rmdir()
        raise UsageError(f"{path}: socket path longer than {MAX_SOCKET_PATH} bytes; set TMPDIR to a shorter folder")
    return Host(HostKind.SOCK, str(path))


def server_argv(binary: str, host: Host, pidfile: Path | None = None) -> list[str]:
    """`fio --server=<spec> [--daemonize=<pidfile>]`."""
    argv = [binary, f"--server={host.spec}"]
    return [*argv, f"--daemonize={pidfile.absolute()}"] if pidfile else argv


def listening(host: Host) -> bool:
    """True when a server accepts connections at `host` (a socket file exists; a TCP connect succeeds)."""
    if host.kind is HostKind.SOCK:
        return Path(host.address).is_socket()
    family = socket.AF_INET6 if host.kind is HostKind.TCP6 else socket.AF_INET
    address = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host.address, host.address)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        try:
            return probe.connect_ex((address, host.port or DEFAULT_PORT)) == 0
        except (OSError, UnicodeError):  # a name that stopped resolving
            return False


def wait_listening(host: Host, alive: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll until the server listens; False if it died or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listening(host):
            return True
        if not alive():
            return False
        time.sleep(0.05)
    return False


class Terminated(Exception):
    """SIGTERM reached `gdsbench serve`."""


def _terminated(*_: object) -> None:
    """SIGTERM handler: stop the server as Ctrl-C does."""
    raise Terminated


class Relay:
    """fio's output, held until the server listens (it says why it could not), then passed on line by line."""

    def __init__(self, stream: Iterable[str], say: Callable[[str], None]) -> None:
        self.held: list[str] = []
        self._say, self._lock, self._released = say, threading.Lock(), False
        self._thread = threading.Thread(target=self._copy, args=(stream,), daemon=True)
        self._thread.start()

    def _copy(self, stream: Iterable[str]) -> None:
        """Hold or pass on each line until the stream ends."""
        for line in stream:
            with self._lock:
                (self._say if self._released else self.held.append)(line.rstrip("\n"))

    def release(self) -> None:
        """Pass on what was held, and every line from now on."""
        with self._lock:
            self._released = True
            for line in self.held:
                self._say(line)

    def said(self, timeout: float = 2.0) -> str:
        """What was held, once the stream ended (or `timeout` passed), as one line."""
        self._thread.join(timeout)
        with self._lock:
            return "; ".join(line.strip() for line in self.held if line.strip()) or "nothing"


def run_foreground(argv: list[str], host: Host, say: Callable[[str], None]) -> int:
    """Run the server until it exits, Ctrl-C (130) or SIGTERM (143); both stop it as `stop` does. fio's output
    goes to stderr; ToolError with it when fio exits before it listens (fio 3.33 exits 0 when it cannot bind)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    relay = Relay(proc.stdout or (), say)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        if wait_listening(host, lambda: proc.poll() is None):
            say(f"fio server listening on {host.label} (pid {proc.pid}); Ctrl-C stops it")
        elif proc.poll() is not None:
            raise ToolError(
                f"fio server did not listen on {host.label} (exit status {proc.returncode}): {relay.said()}"
            )
        relay.release()
        return proc.wait()
    except (KeyboardInterrupt, Terminated) as exc:
        stop(proc)
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop(proc: subprocess.Popen, tries: int = 5) -> None:
    """Stop a server with SIGINT, its clean exit, repeated: fio 3.33 acts on one only while it waits in
    poll() (its handler just unlinks the socket), so a SIGINT that lands while it reaps a finished
    client is lost. SIGKILL after `tries` seconds."""
    for _ in range(tries):
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def run_daemon(argv: list[str], host: Host, pidfile: Path, say: Callable[[str], None]) -> int:
    """fio's own --daemonize: the parent writes the pidfile and exits; wait until the daemon listens."""
    code = subprocess.run(argv, check=False).returncode
    if code != 0:
        return code
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):  # the daemon failed and removed it; it logs why to syslog
        raise ToolError(
            f"fio server did not start on {host.label}: no pid in {pidfile} (fio logs why to syslog)"
        ) from None
    if not wait_listening(host, lambda: _alive(pid)):
        say(f"fio server (pid {pid}) is not listening on {host.label}")
        return 1
    say(f"fio server listening on {host.label} (pid {pid} in {pidfile}); stop it with: kill -INT {pid}")
    say("(repeat it if the server still runs: fio 3.33 misses a SIGINT that lands while it reaps a client)")
    return 0


def _alive(pid: int) -> bool:
    """True while process `pid` exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def serve(listen: str | None, allow_all: bool, pidfile: Path | None, binary: str, say: Callable[[str], None]) -> int:
    """Start a fio server as asked; return the exit status. A foreground server's socket is removed after."""
    host, warning = listen_host(listen, allow_all) if listen else (private_socket(), None)
    if host.kind is HostKind.SOCK and os.path.lexists(host.address):
        raise UsageError(f"{host.address} exists (a socket left by a killed server?); remove it or choose another")
    if host.kind is not HostKind.SOCK and listening(host):  # fio would fail to bind, and we take that one for it
        raise UsageError(
            f"--listen {host.label}: something listens there already (another fio server?); choose another port"
        )
    if warning:
        say(f"warning: {warning}")
    say(f"sweep configs reach it as: hosts: [{host.label!r}]")
    argv = server_argv(binary, host, pidfile)
    if pidfile:
        return run_daemon(argv, host, pidfile, say)
    try:
        return run_foreground(argv, host, say)
    finally:
        _remove_socket(host, private=not listen)


def _remove_socket(host: Host, private: bool) -> None:
    """Remove the socket our server left (fio binds no path that exists), then the private folder if ours."""
    if host.kind is not HostKind.SOCK:
        return
    path = Path(host.address)
    if path.is_socket():
        path.unlink()
    if private:
        with contextlib.suppress(OSError):
            path.parent.rmdir()
