"""Rank programs for the multi-process DCP tests: real torch.distributed (gloo on 127.0.0.1), the ranks forked
by torch.multiprocessing from a fork server. Each program asserts what it checks; a failed assertion fails the
start."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from ckptio import IOOptions, Reader, Writer
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from gdsbench.launchers import free_port
from tests.helpers import forkserver

SMALL = IOOptions(chunk_bytes=64 << 10, buffer_bytes=256 << 10, threads=2)


Step = tuple[Callable[..., None], int, tuple[Any, ...]]
World = tuple[int, list[Step]]


def run_worlds(worlds: list[World]) -> None:
    """Run each (world size, steps) in turn in one start of as many processes as the first world: the first
    ranks of the processes form each world as a fresh default process group (the others have left), so one
    start-up serves every world a module needs. Sizes never grow: a process that left does not return. The
    processes are forks of the tests' fork server (torch, DCP and ckptio imported once), not interpreters."""
    sizes = [size for size, _ in worlds]
    assert sizes == sorted(sizes, reverse=True), sizes
    forkserver()
    mp.start_processes(_worlds, args=(worlds, free_port()), nprocs=sizes[0], start_method="forkserver")


def _worlds(rank: int, worlds: list[World], port: int) -> None:
    """Join every world this rank is in, in turn, running its steps; each world's rank 0 picks the next's port."""
    for size, steps in worlds:
        if rank >= size:
            return
        port = _entry(rank, _steps, size, port, (steps,))


def _steps(rank: int, world_size: int, steps: list[Step]) -> None:
    """Every step on its group of ranks, all ranks meeting after each."""
    sizes = sorted({ranks for _, ranks, _ in steps})
    groups = {n: dist.group.WORLD if n == world_size else dist.new_group(list(range(n))) for n in sizes}
    for program, ranks, args in steps:
        forget_plans()
        if rank < ranks:
            program(rank, ranks, *args, group=groups[ranks])
        dist.barrier()


def forget_plans() -> None:
    """Empty DCP's plan cache, as a fresh process has it. DCP 2.13 keeps one cache per process, keyed by the
    planner's class name only: a save at another world size or of another model in the same process would
    meet the previous save's plans (DCP's plan validation then refuses the save)."""
    from torch.distributed.checkpoint.planner import SavePlanner

    for name in dir(SavePlanner):
        cache = getattr(SavePlanner, name)
        if name.startswith("_cached_") and isinstance(cache, dict):
            cache.clear()


def _entry(rank: int, program: Callable[..., None], world_size: int, port: int, args: tuple[Any, ...]) -> int:
    """One rank: join the group on 127.0.0.1, run the program, leave together (a rank that tears its group
    down while a peer still sends to it can abort gloo: `terminate called without an active exception`).
    Returns a port free on rank 0 (a next world's rendezvous)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        program(rank, world_size, *args)
        ports = [free_port() if rank == 0 else 0]
        dist.broadcast_object_list(ports, src=0)
        dist.barrier()
        return int(ports[0])
    finally:
        dist.destroy_process_group()


def full_state(seed: int = 0) -> dict[str, Any]:
    """The whole model every test saves: matrices to shard, replicated and plain tensors, odd sizes and
    dtypes, an empty tensor and non-tensor state (a step counter, an RNG state)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "a": torch.randn(64, 24, generator=g).to(torch.bfloat16),
        "b": torch.randn(33, 8, generator=g),  # 33 rows: uneven shards at 2 and 4 ranks
        "h": torch.randn(10, 3, generator=g).half(),
        "r": torch.randn(16, generator=g),  # replicated on every rank
        "ids": torch.randint(0, 1 << 40, (40,), generator=g),  # plain (int64): DCP dedups it
        "empty": torch.empty(0, 5),
        "step": 1234,
        "rng": torch.Generator().manual_seed(seed + 1).get_state(),
    }


SHARDED = ("a", "b", "h")
REPLICATED = ("r",)


def distributed(state: dict[str, Any], world_size: int, group: Any = None) -> dict[str, Any]:
    """The state as a rank holds it: Shard(0) DTensors, Replicate() DTensors, plain tensors and values (over
    `group`'s ranks when given)."""
    mesh = DeviceMesh.from_group(group, "cpu") if group is not None else init_device_mesh("cpu", (world_size,))
    out = dict(state)
    for k in SHARDED:
        out[k] = distribute_tensor(state[k], mesh, [Shard(0)])
    for k in REPLICATED:
        out[k] = distribute_tensor(state[k], mesh, [Replicate()])
    return out


def zeros_like_state(state: dict[str, Any]) -> dict[str, Any]:
    """A destination shaped like a rank's state, zero-filled, plain values reset."""
    out: dict[str, Any] = {}
    for k, v in state.items():
        if isinstance(v, DTensor):
            out[k] = distribute_tensor(torch.zeros_like(v.full_tensor()), v.device_mesh, v.placements)
        elif isinstance(v, torch.Tensor):
            out[k] = torch.zeros_like(v)
        else:
            out[k] = 0
    return out


def assert_equal_full(loaded: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every tensor bit-exact as a whole (DTensors gathered), every plain value equal."""
    for k, want in expected.items():
        got = loaded[k]
        if isinstance(got, DTensor):
            got = got.full_tensor()
        if isinstance(want, torch.Tensor):
            assert got.dtype == want.dtype and got.shape == want.shape, k
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)) if want.numel() else True, k
        else:
            assert got == want, (k, got, want)


def save_program(rank: int, world_size: int, path: str, compression: str, seed: int, group: Any = None) -> None:
    """Save the distributed state at this world size, through Writer, with plan caching on."""
    writer = Writer(path, compression=compression, options=SMALL)
    planner = DefaultSavePlanner(enable_plan_caching=True)
    state = distributed(full_state(seed), world_size, group)
    dcp.save(state, storage_writer=writer, planner=planner, process_group=group)
    _report(path, f"save-r{rank}", {"stored": writer.stats.stored_bytes, "ranks": writer.stats.rank_bytes})


def async_program(
    rank: int, world_size: int, path: str, seed: int, executor: str = "thread", group: Any = None
) -> None:
    """Two async saves through one Writer; the directory then holds the second state. On the thread executor
    the first is awaited before the second starts (training_loop_program covers the overlap); on the
    process executor the second starts while the first may still be written by the executor's process, so
    the Writer must stage it into new buffers."""
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    kind = AsyncCheckpointerType.PROCESS if executor == "process" else AsyncCheckpointerType.THREAD
    writer = Writer(path, options=SMALL)
    first = dcp.async_save(
        distributed(full_state(seed + 100), world_size), storage_writer=writer, async_checkpointer_type=kind
    )
    if executor == "thread":
        first.result()
    second = dcp.async_save(
        distributed(full_state(seed), world_size), storage_writer=writer, async_checkpointer_type=kind
    )
    first.result()
    second.result()
    writer.close()


def training_loop_program(rank: int, world_size: int, path: str, steps: int, overlap: bool, group: Any = None) -> None:
    """A training loop's checkpointing: each step starts an async save, then does what a step does on the
    main thread (a barrier, an all_reduce of gradients) before, or while (`overlap`: the next save starts
    before this one is awaited), the save runs in the background; the last state must then load whole."""
    writer = Writer(path, options=SMALL)
    pending = None
    for step in range(steps):
        future = dcp.async_save(distributed(full_state(step), world_size), storage_writer=writer)
        dist.barrier()
        grads = torch.full((1024,), float(rank + step))
        dist.all_reduce(grads)
        assert grads[0].item() == sum(r + step for r in range(world_size))
        if overlap:
            if pending is not None:
                pending.result()
            pending = future
        else:
            future.result()
    if pending is not None:
        pending.result()
    writer.close()
    load_program(rank, world_size, path, steps - 1, False)


def load_program(
    rank: int, world_size: int, path: str, seed: int, broadcast: bool, group: Any = None, record: bool = True
) -> None:
    """Load at this world size (resharding from whatever was saved) and check it against the full state; `record`
    leaves the bytes read beside the checkpoint (a local one)."""
    expected = full_state(seed)
    dest = zeros_like_state(distributed(expected, world_size, group))
    reader = Reader(path, options=SMALL, broadcast=broadcast)
    dcp.load(dest, storage_reader=reader, process_group=group)
    assert_equal_full(dest, expected)
    if record:
        _report(path, f"load-r{rank}", {"read": reader.read_bytes})


def note_reads(rank: int, world_size: int, path: str, group: Any = None) -> None:
    """Keep the bytes this rank's last load read under another name, before the next load replaces them."""
    _report(
        path,
        f"reads-r{rank}",
        {"read": json.loads((Path(path).parent / f"{Path(path).name}.load-r{rank}.json").read_text())["read"]},
    )


def caching_program(rank: int, world_size: int, path: str, group: Any = None) -> None:
    """Two saves of an unchanged structure through one planner: the second comes from DCP's plan cache."""
    writer = Writer(path, options=SMALL)
    planner = DefaultSavePlanner(enable_plan_caching=True)
    state = distributed(full_state(3), world_size, group)
    dcp.save(state, storage_writer=writer, planner=planner, process_group=group)
    first = writer.stats.cached_plans
    dcp.save(state, storage_writer=writer, planner=planner, process_group=group)
    if rank == 0:
        _report(path, "plans", {"first": first, "cached": writer.stats.cached_plans, "plans": writer.stats.plans})


def replicated_program(rank: int, world_size: int, path: str, group: Any = None) -> None:
    """Many plain (replicated) tensors of uneven sizes: DCP's dedup spreads their writing over the ranks."""
    g = torch.Generator().manual_seed(7)
    state = {f"t{i}": torch.randn(1000 + 997 * (i % 5), generator=g) for i in range(24)}
    writer = Writer(path, options=SMALL)
    dcp.save(state, storage_writer=writer, process_group=group)
    if rank == 0:
        _report(path, "rank-bytes", {"ranks": writer.stats.rank_bytes})


def s3_program(rank: int, world_size: int, url: str, env: dict[str, str], report: str, group: Any = None) -> None:
    """Two saves to an object store at this world size, then a load checked bit-exact; rank 0 leaves in `report`
    the objects under the prefix after each save. `env` holds the store's endpoint and keys (the fork server's
    environment, which the ranks inherit, predates them)."""
    from ckptio.s3.client import Bucket
    from ckptio.s3.location import parse

    os.environ.update(env)
    os.environ.pop("AWS_ENDPOINT_URL_S3", None)
    location, listed = parse(url), []
    for seed in (5, 6):
        writer = Writer(url, options=SMALL)
        dcp.save(distributed(full_state(seed), world_size, group), storage_writer=writer, process_group=group)
        writer.close()
        listed.append(sorted(s.key.rpartition("/")[2] for s in Bucket(location.bucket).listing(location.key(""))))
    load_program(rank, world_size, url, 6, False, group, record=False)
    if rank == 0:
        Path(report).write_text(json.dumps(listed))


def _report(path: str, name: str, facts: dict[str, Any]) -> None:
    """Leave a rank's figures beside the checkpoint for the test to read."""
    (Path(path).parent / f"{Path(path).name}.{name}.json").write_text(json.dumps(facts))
