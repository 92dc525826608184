"""What every launcher declares and shares: the sweep's `launcher:` settings (Launch), the rank program it starts
(Program), and the Launcher template each launcher module fills in (its name, the tool it runs, its commands)."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import socket
import sys
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gdsbench.errors import GdsbenchError
from gdsbench.hosts import free_port

#: The variable that carries a launch's rendezvous secret to its ranks (never an argument: /proc/PID/cmdline is
#: anyone's to read, a process's environment its owner's alone). Ranks derive from it the key namespace of their
#: store and the proof that the store is their own (gdsbench.runners.checkpoint.ranks.join).
SECRET_VARIABLE = "GDSBENCH_RENDEZVOUS_SECRET"
#: How the launcher or a rank says a rendezvous port was held by someone else.
PORT_HELD = re.compile(r"EADDRINUSE|address already in use|is held by another process", re.IGNORECASE)

#: Host names that mean this machine (a torchrun node there starts without ssh).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252}[A-Za-z0-9_])?")


class LaunchError(GdsbenchError):
    """A `launcher:` setting that cannot be used: where, what was expected, what was given."""

    def __init__(self, where: str, expected: str, got: Any = None) -> None:
        self.where, self.expected, self.got = where, expected, got
        super().__init__(f"{where}: expected {expected}" + ("" if got is None else f" (got {got!r})"))


@dataclass(frozen=True)
class Launch:
    """How a sweep's ranks start: the launcher's name, the nodes they spread over (each with world_size / nodes
    ranks), the nodes by name (torchrun, mpirun: the first hosts the rendezvous), the rendezvous port (0: a free
    one on this host) and a Slurm partition."""

    name: str = "local"
    nodes: int = 1
    hosts: tuple[str, ...] = ()
    port: int = 0
    partition: str = ""

    def record(self) -> dict[str, Any]:
        """The settings as a sidecar records them."""
        return {
            "name": self.name,
            "nodes": self.nodes,
            "hosts": list(self.hosts),
            "port": self.port,
            "partition": self.partition,
        }


@dataclass(frozen=True)
class Program:
    """The rank program a launcher starts on every rank: the interpreter, its module and the module's arguments."""

    module: str
    args: tuple[str, ...]
    python: str = sys.executable

    def argv(self, *extra: str) -> list[str]:
        """The program as one process's arguments, `extra` at the end."""
        return [self.python, "-m", self.module, *self.args, *extra]


class Launcher(ABC):
    """A way to start a case's ranks: declares its name, summary and the tool it runs, and builds the commands
    (one per node for torchrun, one in all for srun and mpirun) that start them."""

    name: ClassVar[str]
    summary: ClassVar[str]
    tool: ClassVar[str]  # the executable it runs (found on PATH; '': only this Python)
    takes_hosts: ClassVar[bool] = False  # whether `hosts:` names its nodes
    telling: ClassVar[str] = r"(?i)\berror\b"  # the lines of its output that say why ranks failed

    def unavailable(self, launch: Launch, world_size: int) -> str | None:
        """Why a case of `world_size` ranks cannot start this way (None: it can)."""
        tool = self.needs(launch)
        if tool and shutil.which(tool) is None:
            return f"launcher {self.name}: {tool} is not installed"
        if world_size % launch.nodes:
            return f"launcher {self.name}: world_size {world_size} does not split evenly over {launch.nodes} nodes"
        return None

    def needs(self, launch: Launch) -> str | None:
        """The tool this launch runs, to be found on PATH (None: only this Python)."""
        return self.tool or None

    @abstractmethod
    def commands(self, launch: Launch, world_size: int, program: Program, port: int) -> list[list[str]]:
        """The commands that start `world_size` ranks of `program`, meeting at `port`."""

    def failure(self, stderr: str, returncode: int) -> str:
        """Why the ranks failed, as the launcher said it: a rendezvous port someone else held, else its last
        telling lines (`telling`), else its last line."""
        lines = [line.strip() for line in stderr.splitlines() if line.strip().strip("=-*")]
        held = port_held(lines)
        if held:
            return held
        said = [line for line in lines if re.search(self.telling, line)]
        return "; ".join(dict.fromkeys(said[-2:])) or (lines[-1] if lines else f"{self.name} exited {returncode}")

    def first_host(self, launch: Launch) -> str:
        """Where rank 0 runs, hosting the rendezvous ('' where only the launcher knows)."""
        return launch.hosts[0] if launch.hosts else "127.0.0.1"

    def port(self, launch: Launch) -> int:
        """The rendezvous port: the configured one, else one free on this host now."""
        return launch.port or free_port()


def is_local(host: str) -> bool:
    """Whether a node's name means this machine."""
    return host in LOOPBACK_NAMES or host == socket.gethostname()


def run_id() -> str:
    """A fresh rendezvous id (torchrun's --rdzv-id)."""
    return f"gdsbench-{uuid.uuid4().hex[:12]}"


def check_host(where: str, value: Any) -> str:
    """A node's name or address as `hosts:` gives it; LaunchError for anything else (an option, a path, a space)."""
    if isinstance(value, str):
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            if _NAME.fullmatch(value):
                return value
    raise LaunchError(where, "a host name or an IP address", value)


def parse(value: Any, known: Mapping[str, Launcher], where: str = "launcher") -> Launch:
    """The `launcher:` value: a launcher's name, or a mapping of name, nodes, hosts, port and partition."""
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, Mapping):
        raise LaunchError(where, "a launcher's name or a mapping of name, nodes, hosts, port, partition", value)
    unknown = sorted(set(map(str, value)) - {"name", "nodes", "hosts", "port", "partition"})
    if unknown:
        raise LaunchError(f"{where}.{unknown[0]}", "one of name, nodes, hosts, port, partition")
    name = value.get("name", "local")
    if not isinstance(name, str) or name not in known:
        raise LaunchError(f"{where}.name", "one of " + ", ".join(known), name)
    hosts = value.get("hosts") or []
    if not isinstance(hosts, list) or (hosts and not known[name].takes_hosts):
        raise LaunchError(
            f"{where}.hosts", f"a list of hosts (for {', '.join(k for k, v in known.items() if v.takes_hosts)})", hosts
        )
    hosts = tuple(check_host(f"{where}.hosts[{i}]", h) for i, h in enumerate(hosts))
    nodes = value.get("nodes", len(hosts) or 1)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or not 1 <= nodes <= 100_000:
        raise LaunchError(f"{where}.nodes", "a positive integer", nodes)
    if hosts and nodes != len(hosts):
        raise LaunchError(f"{where}.nodes", f"the number of hosts ({len(hosts)})", nodes)
    port = value.get("port", 0)
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise LaunchError(f"{where}.port", "a TCP port (1-65535; 0: a free one)", port)
    partition = value.get("partition", "")
    if not isinstance(partition, str) or (partition and not _NAME.fullmatch(partition)):
        raise LaunchError(f"{where}.partition", "a Slurm partition's name", partition)
    return Launch(name, nodes, hosts, port, partition)


def port_held(lines: list[str]) -> str:
    """The refusal, where the output says the rendezvous port was held by another process ('' where not)."""
    said = next((line for line in lines if PORT_HELD.search(line)), "")
    if not said:
        return ""
    port = re.search(r"port:? (\S*?\d+)\b", said)
    where = f" ({port.group(1)})" if port else ""
    return (
        f"the rendezvous port{where} is held by another process: refused, never connected to it "
        f"(a launch meets only at a store it started; free the port or leave launcher.port unset); said: {said}"
    )


def new_secret() -> str:
    """A fresh launch's rendezvous secret (256 bits)."""
    return secrets.token_hex(32)


def environment(secret: str = "") -> dict[str, str]:
    """The environment the ranks start with: this one, one OpenMP thread per rank, the launch's secret."""
    return {**os.environ, "OMP_NUM_THREADS": "1", **({SECRET_VARIABLE: secret} if secret else {})}
