"""The default: torchrun on this host alone, its rendezvous on 127.0.0.1 (torchrun's launcher, one node, no hosts)."""

from __future__ import annotations

from gdsbench.launchers.base import Launch, Program, run_id
from gdsbench.launchers.torchrun import Torchrun, node_command


class Local(Torchrun):
    name = "local"
    summary = "torchrun on this host, world_size ranks, its rendezvous on 127.0.0.1 (the default)"
    takes_hosts = False

    def commands(self, launch: Launch, world_size: int, program: Program, port: int) -> list[list[str]]:
        """One torchrun, one node."""
        return [node_command(program, 1, world_size, f"127.0.0.1:{port}", run_id())]


LAUNCHER = Local()
