"""One rank of a distributed checkpoint case: what torchrun starts on every rank of every node.

    torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d --rdzv-endpoint=node0:29500 --rdzv-id=ck1 \
        -m gdsbench.runners.checkpoint.rank --checkpoint /shared/ckpt --out /tmp/ck1 \
        --case engine=dcp_fast,pattern=save,world_size=8,workload=llama3-8b,checkpoint_size=4G

The case is its key, as a results row's `case` cell holds it (a sweep passes its cases so): the config's own
keys parse it and fill in every value it leaves out. The engine is `dcp` (DCP's FileSystemWriter/Reader) or
`dcp_fast` (ckptio.Writer/Reader). The workload is a torch.save file every rank maps (--workload-file: the
sweep writes it to /dev/shm once), or the case's preset, which each node's first rank generates into /dev/shm
for the node's ranks.
Each rank takes its share (`layout`: sharded = every tensor Shard(0) as FSDP keeps it; replicated = the
whole model on every rank as DDP keeps it), saves or loads it between two barriers; a load is checked
against the workload before it counts. Rank 0 gathers every rank's figures into `<out>/ranks.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from gdsbench.runners.resources import Usage


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


def same(loaded: dict[str, Any], state: dict[str, Any]) -> str | None:
    """None when every local tensor of `loaded` equals the workload's, else the first that differs."""
    for name, want in state.items():
        got = loaded[name]
        a, b = (got.to_local(), want.to_local()) if isinstance(want, DTensor) else (got, want)
        if a.shape != b.shape or not torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)):
            return name
    return None


def writer(job: dict[str, Any]) -> Any:
    """The engine's storage writer for the job."""
    if job["engine"] == "dcp":
        extensions = [_zstd()] if job["compression"] == "zstd" else None
        return dcp.FileSystemWriter(job["path"], thread_count=job["threads"], sync_files=True, _extensions=extensions)
    from ckptio import IOOptions, Writer

    return Writer(job["path"], options=IOOptions(threads=job["threads"]), compression=job["compression"])


def reader(job: dict[str, Any]) -> Any:
    """The engine's storage reader for the job."""
    if job["engine"] == "dcp":
        return dcp.FileSystemReader(job["path"])
    from ckptio import IOOptions, Reader

    return Reader(job["path"], options=IOOptions(threads=job["threads"]), broadcast=job.get("broadcast", False))


def _zstd() -> Any:
    """DCP's own zstd stream extension."""
    from torch.distributed.checkpoint._extension import ZStandard

    return ZStandard()


def start_save(job: dict[str, Any], state: dict[str, Any], storage: Any, planner: Any, group: Any = None) -> Any:
    """Save as the case says: dcp.save (None once durable), or dcp.async_save with the case's executor and,
    where given, its own process group (the future of the background save: a plain Future, both writers
    stage synchronously)."""
    if not job["async"]:
        dcp.save(state, storage_writer=storage, planner=planner)
        return None
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    kind = AsyncCheckpointerType.PROCESS if job["executor"] == "process" else AsyncCheckpointerType.THREAD
    return dcp.async_save(state, storage_writer=storage, planner=planner, process_group=group,
                          async_checkpointer_type=kind)  # fmt: skip


def save_once(job: dict[str, Any], state: dict[str, Any], storage: Any, planner: Any) -> tuple[float, float]:
    """One save between barriers: (seconds the caller was blocked, seconds until it was durable)."""
    dist.barrier()
    started = time.perf_counter()
    future = start_save(job, state, storage, planner)
    blocked = time.perf_counter() - started
    if future is not None:
        future.result()
    dist.barrier()
    return blocked, time.perf_counter() - started


def host_copy_seconds(state: dict[str, Any]) -> float:
    """The reference for async blocking: copying this rank's tensors into existing host memory (one buffer
    the size of the largest, touched before and reused, as staging buffers are: no second copy of the model)."""
    local = [(t.to_local() if isinstance(t, DTensor) else t).reshape(-1).view(torch.uint8) for t in state.values()]
    local = [t for t in local if t.numel()]
    buffer = torch.empty(max((t.numel() for t in local), default=0), dtype=torch.uint8)
    for t in local:  # every source page read once, the buffer faulted in
        buffer[: t.numel()].copy_(t)
    started = time.perf_counter()
    for t in local:
        buffer[: t.numel()].copy_(t)
    return time.perf_counter() - started


def train_loop(job: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """The training loop of a train case on this rank: steps in lockstep (a gradient all-reduce per step),
    a checkpoint every `interval` steps (async_save on a gloo group of its own, so its collectives never
    meet the step's), then a restore from the page-cache state `cache` plus one step, verified."""
    from gdsbench.runners.checkpoint import train
    from gdsbench.runners.checkpoint.conditions import set_cache

    compute, gradient = train.Step(job["step_time"]), torch.zeros(1)

    def step() -> None:
        compute()
        dist.all_reduce(gradient)

    storage, planner = writer(job), DefaultSavePlanner(enable_plan_caching=True)
    group = dist.new_group(backend="gloo") if job["async"] else None

    dist.barrier()
    with Usage() as usage:
        times = train.run_loop(
            step, job["steps"], job["interval"], lambda: start_save(job, state, storage, planner, group)
        )
    dist.barrier()
    if dist.get_rank() == 0:
        set_cache([p for p in Path(job["path"]).iterdir() if p.is_file()], job["cache"])
    dest = destination(state)
    dist.barrier()
    started = time.perf_counter()
    dcp.load(dest, storage_reader=reader(job))
    step()
    restore = time.perf_counter() - started
    wrong = same(dest, state)
    if wrong:
        raise RuntimeError(f"rank {dist.get_rank()}: restored tensor {wrong!r} differs from the saved one")
    loop = {"steps": times.steps, "draining": times.draining, "stalls": times.stalls, "durable": times.durable}
    return {**loop, "restore_seconds": restore, "step_reps": compute.reps, **usage.columns()}


def run(job: dict[str, Any]) -> dict[str, Any]:
    """Save (after `warmup` unmeasured saves) or load this rank's share, or train; return its figures."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    full = torch.load(job["workload_path"], map_location="cpu", weights_only=True, mmap=True)
    state = shares(full, job["layout"], mesh)
    if job["pattern"] == "train":
        return train_loop(job, state)
    if job["pattern"] == "load":
        dest = destination(state)
        storage = reader(job)
        with Usage() as usage:
            dist.barrier()
            started = time.perf_counter()
            dcp.load(dest, storage_reader=storage)
            dist.barrier()
            seconds = time.perf_counter() - started
        wrong = same(dest, state)
        if wrong:
            raise RuntimeError(f"rank {dist.get_rank()}: loaded tensor {wrong!r} differs from the saved one")
        return {"seconds": seconds, "read_bytes": getattr(storage, "read_bytes", None), **usage.columns()}
    figures = {"host_copy_seconds": host_copy_seconds(state)} if job["async"] else {}
    storage, planner = writer(job), DefaultSavePlanner(enable_plan_caching=True)
    for _ in range(job["warmup"]):
        save_once(job, state, storage, planner)
    with Usage() as usage:
        blocked, seconds = save_once(job, state, storage, planner)
    figures.update(seconds=seconds, blocking_seconds=blocked, **usage.columns())
    stats = getattr(storage, "stats", None)
    if stats is not None:
        figures.update(stored_bytes=stats.stored_bytes, raw_bytes=stats.raw_bytes, rank_bytes=stats.rank_bytes,
                       cached_plans=stats.cached_plans, staging_bytes=stats.staging_bytes)  # fmt: skip
    return figures


def failure(exc: BaseException) -> str:
    """One line saying why a rank failed (DCP wraps every rank's error in a CheckpointException)."""
    failures = getattr(exc, "failures", None)
    if failures:
        exc = next(iter(failures.values()))[0]
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def parse(argv: list[str]) -> dict[str, Any]:
    """The job: the case, from its key (parsed by the config's own keys, every value it leaves out at its
    default), and where to work."""
    p = argparse.ArgumentParser(prog="python -m gdsbench.runners.checkpoint.rank", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--case", required=True,
                   help="the case's key, as a results row's `case` cell or gdsbench sweep --dry-run prints it, e.g. "
                        "engine=dcp_fast,pattern=save,world_size=8,checkpoint_size=16G,threads=4")  # fmt: skip
    p.add_argument("--checkpoint", dest="path", required=True, help="checkpoint directory (shared by all nodes)")
    p.add_argument("--out", required=True, help="where rank 0 writes ranks.json")
    p.add_argument("--workload-file", help="a torch.save state dict every rank maps (else each node generates the "
                   "case's workload preset at its checkpoint_size)")  # fmt: skip
    p.add_argument("--warmup", type=int, default=1, help="unmeasured saves before the measured one")
    args = p.parse_args(argv)
    from gdsbench import config
    from gdsbench.cases import plain
    from gdsbench.errors import ConfigError

    try:
        case = config.case_from_key(args.case)
    except ConfigError as exc:
        p.error(str(exc))
    if case.engine not in ("dcp", "dcp_fast"):
        p.error(f"--case: engine {case.engine!r} has no ranks (dcp or dcp_fast)")
    if args.workload_file is None and case.get("checkpoint_size") is None:
        p.error("--case: name checkpoint_size (each node generates the workload preset at that size), "
                "or give --workload-file")  # fmt: skip
    params = {name: plain(value) for name, value in case.params}
    return {**params, "engine": case.engine, "path": args.path, "out": args.out,
            "workload_file": args.workload_file, "warmup": args.warmup}  # fmt: skip


def node_workload(job: dict[str, Any]) -> Path:
    """A preset's state dict in this node's /dev/shm, generated by the node's first rank for all of them."""
    from gdsbench import workloads

    run_id, node = os.environ.get("TORCHELASTIC_RUN_ID", "local"), os.environ.get("GROUP_RANK", "0")
    path = Path("/dev/shm") / f"gdsbench-workload.{run_id}.n{node}.{job['workload']}.{job['seed']}.pt"
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        spec = workloads.WorkloadSpec(job["workload"], job["checkpoint_size"], job["dtype"], job["seed"])
        torch.save(dict(workloads.get(spec).tensors), path)
        workloads.release()
    dist.barrier()
    return path


def quiet_but_direct() -> None:
    """Ranks print no warnings, but an O_DIRECT fallback is an error: a row that says O_DIRECT must not
    measure the page cache."""
    from ckptio.errors import DirectIOFallbackWarning

    warnings.simplefilter("ignore")
    warnings.simplefilter("error", DirectIOFallbackWarning)


def main(argv: list[str]) -> int:
    """Join the process group torchrun set up (gloo on CPU, NCCL beside it on CUDA), run the job, gather
    every rank's figures (or errors) on rank 0, which writes them for the launcher."""
    from torch.distributed.checkpoint.api import CheckpointException

    job = parse(argv)
    quiet_but_direct()
    dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    if dist.get_world_size() != job["world_size"]:
        raise SystemExit(f"--case says world_size={job['world_size']}, torchrun started {dist.get_world_size()} ranks")
    rank, generated = dist.get_rank(), None
    if job["workload_file"] is None:
        generated = node_workload(job)
    job["workload_path"] = str(job["workload_file"] or generated)
    try:
        figures = {"rank": rank, "host": socket.gethostname(), **run(job)}
    except (Exception, CheckpointException) as exc:
        figures = {"rank": rank, "host": socket.gethostname(), "error": failure(exc)}
        # at once, before the gather: if a peer never reaches it (stuck in a collective this rank left), the
        # launcher's timeout still finds why this rank left
        Path(job["out"]).mkdir(parents=True, exist_ok=True)
        (Path(job["out"]) / f"rank-{rank}.error").write_text(figures["error"])
    gathered: list[Any] | None = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(figures, gathered)
    if gathered is not None:
        Path(job["out"]).mkdir(parents=True, exist_ok=True)
        (Path(job["out"]) / "ranks.json").write_text(json.dumps(gathered))
    dist.barrier()
    if generated is not None and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        generated.unlink(missing_ok=True)
    dist.destroy_process_group()
    return 1 if "error" in figures else 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main(sys.argv[1:]))
