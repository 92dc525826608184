"""One rank of a distributed checkpoint case: what the rank program (gdsbench.cli_rank, which torchrun starts on
every rank of every node) runs with its job (rank_job.RankJob).

What a rank saves and loads with is its engine's rank half (rank_half.py), which the rank program passes in:
a DCP storage layer (dcp, dcp_fast) or a file of each rank's own (torch_save_ranks).
The workload is a torch.save file every rank maps (--workload-file: the sweep writes it to /dev/shm once), or
the case's preset, which each node's first rank generates into /dev/shm for the node's ranks; each rank takes
its share (`layout`: sharded = every tensor Shard(0) as FSDP keeps it; replicated = the whole model on every
rank as DDP keeps it). Where the workload's kind says so (an MLPerf geometry: workload mlperf-llama3-8b, ...),
every rank draws its own tensors, and a load reads what the rank its kind names wrote (one node further on).
A phase saves or loads `checkpoints` checkpoints in a row (cycle.py), every rank timing its own part; a load
is checked against what was saved before it counts; before a load phase each node's first rank sets its page
cache as the case says. Rank 0 gathers every rank's figures into `<out>/ranks.json`.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import statistics
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultSavePlanner

from gdsbench.runners.checkpoint import cycle, io_options
from gdsbench.runners.checkpoint.conditions import set_cache
from gdsbench.runners.checkpoint.rank_half import RankHalf, StorageLayer, WholeJob, start_save
from gdsbench.runners.checkpoint.rank_job import RankJob
from gdsbench.runners.checkpoint.ranks import join
from gdsbench.runners.checkpoint.ranks.state import destination, local_tensors, preset_state, rank_state, same
from gdsbench.runners.resources import Usage


def options_used(storage: Any) -> dict[str, Any]:
    """The IOOptions a ckptio Writer or Reader ran with, as the rank's `io_options` figure (none for DCP's own
    storage layer and torch.save)."""
    options = getattr(storage, "options", None)
    return {} if options is None else {"io_options": io_options.used(options)}


def host_copy_seconds(state: dict[str, Any]) -> float:
    """The reference for async blocking: copying this rank's tensors into existing host memory (one buffer
    the size of the largest, touched before and reused, as staging buffers are: no second copy of the model)."""
    local = [t.reshape(-1).view(torch.uint8) for t in local_tensors(state).values()]
    local = [t for t in local if t.numel()]
    buffer = torch.empty(max((t.numel() for t in local), default=0), dtype=torch.uint8)
    for t in local:  # every source page read once, the buffer faulted in
        buffer[: t.numel()].copy_(t)
    started = time.perf_counter()
    for t in local:
        buffer[: t.numel()].copy_(t)
    return time.perf_counter() - started


def train_loop(job: RankJob, half: RankHalf, state: dict[str, Any]) -> dict[str, Any]:
    """The training loop of a train case on this rank: steps in lockstep (a gradient all-reduce per step),
    a checkpoint every `interval` steps (async_save on a gloo group of its own, so its collectives never
    meet the step's), then a restore from the page-cache state `cache` plus one step, verified."""
    from gdsbench.runners.checkpoint import train

    if not isinstance(half, StorageLayer):
        raise RuntimeError(f"{job.engine} has no DCP storage layer to train with")
    compute, gradient = train.Step(job.step_time), torch.zeros(1)

    def step() -> None:
        compute()
        dist.all_reduce(gradient)

    storage, planner = half.writer(job), DefaultSavePlanner(enable_plan_caching=True)
    group = dist.new_group(backend="gloo") if job.asynchronous else None

    dist.barrier()
    with Usage() as usage:
        times = train.run_loop(step, job.steps, job.interval, lambda: start_save(job, state, storage, planner, group))
    dist.barrier()
    if dist.get_rank() == 0:
        set_cache([p for p in Path(job.path).iterdir() if p.is_file()], job.cache)
    dest = destination(state)
    dist.barrier()
    started = time.perf_counter()
    dcp.load(dest, storage_reader=half.reader(job))
    step()
    restore = time.perf_counter() - started
    wrong = same(dest, state)
    if wrong:
        raise RuntimeError(f"rank {dist.get_rank()}: restored tensor {wrong!r} differs from the saved one")
    loop = {"steps": times.steps, "draining": times.draining, "stalls": times.stalls, "durable": times.durable}
    return {**loop, "restore_seconds": restore, "step_reps": compute.reps, **options_used(storage), **usage.columns()}


def run(job: RankJob, half: RankHalf | WholeJob) -> dict[str, Any]:
    """Train, or save (after `warmup` unmeasured saves) or load this rank's state `checkpoints` times in a row,
    with the engine's rank half (or the half's own job); return its figures."""
    if isinstance(half, WholeJob):
        return half.run(job)
    rank = dist.get_rank()
    if job.pattern == "train":
        return train_loop(job, half, preset_state(job)[0])
    directories = locations(job)
    if job.pattern == "load":
        return load_phase(job, half, directories)
    state, own = rank_state(job, rank)
    figures: dict[str, Any] = {"host_copy_seconds": host_copy_seconds(state)} if job.asynchronous else {}
    saving = half.saving(job, state, rank)
    storage = saving.storage
    for _ in range(job.warmup):
        saving.one(directories[0])
    with Usage() as usage:
        phase = cycle.run_phase(directories, saving.one, dist.barrier)
    figures.update(phase.figures(), blocking_seconds=statistics.fmean(phase.blocking), own_bytes=own, **usage.columns())
    figures.update(options_used(storage))
    stats = getattr(storage, "stats", None)
    if stats is not None:
        figures.update(
            stored_bytes=stats.stored_bytes,
            raw_bytes=stats.raw_bytes,
            rank_bytes=stats.rank_bytes,
            cached_plans=stats.cached_plans,
            staging_bytes=stats.staging_bytes,
        )
    return figures


def locations(job: RankJob) -> list[Any]:
    """Where each checkpoint of the phase lives: its directories, or the job's one `s3://` location."""
    if job.path.startswith("s3://"):
        return [job.path]
    return cycle.checkpoint_dirs(Path(job.path), job.checkpoints)


def load_phase(job: RankJob, half: RankHalf, directories: list[Any]) -> dict[str, Any]:
    """Load every checkpoint of the phase, each checked against what was saved; a rank reads what the rank its
    workload's kind names wrote (an MLPerf geometry's: one node further on; on one node, and for a preset: its own)."""
    rank = dist.get_rank()
    source = job.kind.source_rank(rank, dist.get_world_size(), int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    expected, own = rank_state(job, source)
    note = None if job.path.startswith("s3://") else set_node_cache(job)  # S3's caches: set before the ranks
    loading = half.loading(job, source, expected)
    storage = loading.storage

    def check(directory: Path) -> None:
        wrong = same(loading.loaded(), expected)
        if wrong:
            raise RuntimeError(f"rank {rank}: tensor {wrong!r} of {directory} differs from the one saved")

    with Usage() as usage:  # the checks are neither the phase's time nor its CPU
        one = lambda d: cycle.timed(lambda: loading.load(d))  # noqa: E731
        phase = cycle.run_phase(directories, one, dist.barrier, check, usage.paused)
    return {
        **phase.figures(),
        "own_bytes": own,
        "source_rank": source,
        "cache_note": note,
        "read_bytes": getattr(storage, "read_bytes", None),
        **options_used(storage),
        **usage.columns(),
    }


def set_node_cache(job: RankJob) -> str | None:
    """Before a load phase, each node's first rank makes the checkpoint's files cold or warm in its page cache
    (the case's `cache`); every rank waits for it. Rank 0 says how."""
    note = None
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        note = set_cache(sorted(p for p in Path(job.path).rglob("*") if p.is_file()), job.cache)
    dist.barrier()
    return note


def failure(exc: BaseException) -> str:
    """One line saying why a rank failed (DCP wraps every rank's error in a CheckpointException)."""
    failures = getattr(exc, "failures", None)
    if failures:
        exc = next(iter(failures.values()))[0]
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def node_workload(job: RankJob) -> Path:
    """A preset's state dict in this node's /dev/shm, generated by the node's first rank for all of them, in a
    private folder it makes there (an unguessable name, mode 0700: /dev/shm is everyone's); every rank learns
    its node's path."""
    from gdsbench import workloads
    from gdsbench.runners.checkpoint.distributed import SHM, create_private

    node, path = os.environ.get("GROUP_RANK", "0"), None
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        folder = tempfile.mkdtemp(prefix="gdsbench-workload.", dir=SHM)
        path = Path(folder) / f"{job.workload}.{job.seed}.pt"
        spec = workloads.WorkloadSpec(job.workload, job.checkpoint_size or 0, job.dtype, job.seed)
        with create_private(path) as handle:
            torch.save(dict(workloads.get(spec).tensors), handle)
        workloads.release()
    paths: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(paths, (node, path))
    return next(made for where, made in paths if where == node and made is not None)


def quiet_but_direct() -> None:
    """Ranks print no warnings, but an O_DIRECT fallback is an error: a row that says O_DIRECT must not
    measure the page cache (ckptio's, for dcp_fast; dcp's and torch_save_ranks' ranks run without ckptio)."""
    warnings.simplefilter("ignore")
    try:
        from ckptio.errors import DirectIOFallbackWarning
    except ImportError:
        return
    warnings.simplefilter("error", DirectIOFallbackWarning)


def where(rank: int) -> dict[str, Any]:
    """A rank's place for its figures: its rank, host, node index and the launcher that started it."""
    node = int(os.environ.get("GROUP_RANK", "0"))
    return {"rank": rank, "host": socket.gethostname(), "node": node, "launcher": os.environ.get("GDSBENCH_LAUNCHER")}


def execute(job: RankJob, half: RankHalf | WholeJob, join_timeout: float = 1800.0) -> int:
    """Join the process group (env://: gloo on CPU, NCCL beside it on CUDA; every rank joined within
    `join_timeout`, each collective done within it), run the job, gather every rank's figures (or errors) on
    rank 0, which writes them for the launcher."""
    from torch.distributed.checkpoint.api import CheckpointException

    quiet_but_direct()
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    try:
        join.join(backend, datetime.timedelta(seconds=join_timeout))
    except join.RendezvousError as exc:
        raise SystemExit(f"gdsbench.cli_rank: rank {os.environ.get('RANK')}: {exc}") from None
    except (RuntimeError, ValueError) as exc:  # torch's DistStoreError: a peer never joined, a port taken
        address = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
        who = f"rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')}"
        raise SystemExit(f"gdsbench.cli_rank: {who}: joining at {address} failed: {exc}") from None
    if dist.get_world_size() != job.world_size:
        raise SystemExit(f"--case says world_size={job.world_size}, the launcher started {dist.get_world_size()}")
    rank, generated = dist.get_rank(), None
    uses_workload = not isinstance(half, WholeJob) or half.uses_workload
    if uses_workload and job.workload_file is None and not job.kind.own_tensors:  # ranks drawing their own map none
        generated = node_workload(job)
        job = replace(job, workload_file=str(generated))
    try:
        figures = {**where(rank), **run(job, half)}
    except (Exception, CheckpointException) as exc:
        figures = {**where(rank), "error": failure(exc)}
        # at once, before the gather: if a peer never reaches it (stuck in a collective this rank left), the
        # launcher's timeout still finds why this rank left
        Path(job.out).mkdir(parents=True, exist_ok=True)
        (Path(job.out) / f"rank-{rank}.error").write_text(figures["error"])
    gathered: list[Any] | None = [None] * dist.get_world_size() if rank == 0 else None
    dist.gather_object(figures, gathered)
    if gathered is not None:
        Path(job.out).mkdir(parents=True, exist_ok=True)
        (Path(job.out) / "ranks.json").write_text(json.dumps(gathered))
    dist.barrier()
    if generated is not None and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        generated.unlink(missing_ok=True)
        generated.parent.rmdir()
    dist.destroy_process_group()
    return 1 if "error" in figures else 0
