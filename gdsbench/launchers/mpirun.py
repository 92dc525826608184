"""Open MPI's mpirun: world_size processes, world_size / nodes on each of `hosts` (this host when none), mapped
node by node; each rank placed by OMPI_COMM_WORLD_RANK, _LOCAL_RANK and _LOCAL_SIZE (gdsbench.rank_env), rank 0's
host (the first) holding the rendezvous. As root, mpirun needs --allow-run-as-root: it is added then."""

from __future__ import annotations

import ipaddress
import os
import re
import socket

from gdsbench.launchers.base import SECRET_VARIABLE, Launch, Launcher, Program
from gdsbench.launchers.torchrun import bracketed

#: What Open MPI says of a rank that died (its rank and signal): more telling than any banner.
NOTICED = r"mpirun noticed|exited on signal"


class Mpirun(Launcher):
    name = "mpirun"
    summary = "Open MPI's mpirun: world_size / nodes ranks on each of hosts (this host when none), node by node"
    tool = "mpirun"
    takes_hosts = True
    telling = r"mpirun noticed|exited on signal|not enough slots|(?i:\berror\b)|^gdsbench\.cli_rank:"

    def unavailable(self, launch: Launch, world_size: int) -> str | None:
        """As every launcher's, and hosts that are one machine: Open MPI counts every name of a machine as one node,
        so two names of this host cannot be two nodes (torchrun's `nodes: 2` can)."""
        found = super().unavailable(launch, world_size)
        if found or len(launch.hosts) < 2:
            return found
        first, *others = launch.hosts
        same = next((h for h in others if same_machine(first, h)), None)
        if same is None:
            return None
        return (
            f"launcher mpirun: hosts {first} and {same} are one machine, and Open MPI counts a machine once: "
            "two nodes on one host are torchrun's (launcher: {name: torchrun, nodes: 2})"
        )

    def failure(self, stderr: str, returncode: int) -> str:
        """A rank's own words or Open MPI's word on a rank that died, else the first paragraph of its first banner (its cause:
        "Your job has requested more processes than the ppr ... can support:", never only its closing "Please
        revise the conflict and try again."), else the telling lines."""
        lines = stderr.splitlines()
        ours = [line for line in lines if line.startswith("gdsbench.cli_rank:") or re.search(NOTICED, line)]
        cause = banner_cause(stderr)
        if ours or not cause:
            return super().failure(stderr, returncode)
        return cause

    def commands(self, launch: Launch, world_size: int, program: Program, port: int) -> list[list[str]]:
        """One mpirun for every rank."""
        per_node = world_size // launch.nodes
        hosts = ",".join(f"{host}:{per_node}" for host in (launch.hosts or ("localhost",)))
        as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        rendezvous = f"{bracketed(self.first_host(launch))}:{port}"
        return [
            [
                "mpirun",
                *as_root,
                "-n",
                str(world_size),
                "--host",
                hosts,
                "--map-by",
                f"ppr:{per_node}:node",
                "--bind-to",
                "none",
                "-x",
                "OMP_NUM_THREADS",
                "-x",
                SECRET_VARIABLE,  # by name: its value travels in mpirun's environment, never on a command line
                *program.argv("--rendezvous", rendezvous),
            ]
        ]


LAUNCHER = Mpirun()


def addresses(host: str) -> set[str]:
    """The addresses a host name resolves to (none where it does not resolve: mpirun then says so itself)."""
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except (OSError, UnicodeError):
        return set()


def same_machine(one: str, other: str) -> bool:
    """Whether two host names are one machine: a shared address, or both this host's (loopback or its own name's)."""
    left, right = addresses(one), addresses(other)
    own = addresses(socket.gethostname())

    def local(found: set[str]) -> bool:
        return bool(found) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback or a in own for a in found)

    return bool(left & right) or (local(left) and local(right))


def banner_cause(stderr: str, most: int = 4) -> str:
    """The first paragraph of the first block Open MPI draws between lines of dashes, with the detail lines it
    indents under it (at most `most` lines, joined); '' where there is none."""
    lines = stderr.splitlines()
    rules = [
        i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"-"} and len(line.strip()) > 20
    ]
    if not rules:
        return ""
    block = lines[rules[0] + 1 : rules[1] if len(rules) > 1 else len(lines)]
    said = [line.strip() for line in block if line.strip()]
    return " ".join(said[:most])
