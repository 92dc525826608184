"""Open MPI's mpirun: world_size processes, world_size / nodes on each of `hosts` (this host when none), mapped
node by node; each rank placed by OMPI_COMM_WORLD_RANK, _LOCAL_RANK and _LOCAL_SIZE (gdsbench.rank_env), rank 0's
host (the first) holding the rendezvous. As root, mpirun needs --allow-run-as-root: it is added then."""

from __future__ import annotations

import os

from gdsbench.launchers.base import SECRET_VARIABLE, Launch, Launcher, Program
from gdsbench.launchers.torchrun import bracketed


class Mpirun(Launcher):
    name = "mpirun"
    summary = "Open MPI's mpirun: world_size / nodes ranks on each of hosts (this host when none), node by node"
    tool = "mpirun"
    takes_hosts = True
    telling = r"mpirun noticed|exited on signal|not enough slots|(?i:\berror\b)|^gdsbench\.cli_rank:"

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
