"""Where a tiered_ranks rank's tiers live, and a restarted job's restore checked (the ladder's launches share them:
ranks/peer_ladder.py's loop and ranks/peer_kill.py's kill and restart)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from gdsbench.runners.checkpoint.distributed import SHM
from gdsbench.runners.checkpoint.rank_job import RankJob
from gdsbench.runners.checkpoint.ranks.state import same


def node_root(job: RankJob, node: int) -> Path:
    """This run's RAM folder of a node: in the run's private folder of /dev/shm, named as the last part of the
    run's checkpoint location is (tiered_ranks names both alike)."""
    return SHM / Path(job.path).name / f"node{node}"


def locations(job: RankJob, rank: int, node: int) -> list[str]:
    """This rank's tiers, nearest first, as the case's `tiers` names them."""
    root = node_root(job, node)
    durable = f"{job.path}/rank{rank}"  # a folder of the sweep's directory, or a prefix of the case's bucket
    where = {"memory": f"memory://{root}/own{rank}", "peer": f"peer://{root}", "local": durable, "s3": durable}
    return [where[name] for name in job.tiers.split("+")]


def timed_restore(
    job: RankJob, rank: int, node: int, state: dict[str, Any], newest: int, expected: int, options: Any
) -> tuple[float, Any]:
    """A restarted job's restore on this rank (a new TieredCheckpointer): its seconds and record; RuntimeError where
    it is not the newest step from the `expected` tier, or its tensors differ from the saved ones."""
    from ckptio import TieredCheckpointer
    from ckptio.records import Restored

    with TieredCheckpointer(locations(job, rank, node), options=options, require_durable=False) as ckpt:
        started = time.perf_counter()
        loaded = ckpt.load()
        seconds = time.perf_counter() - started
        found = ckpt.last
    assert isinstance(found, Restored)
    if (found.step, found.tier) != (newest, expected):
        skipped = "; ".join(f"tier {s.tier} step {s.step}: {s.reason}" for s in found.skipped) or "none"
        raise RuntimeError(
            f"rank {rank}: restored step {found.step} from tier {found.tier}, expected step {newest} from tier "
            f"{expected}; skipped: {skipped}"
        )
    wrong = same(loaded, state)
    if wrong:
        raise RuntimeError(f"rank {rank}: restored tensor {wrong!r} differs from the one saved")
    return seconds, found


def lost_node() -> int:
    """The node a fault loses: the last one (the launcher's LOCAL_WORLD_SIZE ranks a node)."""
    import torch.distributed as dist

    return dist.get_world_size() // ranks_per_node() - 1


def ranks_per_node() -> int:
    """The ranks of a node, as the launcher says."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", "1"))


def lose_ram(job: RankJob, node: int) -> None:
    """This node's RAM folder removed (its own copies and those it held), by the node's first rank: the node lost."""
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        shutil.rmtree(node_root(job, node), ignore_errors=True)


def source_of(rank: int) -> int:
    """Whose copies `rank` holds: the same local rank on the node before (the peer tier's ring)."""
    import torch.distributed as dist

    return (rank - ranks_per_node()) % dist.get_world_size()


def held_folder(job: RankJob, node: int, rank: int, source: int) -> Path:
    """Where `rank` (on `node`) holds the peer copies of `source`'s checkpoints."""
    return node_root(job, node) / f"rank-{rank}" / f"of-rank-{source}"
