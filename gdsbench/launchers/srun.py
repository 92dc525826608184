"""Slurm's srun: one task per rank over `nodes` nodes of the allocation it runs in (or of one it asks for), each
rank placed by SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID (gdsbench.rank_env); rank 0 on the step's first node
hosts the rendezvous. A rank that fails ends the step (--kill-on-bad-exit); an allocation that cannot be had
within 30 s is given up, not waited for (--immediate: a Slurm with EnforcePartLimits refuses one it can never
meet at once)."""

from __future__ import annotations

from gdsbench.launchers.base import Launch, Launcher, Program

IMMEDIATE_S = 30  # how long srun may wait for its resources before it gives up


class Srun(Launcher):
    name = "srun"
    summary = "Slurm's srun: world_size tasks over `nodes` nodes (partition: optional), inside an allocation or asking for one"
    tool = "srun"
    telling = r"^srun: (error|Job step aborted|Force Terminated)|^gdsbench\.cli_rank:"

    def commands(self, launch: Launch, world_size: int, program: Program, port: int) -> list[list[str]]:
        """One srun for every rank."""
        partition = [f"--partition={launch.partition}"] if launch.partition else []
        return [
            [
                "srun",
                f"--nodes={launch.nodes}",
                f"--ntasks={world_size}",
                f"--ntasks-per-node={world_size // launch.nodes}",
                "--kill-on-bad-exit=1",
                f"--immediate={IMMEDIATE_S}",
                "--export=ALL",
                *partition,
                *program.argv("--rendezvous", f":{port}"),
            ]
        ]

    def first_host(self, launch: Launch) -> str:
        """Known to Slurm only: each rank asks scontrol for the step's first node."""
        return ""


LAUNCHER = Srun()
