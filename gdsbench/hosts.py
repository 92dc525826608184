"""The hosts of a multi-host fio sweep: `hosts:` entries parsed into typed Host values.

An entry is `host`, `host:port`, `[ipv6]` or `[ipv6]:port`, `sock:/path` (a unix socket), fio's own
spellings (`host,port`, `ip:host,port`, `ip6:addr,port`), or a path to a host-list file (one host per
line, `#` comments), as fio's `--client=host.list` accepts. Each Host renders its fio `--client=` /
`--server=` argument and the label that result rows carry.
"""

from __future__ import annotations

import enum
import ipaddress
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: fio's default server port (FIO_NET_PORT in server.h).
DEFAULT_PORT = 8765
#: The label of the aggregate row of a multi-host case; no host may use it.
AGGREGATE = "all"
#: sun_path holds 108 bytes with the terminating NUL; fio silently truncates longer paths.
MAX_SOCKET_PATH = 107
#: DNS limits (RFC 1035): a name's length, and each dot-separated label's.
MAX_NAME, MAX_LABEL = 253, 63
EXPECTED = "host, host:port, [ipv6]:port, sock:/path/to/socket or a host-list file"
_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


class HostKind(str, enum.Enum):
    """How fio reaches a server: TCP over IPv4 or a host name, TCP over IPv6, or a unix socket."""

    TCP = "tcp"
    TCP6 = "tcp6"
    SOCK = "sock"


class HostError(ValueError):
    """A `hosts:` entry that cannot be parsed: where it is, what was expected, what was given."""

    def __init__(self, where: str, expected: str, got: object) -> None:
        self.where, self.expected, self.got = where, expected, got
        super().__init__(f"{where}: expected {expected} (got {got!r})")


@dataclass(frozen=True)
class Host:
    """One fio server: how to reach it and the label its result rows carry."""

    kind: HostKind
    address: str  # host name or IP address (TCP), socket path (SOCK): what fio reports as `hostname`
    port: int | None = None  # None for unix sockets

    @property
    def label(self) -> str:
        """The row label: `node1`, `node1:8766`, `[::1]:8765`, `sock:/run/fio.sock`."""
        if self.kind is HostKind.SOCK:
            return f"sock:{self.address}"
        address = f"[{self.address}]" if self.kind is HostKind.TCP6 else self.address
        return address if self.port == DEFAULT_PORT and self.kind is HostKind.TCP else f"{address}:{self.port}"

    @property
    def spec(self) -> str:
        """The argument of fio's `--client=` and `--server=` for this host (fio spells ports with a comma)."""
        if self.kind is HostKind.SOCK:
            return f"sock:{self.address}"
        prefix = "ip6:" if self.kind is HostKind.TCP6 else "ip:"
        return f"{prefix}{self.address},{self.port}"

    @property
    def is_local(self) -> bool:
        """True for a unix socket or a loopback address: the server's files are this machine's."""
        if self.kind is HostKind.SOCK or self.address == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.address).is_loopback
        except ValueError:
            return False

    def reports_as(self, hostname: str, port: int) -> bool:
        """True when a client_stats entry's (hostname, port) is this host's (a socket's port means nothing)."""
        return hostname == self.address and (self.kind is HostKind.SOCK or port == self.port)


def parse_host(text: str) -> Host:
    """One host entry (not a file); ValueError naming what was expected."""
    text = text.strip()
    if text.startswith("sock:"):
        return _socket(text[5:])
    if text.startswith("ip6:"):
        address, port = _split_comma(text[4:])
        return Host(HostKind.TCP6, _ipv6(address), port)
    if text.startswith("["):
        return _bracketed(text)
    text = text.removeprefix("ip4:").removeprefix("ip:")
    address, port = _split_comma(text) if "," in text else _split_colon(text)
    if address.lower() == AGGREGATE:
        raise ValueError(f"a host other than {AGGREGATE!r} (it names the aggregate row)")
    if not _NAME.fullmatch(address):
        raise ValueError("a host name or IPv4 address (letters, digits, '.', '-', '_')")
    if len(address) > MAX_NAME or not all(1 <= len(label) <= MAX_LABEL for label in address.split(".")):
        raise ValueError(f"a host name of at most {MAX_NAME} characters, its dot-separated labels 1 to {MAX_LABEL}")
    return Host(HostKind.TCP, address, port)


def _socket(path: str) -> Host:
    """A unix socket entry: a non-empty path short enough for sun_path."""
    if not path:
        raise ValueError("sock: followed by a socket path")
    if len(path.encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"a socket path of at most {MAX_SOCKET_PATH} bytes")
    return Host(HostKind.SOCK, path)


def _bracketed(text: str) -> Host:
    """`[ipv6]` or `[ipv6]:port`."""
    address, sep, rest = text[1:].partition("]")
    if not sep or (rest and not rest.startswith(":")):
        raise ValueError("[ipv6 address] or [ipv6 address]:port")
    return Host(HostKind.TCP6, _ipv6(address), _port(rest[1:]) if rest else DEFAULT_PORT)


def _ipv6(address: str) -> str:
    """An IPv6 address as written, once checked."""
    try:
        ipaddress.IPv6Address(address)
    except ValueError:
        raise ValueError("an IPv6 address such as ::1") from None
    return address


def _split_comma(text: str) -> tuple[str, int]:
    """fio's `host,port` (port optional)."""
    address, sep, port = text.rpartition(",") if "," in text else (text, "", "")
    return address.strip(), _port(port) if sep else DEFAULT_PORT


def _split_colon(text: str) -> tuple[str, int]:
    """`host:port` (port optional); a bare IPv6 address must be bracketed."""
    if text.count(":") > 1:
        raise ValueError("an IPv6 address in brackets: [addr]:port")
    address, sep, port = text.partition(":")
    return address, _port(port) if sep else DEFAULT_PORT


def _port(text: str) -> int:
    """A TCP port, 1-65535."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError("a port number from 1 to 65535")
    return int(text)


def parse_hosts(value: Any, base: Path | None = None) -> tuple[Host, ...]:
    """The `hosts:` value: a list of entries or host-list files (or one such string); HostError on a bad one.

    Relative host-list paths are read from `base` (the config file's folder). Hosts are kept in the
    order given; a host listed twice is an error, since its two job files would share its files.
    """
    entries = [value] if isinstance(value, str) else value
    if not isinstance(entries, list) or not entries:
        raise HostError("hosts", f"a non-empty list of hosts ({EXPECTED})", value)
    hosts: dict[Host, str] = {}
    for where, entry in _entries(entries, base):
        try:
            host = parse_host(entry)
        except ValueError as exc:
            raise HostError(where, str(exc), entry) from None
        if host in hosts:
            raise HostError(where, f"each host once ({host.label} is also {hosts[host]})", entry)
        hosts[host] = where
    if not hosts:
        raise HostError("hosts", "at least one host (the host-list files are empty)", value)
    return tuple(hosts)


def _entries(entries: list[Any], base: Path | None) -> Iterator[tuple[str, str]]:
    """(where, text) of every host entry, host-list files expanded in place."""
    for index, entry in enumerate(entries):
        where = f"hosts[{index}]"
        if not isinstance(entry, str) or not entry.strip():
            raise HostError(where, EXPECTED, entry)
        path = _host_list(entry.strip(), base)
        if path is None:
            yield where, entry
        else:
            yield from read_host_list(path, where)


def _host_list(entry: str, base: Path | None) -> Path | None:
    """The host-list file an entry names (it has a '/' or names an existing file), else None."""
    if entry.startswith(("sock:", "[", "ip:", "ip4:", "ip6:")):
        return None
    path = Path(entry).expanduser()
    path = path if path.is_absolute() or base is None else base / path
    if "/" in entry or path.is_file():
        return path
    return None


def read_host_list(path: Path, where: str = "hosts") -> Iterator[tuple[str, str]]:
    """(file:line, entry) for each host in a host-list file: whitespace-separated, `#` starts a comment."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise HostError(where, f"a readable host-list file ({exc.strerror})", str(path)) from None
    for number, line in enumerate(lines, 1):
        for token in line.split("#", 1)[0].split():
            yield f"{path}:{number}", token


def free_port() -> int:
    """A TCP port free on the loopback interface now (a test server, a testbed's daemon or a rendezvous binds it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
