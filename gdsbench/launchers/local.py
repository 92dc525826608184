"""The default: torchrun on this host alone, its rendezvous on 127.0.0.1."""

from __future__ import annotations

from gdsbench.launchers.base import Launch, Launcher, Program, run_id
from gdsbench.launchers.torchrun import launcher_failure, node_command


class Local(Launcher):
    name = "local"
    summary = "torchrun on this host, world_size ranks, its rendezvous on 127.0.0.1 (the default)"
    tool = ""

    def needs(self, launch: Launch) -> str | None:
        """Only this Python (torchrun is torch's own module)."""
        return None

    def failure(self, stderr: str, returncode: int) -> str:
        """torchrun's root cause and the failed rank's last error line."""
        return launcher_failure(stderr, returncode)

    def commands(self, launch: Launch, world_size: int, program: Program, port: int) -> list[list[str]]:
        """One torchrun, one node."""
        return [node_command(program, 1, world_size, f"127.0.0.1:{port}", run_id())]


LAUNCHER = Local()
