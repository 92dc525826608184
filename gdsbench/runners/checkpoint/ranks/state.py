"""What a rank holds: its share of the sweep's workload or an MLPerf geometry's tensors, a zeroed copy to load
into, and the check that a load brought back what was saved. Runs inside torchrun's ranks (torch imported)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from gdsbench import mlperf
from gdsbench.runners.checkpoint.rank_job import RankJob


def shares(full: dict[str, torch.Tensor], layout: str, mesh: DeviceMesh) -> dict[str, Any]:
    """This rank's state: Shard(0) DTensors (0-d tensors replicated), or the plain tensors themselves.

    Shards are scattered into memory of their own, as a trained model's are (DCP 2.13's process executor
    hangs on shards that are views of the mapped workload)."""
    if layout == "replicated":
        return dict(full)
    return {name: distribute_tensor(t, mesh, [Shard(0)] if t.dim() else [Replicate()]) for name, t in full.items()}


def destination(state: dict[str, Any]) -> dict[str, Any]:
    """Zero-filled tensors shaped and placed like `state`, as a model's are before a restart."""
    out: dict[str, Any] = {}
    for name, t in state.items():
        if isinstance(t, DTensor):
            local = torch.zeros_like(t.to_local())
            out[name] = DTensor.from_local(local, t.device_mesh, t.placements, shape=t.shape, stride=t.stride())
        else:
            out[name] = torch.zeros_like(t)
    return out


def same(loaded: Mapping[str, Any], state: dict[str, Any]) -> str | None:
    """None when every local tensor of `loaded` equals the workload's (a DTensor's local shard on either side),
    else the first that differs."""
    got_local, want_local = local_tensors(loaded), local_tensors(state)
    for name, b in want_local.items():
        a = got_local[name]
        if a.shape != b.shape or not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)):
            return name
    return None


def local_tensors(state: Mapping[str, Any]) -> dict[str, Any]:
    """This rank's own tensors of `state` (a DTensor's local shard)."""
    return {name: t.to_local() if isinstance(t, DTensor) else t for name, t in state.items()}


def rank_state(job: RankJob, rank: int) -> tuple[dict[str, Any], int | None]:
    """What `rank` saves, and its bytes when they are its own alone: the tensors its workload's kind has it draw
    (an MLPerf geometry's), or this rank's share of the mapped workload (a replicated model's bytes are every
    rank's)."""
    drawn = job.kind.rank_tensors(rank, dist.get_world_size(), job.scale)
    if drawn is not None:
        return drawn_state(drawn, rank, job.seed), sum(t.nbytes for t in drawn)
    state, sharded = preset_state(job)
    own = sum(t.nbytes for t in local_tensors(state).values()) if sharded else None
    return state, own


def preset_state(job: RankJob) -> tuple[dict[str, Any], bool]:
    """This rank's share of the mapped workload (the job's workload file), and whether it is a share of its own
    (not a replica)."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    full = torch.load(str(job.workload_file), map_location="cpu", weights_only=True, mmap=True)
    return shares(full, job.layout, mesh), job.layout == "sharded"


def drawn_state(tensors: list[mlperf.Tensor], rank: int, seed: int) -> dict[str, torch.Tensor]:
    """A rank's own tensors (an MLPerf geometry's), uniform random values as DLIO draws them (torch.rand), seeded
    by rank and name, so any rank can rebuild another's to check a load. Names carry the rank: DCP would
    otherwise take equal names on several ranks for one replicated tensor."""
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
    state = {}
    for index, tensor in enumerate(tensors):
        generator = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + index)
        state[f"rank{rank}.{tensor.name}"] = torch.rand(tensor.numel, dtype=dtypes[tensor.dtype], generator=generator)
    return state
