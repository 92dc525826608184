"""A rank's place in its job, from whichever launcher started it, as torch.distributed's env:// rendezvous reads it.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE and GROUP_RANK itself; Slurm's srun, Open MPI's
mpirun, MPICH's Hydra and a Kubernetes Indexed Job each say the same in their own variables. `torch_variables`
maps them (the first launcher whose variables are present wins, torchrun's first) and adds the rendezvous
(MASTER_ADDR, MASTER_PORT) where the launcher set none. Nothing here starts a process except `slurm_first_node`,
which asks Slurm's own `scontrol` where the step's first task runs.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gdsbench.errors import GdsbenchError


class RankEnvError(GdsbenchError):
    """The launcher's variables do not say where this rank stands, or contradict the case."""


@dataclass(frozen=True)
class Place:
    """A rank's place: its rank and the world's size, its rank and the rank count on its node, its node's index."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node: int
    launcher: str


def _int(env: Mapping[str, str], name: str) -> int:
    """A launcher's variable as a non-negative integer; RankEnvError naming it otherwise."""
    value = env.get(name, "")
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise RankEnvError(f"{name}={value!r}: expected a non-negative integer")
    return int(value)


def slurm_tasks_on_node(spec: str, node: int) -> int:
    """Tasks on the step's `node`-th node from SLURM_STEP_TASKS_PER_NODE ('2(x3),1': 2 on each of 3 nodes, then 1)."""
    left = node
    for part in spec.split(","):
        match = re.fullmatch(r"(\d{1,18})(?:\(x(\d{1,18})\))?", part.strip())
        if not match:
            raise RankEnvError(f"SLURM_STEP_TASKS_PER_NODE={spec!r}: expected counts such as 2(x3),1")
        repeats = int(match[2] or 1)
        if left < repeats:
            return int(match[1])
        left -= repeats
    raise RankEnvError(f"SLURM_STEP_TASKS_PER_NODE={spec!r} names no node {node}")


def _torchrun(env: Mapping[str, str], world_size: int) -> Place:
    node = _int(env, "GROUP_RANK") if "GROUP_RANK" in env else 0
    local_size = _int(env, "LOCAL_WORLD_SIZE") if "LOCAL_WORLD_SIZE" in env else 1
    return Place(_int(env, "RANK"), _int(env, "WORLD_SIZE"), _int(env, "LOCAL_RANK"), local_size, node, "torchrun")


def _slurm(env: Mapping[str, str], world_size: int) -> Place:
    node = _int(env, "SLURM_NODEID")
    per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "1")
    local = slurm_tasks_on_node(per_node, node)
    return Place(_int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS"), _int(env, "SLURM_LOCALID"), local, node, "srun")


def _open_mpi(env: Mapping[str, str], world_size: int) -> Place:
    rank, local_size = _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    node = rank // max(local_size, 1)  # gdsbench maps ranks by node (--map-by ppr:N:node): node-major
    local = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK")
    return Place(rank, _int(env, "OMPI_COMM_WORLD_SIZE"), local, local_size, node, "mpirun")


def _hydra(env: Mapping[str, str], world_size: int) -> Place:
    rank = _int(env, "PMI_RANK")
    local = _int(env, "MPI_LOCALRANKID") if "MPI_LOCALRANKID" in env else 0
    local_size = _int(env, "MPI_LOCALNRANKS") if "MPI_LOCALNRANKS" in env else 1
    return Place(rank, _int(env, "PMI_SIZE"), local, local_size, rank // max(local_size, 1), "mpirun (hydra)")


def _indexed_job(env: Mapping[str, str], world_size: int) -> Place:
    index = _int(env, "JOB_COMPLETION_INDEX")  # one rank per pod: the Job's completions are the world
    return Place(index, world_size, 0, 1, index, "kubernetes")


#: Each launcher's telling variable and how to read its rank's place; the first present wins.
LAUNCHERS: tuple[tuple[str, Callable[[Mapping[str, str], int], Place]], ...] = (
    ("RANK", _torchrun),
    ("SLURM_PROCID", _slurm),
    ("OMPI_COMM_WORLD_RANK", _open_mpi),
    ("PMI_RANK", _hydra),
    ("JOB_COMPLETION_INDEX", _indexed_job),
)


def place(env: Mapping[str, str], world_size: int) -> Place:
    """This rank's place as its launcher's variables say (a lone process: rank 0 of 1); RankEnvError where they
    contradict themselves or the case's `world_size`."""
    found = next((read(env, world_size) for name, read in LAUNCHERS if name in env), None)
    found = found or Place(0, 1, 0, 1, 0, "none")
    if found.world_size != world_size:
        raise RankEnvError(f"the case says world_size={world_size}, {found.launcher} started {found.world_size} ranks")
    if not (found.rank < found.world_size and found.local_rank < found.local_world_size):
        raise RankEnvError(
            f"{found.launcher}: rank {found.rank} of {found.world_size}, local {found.local_rank} of "
            f"{found.local_world_size}: out of range"
        )
    return found


def torch_variables(
    env: Mapping[str, str], world_size: int, rendezvous: str = "", first_node: Callable[[], str] | None = None
) -> dict[str, str]:
    """The env:// variables for this rank: its place, and MASTER_ADDR/MASTER_PORT from `rendezvous` (HOST:PORT;
    an empty HOST: the first node as `first_node` finds it) where the launcher set none."""
    where = place(env, world_size)
    variables = {
        "RANK": str(where.rank),
        "WORLD_SIZE": str(where.world_size),
        "LOCAL_RANK": str(where.local_rank),
        "LOCAL_WORLD_SIZE": str(where.local_world_size),
        "GROUP_RANK": str(where.node),
        "GDSBENCH_LAUNCHER": where.launcher,
    }
    if rendezvous and "MASTER_ADDR" not in env:
        host, _, port = rendezvous.rpartition(":")
        host = host.strip("[]")
        if not (port.isascii() and port.isdigit() and 0 < int(port[:6]) <= 65535):
            raise RankEnvError(f"--rendezvous {rendezvous!r}: expected HOST:PORT")
        if not host and first_node is None:
            raise RankEnvError(f"--rendezvous {rendezvous!r}: no host given, and no launcher names the first node")
        variables.update(MASTER_ADDR=host or (first_node() if first_node else ""), MASTER_PORT=port)
    return variables


def slurm_first_node(env: Mapping[str, str], timeout: float = 30.0) -> str:
    """The address of the Slurm step's first node (its task 0 hosts the rendezvous): the node list expanded by
    `scontrol show hostnames`, its first node's NodeAddr from `scontrol show node`."""
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise RankEnvError("no rendezvous host: outside a Slurm step, give --rendezvous HOST:PORT")
    names = _scontrol(["show", "hostnames", nodelist], timeout).split()
    if not names:
        raise RankEnvError(f"scontrol show hostnames {nodelist!r} named no node")
    shown = _scontrol(["show", "node", "--oneliner", names[0]], timeout)
    match = re.search(r"\bNodeAddr=(\S+)", shown)
    return match[1] if match else names[0]


def _scontrol(args: list[str], timeout: float) -> str:
    """scontrol's output; RankEnvError with its message when it fails."""
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RankEnvError(f"scontrol {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise RankEnvError(f"scontrol {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout
