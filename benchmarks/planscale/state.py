"""The state dict: Llama-3-8B-like (gdsbench's `llama3-8b` preset: 291 tensors at their real row counts,
`--layers` to change the 32 layers) with every 2-D tensor cut to 2 columns, tiny in bytes (planning does not
depend on them), held as FSDP2 does: every tensor a DTensor Shard(0) over a 1-D mesh of N ranks (uneven at
1,024 ranks for the 128,256-row vocabulary: DTensor gives the last ranks empty shards). Matrices bf16, the rest
fp32. The mesh of rank r of N comes from torch's fake process group.

Private torch APIs: `torch.distributed.tensor._utils._compute_local_shape_and_global_offset` (DTensor's shard
arithmetic) and `torch.testing._internal.distributed.fake_pg` (the "fake" backend and its FakeStore).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.testing._internal.distributed.fake_pg import FakeStore

from gdsbench.workloads import PRESETS, Layout, tensor_plan

PRESET = "llama3-8b"
COLUMNS = 2  # every 2-D tensor keeps its real rows and this many columns: tiny, same plans
DTYPES = {"matrix": torch.bfloat16, "embedding": torch.float32, "norm": torch.float32, "bias": torch.float32}


@dataclass(frozen=True)
class Spec:
    """One tensor of the model: its name, global shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


def model_specs(layers: int | None = None, preset: str = PRESET) -> list[Spec]:
    """The preset's tensors at their real row counts, 2-D ones cut to COLUMNS columns (`layers`: default 32)."""
    p = PRESETS[preset]
    plan = tensor_plan(p, Layout(p.name, p.dims, p.layers if layers is None else layers, 0))
    return [Spec(name, (shape[0],) + (COLUMNS,) * (len(shape) - 1), DTYPES[role]) for name, shape, role in plan]


@functools.lru_cache(maxsize=1 << 16)
def shard_of(shape: tuple[int, ...], world: int, rank: int) -> tuple[torch.Size, torch.Size]:
    """(sizes, offsets) of rank's Shard(0) chunk of a tensor, by DTensor's own arithmetic."""
    sizes, offsets = _compute_local_shape_and_global_offset(shape, (world,), [rank], [Shard(0)])
    return torch.Size(sizes), torch.Size(offsets)


def local_tensor(spec: Spec, world: int, rank: int) -> torch.Tensor:
    """Rank's shard with known values (each row holds its global row number), to check loads."""
    sizes, offsets = shard_of(spec.shape, world, rank)
    rows = torch.arange(offsets[0], offsets[0] + sizes[0], dtype=torch.float32) if sizes[0] else torch.zeros(0)
    return rows.reshape((-1,) + (1,) * (len(sizes) - 1)).expand(sizes).to(spec.dtype).contiguous()


def dtensor_state(specs: list[Spec], mesh: DeviceMesh, world: int, rank: int) -> dict[str, Any]:
    """This rank's state dict: every tensor a Shard(0) DTensor, as FSDP keeps it."""
    state: dict[str, Any] = {}
    for spec in specs:
        stride = torch.empty(spec.shape, device="meta").stride()
        local = local_tensor(spec, world, rank)
        state[spec.name] = DTensor.from_local(
            local, mesh, [Shard(0)], run_check=False, shape=torch.Size(spec.shape), stride=stride
        )
    return state


def destination(state: dict[str, Any]) -> dict[str, Any]:
    """Zero-filled DTensors shaped and placed like `state`, as a model's are before a restart."""
    return {
        name: DTensor.from_local(
            torch.zeros_like(t.to_local()),
            t.device_mesh,
            t.placements,
            shape=t.shape,
            stride=t.stride(),
            run_check=False,
        )
        for name, t in state.items()
    }


def check_loaded(loaded: dict[str, Any], state: dict[str, Any]) -> None:
    """Every local shard loaded equals the saved one (bitwise)."""
    for name, want in state.items():
        if not torch.equal(loaded[name].to_local().view(-1), want.to_local().view(-1)):
            raise RuntimeError(f"loaded {name} differs from the saved shard")


@contextlib.contextmanager
def fake_group(world: int, rank: int = 0) -> Iterator[DeviceMesh]:
    """A fake process group as `rank` of `world` (no communication), and its 1-D CPU mesh."""
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield init_device_mesh("cpu", (world,))
    finally:
        dist.destroy_process_group()
