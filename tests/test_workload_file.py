"""The distributed engines' workload file in /dev/shm (everyone's): written in a private folder made afresh, never
through a link another user planted at the name it used to have."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gdsbench import config, runners
from gdsbench.runners.base import RunContext
from tests.untrusted import plant_link, plants_as_nobody, victim

pytestmark = [pytest.mark.needs_torch, plants_as_nobody]
SHM = Path("/dev/shm")


def private(path: Path) -> bool:
    """`path` is a regular file of ours in a folder of ours that no one else can enter."""
    folder, info = os.lstat(path.parent), os.lstat(path)
    return stat.S_ISREG(info.st_mode) and info.st_uid == folder.st_uid == os.geteuid() and folder.st_mode & 0o077 == 0


def test_the_sweeps_workload_file_is_private_and_follows_no_planted_link(tmp_path: Path) -> None:
    """`nobody` plants a link where the sweep process wrote its workload (the name a pid predicts): the root-owned
    file it points at stays as it was, the link stays, the workload lands in a private folder removed at cleanup."""
    document = {
        "checkpoint_size": "1M",
        "workload": "llama3-8b",
        "dtype": "mixed",
        "matrix": {"engine": ["dcp_fast"], "pattern": ["save"], "transfer": ["CPU_ONLY"]},
    }
    case = config.from_dict(document, "t.yaml").cases[0]
    ctx = RunContext(directory=tmp_path, file_size=1 << 20)
    target = victim(tmp_path)
    planted = SHM / f"gdsbench-workload.{os.getpid()}.llama3-8b.1M.mixed.s0.pt"
    plant_link(planted, target)
    try:
        path, facts = runners.get("dcp_fast")._workload(case, ctx)
        assert target.read_bytes() == b"root's own bytes\n" and private(path) and facts.nbytes > 0
        ctx.resources.cleanup()
        assert not path.parent.exists() and planted.is_symlink()
    finally:
        planted.unlink()


def test_a_nodes_generated_workload_is_private_and_follows_no_planted_link(tmp_path: Path) -> None:
    """The same for the file a node's first rank generates for its ranks (no --workload-file: multi-node runs)."""
    import torch.distributed as dist

    from gdsbench.runners.checkpoint.rank_job import RankJob
    from gdsbench.runners.checkpoint.ranks import rank

    target = victim(tmp_path)
    planted = SHM / "gdsbench-workload.local.n0.llama3-8b.0.pt"
    plant_link(planted, target)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        where = {"engine": "dcp_fast", "pattern": "save", "path": "/ckpt", "out": "/out", "world_size": 1}
        options = {"layout": "sharded", "compression": "none", "asynchronous": False, "executor": "thread"}
        workload = {"workload": "llama3-8b", "checkpoint_size": 1 << 20, "dtype": "mixed", "seed": 0, "cache": "cold"}
        path = rank.node_workload(RankJob(**where, **options, **workload))
        assert target.read_bytes() == b"root's own bytes\n" and private(path) and planted.is_symlink()
        path.unlink()
        path.parent.rmdir()
    finally:
        dist.destroy_process_group()
        planted.unlink()
