"""How a distributed checkpoint case's ranks start: the cluster's own launchers, each a module declaring itself
(LAUNCHER: its name, the tool it runs, the commands that start the ranks). Adding one is adding a module and one
line here. The ranks place themselves from their launcher's variables (gdsbench.rank_env)."""

from __future__ import annotations

from typing import Any

from gdsbench.hosts import free_port
from gdsbench.launchers import local, mpirun, srun, torchrun
from gdsbench.launchers.base import Launch, Launcher, LaunchError, Program, environment, new_secret
from gdsbench.launchers.base import parse as parse_with

LAUNCHERS: dict[str, Launcher] = {module.LAUNCHER.name: module.LAUNCHER for module in (local, torchrun, srun, mpirun)}


def get(name: str) -> Launcher:
    """The launcher registered as `name`."""
    return LAUNCHERS[name]


def parse(value: Any, where: str = "launcher") -> Launch:
    """The sweep's `launcher:` setting (a name, or a mapping); LaunchError naming what is wrong."""
    return parse_with(value, LAUNCHERS, where)


__all__ = [
    "LAUNCHERS",
    "Launch",
    "LaunchError",
    "Launcher",
    "Program",
    "environment",
    "free_port",
    "get",
    "new_secret",
    "parse",
]
