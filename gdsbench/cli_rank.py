"""The rank program: what torchrun starts on every rank of every node for a distributed checkpoint case.

    torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=static --node-rank=0 --rdzv-endpoint=node0:29500 \\
        -m gdsbench.cli_rank --checkpoint /shared/ckpt --out /tmp/ck1 \\
        --case engine=dcp_fast,pattern=save,world_size=8,workload=llama3-8b,checkpoint_size=4G

The case is its key, as a results row's `case` cell holds it (a sweep passes its cases so): the config's own
keys parse it and fill in every value it leaves out, into the rank's typed job (RankJob); the rank's work is
gdsbench.runners.checkpoint.ranks.rank's, with the rank half the case's engine declares (a distributed engine's `ranks`).
The workload is a
torch.save file every rank maps (--workload-file: the sweep writes it to /dev/shm once), or the case's preset,
which each node's first rank generates into /dev/shm for the node's ranks; an MLPerf geometry's ranks draw
their own tensors. Rank 0 gathers every rank's figures into `<out>/ranks.json`.
"""

from __future__ import annotations

import argparse
import os
import sys

from gdsbench import config, rank_env, runners
from gdsbench.errors import ConfigError
from gdsbench.runners.checkpoint.distributed import DistributedRunner
from gdsbench.runners.checkpoint.rank_half import RankHalf, WholeJob
from gdsbench.runners.checkpoint.rank_job import RankJob
from gdsbench.runners.checkpoint.ranks import rank


def ranked_engines() -> list[str]:
    """The engines that declare a rank half (distributed engines)."""
    return [name for name, runner in runners.RUNNERS.items() if isinstance(runner, DistributedRunner)]


def rank_half(engine: str) -> RankHalf | WholeJob:
    """The rank half the engine declares."""
    runner = runners.get(engine)
    assert isinstance(runner, DistributedRunner)
    return runner.ranks


def parser() -> argparse.ArgumentParser:
    """The rank program's arguments."""
    p = argparse.ArgumentParser(
        prog="python -m gdsbench.cli_rank", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--case",
        required=True,
        help="the case's key, as a results row's `case` cell or gdsbench sweep --dry-run prints it, e.g. "
        "engine=dcp_fast,pattern=save,world_size=8,checkpoint_size=16G,threads=4",
    )
    p.add_argument("--checkpoint", dest="path", required=True, help="checkpoint directory (shared by all nodes)")
    p.add_argument("--out", required=True, help="where rank 0 writes ranks.json")
    p.add_argument(
        "--workload-file",
        help="a torch.save state dict every rank maps (else each node generates the case's workload preset at its "
        "checkpoint_size)",
    )
    p.add_argument("--warmup", type=int, default=1, help="unmeasured saves before the measured one")
    p.add_argument(
        "--stage",
        default="",
        help="for a case of several launches, which launch this is (the engine's rank half names them)",
    )
    p.add_argument(
        "--rendezvous",
        default="",
        help="HOST:PORT where rank 0 listens for the others (MASTER_ADDR/MASTER_PORT, where the launcher set none; "
        "':PORT' under srun: the step's first node)",
    )
    p.add_argument(
        "--join-timeout",
        type=float,
        default=1800.0,
        help="seconds a rank waits for every other to join, and for any collective (a node that never joins)",
    )
    return p


def parse(argv: list[str]) -> RankJob:
    """The job alone (parse_with_args)."""
    return parse_with_args(argv)[0]


def parse_with_args(argv: list[str]) -> tuple[RankJob, argparse.Namespace]:
    """The job: the case, from its key (parsed by the config's own keys, every value it leaves out at its
    default), and where to work."""
    p = parser()
    args = p.parse_args(argv)
    try:
        case = config.case_from_key(args.case)
    except ConfigError as exc:
        p.error(str(exc))
    if case.engine not in ranked_engines():
        p.error(f"--case: engine {case.engine!r} has no ranks (engines with ranks: {', '.join(ranked_engines())})")
    job = RankJob.from_case(case, args.path, args.out, args.workload_file, args.warmup, args.stage)
    if args.workload_file is None and job.checkpoint_size is None and not job.kind.own_tensors:
        p.error(
            "--case: name checkpoint_size (each node generates the workload preset at that size), or give "
            "--workload-file"
        )
    return job, args


def main(argv: list[str]) -> int:
    """Parse the job, place this rank as its launcher says (torchrun, srun, mpirun, a Kubernetes Indexed Job),
    then run it."""
    job, args = parse_with_args(argv)
    try:
        os.environ.update(rank_env.torch_variables(os.environ, job.world_size, args.rendezvous, first_node))
    except rank_env.RankEnvError as exc:
        raise SystemExit(f"gdsbench.cli_rank: {exc}") from None
    return rank.execute(job, rank_half(job.engine), args.join_timeout)


def first_node() -> str:
    """The rendezvous host where only its port was given: the Slurm step's first node."""
    return rank_env.slurm_first_node(os.environ)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main(sys.argv[1:]))
