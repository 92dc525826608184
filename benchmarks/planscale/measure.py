"""What is measured, per world size N, engine and phase (`first_save`: a save with no plan cache;
`cached_save`: the next save of the unchanged state dict with `DefaultSavePlanner(enable_plan_caching=True)`,
into a new directory as trainers do (step-N folders); `load`: reading the metadata and planning a load with the
same sharding): `seconds`, the coordinator's (rank 0's) planning time, i.e. its time inside the planner's and
the storage layer's planning methods (STEPS: all rank 0 does in DCP's plan step but the gather and scatter
themselves), as the CPU time of its thread: planning is single-threaded and waits on nothing but a metadata
read from the page cache, so on a dedicated core it equals wall time, while this 2-core VM is shared and its
wall clock measures the neighbours (printed too). And `metadata_bytes`, the size of the `.metadata` the save
committed (the load read). The printed table adds the global part alone (`create_global_plan` +
`prepare_global_plan`), the commit (`finish`: metadata built from every rank's WriteResults, written, made
durable; its fsync waits are not CPU time), and, for the model, rank 0's unpickling of what it gathers
(`decode`) and the bytes gathered.

Each figure is the median over repetitions (`--reps`, the engines interleaved; a world size is not repeated
once `--budget` seconds have gone: 1,024 ranks get one). Each phase runs with Python's automatic garbage
collection off, after a collection, in the model and the real ranks alike, as torchtitan trains (its
GarbageCollection disables it and collects between steps): what a collection costs depends on the
application's heap, which no model knows (with it on, the model's own heap inflated planning up to 2.4x).

The instruments are the same on rank 0 of a real run and in the model. Private torch API: `SavePlanner`'s
class-level plan caches (`_cached_save_plan` ...), cleared between repetitions.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import pickle
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from ckptio import Reader, Writer
from torch.distributed.checkpoint.planner import LoadPlan, SavePlanner

from .peers import Peers
from .state import check_loaded, destination

ENGINES = ("dcp", "dcp_fast")
PHASES = ("first_save", "cached_save", "load")
#: Planning methods timed on rank 0, and the part of the coordinator's work each belongs to.
STEPS = {
    "set_up_planner": "local",
    "create_local_plan": "local",
    "storage_meta": "local",
    "set_up_storage_writer": "local",
    "set_up_storage_reader": "local",
    "read_metadata": "local",
    "prepare_local_plan": "local",
    "create_global_plan": "global",
    "prepare_global_plan": "global",
    "finish": "commit",
}
#: DCP's class-level plan caches (a fresh process has none).
PLAN_CACHES = (
    "_cached_save_plan",
    "_cached_all_plans",
    "_cached_global_plan",
    "_cached_metadata",
    "_cached_final_save_plan",
)


@dataclass(frozen=True)
class Setup:
    """How to run: work directory, engines, repetitions, seconds before no new one starts, layers (None: 32)."""

    base: Path
    engines: tuple[str, ...] = ENGINES
    reps: int = 5
    budget: float = 90.0
    layers: int | None = None


class Timer:
    """Wall and CPU seconds rank 0 spends in the planner's and storage layer's planning methods."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.storage: dict[str, float] = defaultdict(float)  # CPU seconds in the storage layer's methods alone
        self.captured: dict[str, Any] = {}
        self.capture = False

    def watch(self, obj: Any, storage: bool = False) -> None:
        """Wrap every planning method of `obj` (a planner, or with `storage` a storage writer/reader)."""
        for name in STEPS:
            if callable(getattr(obj, name, None)):
                setattr(obj, name, self._timed(getattr(obj, name), name, storage))

    def _timed(self, method: Callable[..., Any], name: str, storage: bool) -> Callable[..., Any]:
        """`method`, adding its wall and thread-CPU time to its step (signature kept: DCP inspects it)."""

        @functools.wraps(method)
        def timed(*args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                result = method(*args, **kwargs)
            finally:
                self.wall[STEPS[name]] += time.perf_counter() - wall
                self.cpu[STEPS[name]] += time.thread_time() - cpu
                if storage:
                    self.storage[STEPS[name]] += time.thread_time() - cpu
            if self.capture and name in ("create_global_plan", "read_metadata"):
                self._keep(name, args[0] if name == "create_global_plan" else result)
            return result

        return timed

    def _keep(self, name: str, value: Any) -> None:
        """Keep (pickled) what rank 0 planned over: the gathered save plans, load plans, the metadata read."""
        if name == "read_metadata":
            key = "metadata"
        elif isinstance(value[0], LoadPlan):
            key = "load_plans"
        else:
            key = "save_plans" if value[0].usable else "cached_plans"
        self.captured[key] = pickle.dumps(value)

    def take(self) -> dict[str, float]:
        """The figures since the last take: planning wall/CPU, global, commit."""
        out = {
            "seconds": self.cpu["local"] + self.cpu["global"],
            "wall_seconds": self.wall["local"] + self.wall["global"],
            "storage_seconds": self.storage["local"] + self.storage["global"],
            "global_seconds": self.cpu["global"],
            "commit_seconds": self.cpu["commit"],
            "commit_wall_seconds": self.wall["commit"],
        }
        for figures in (self.wall, self.cpu, self.storage):
            figures.clear()
        return out


def make_writer(engine: str, path: Path) -> Any:
    """The engine's storage writer with its defaults (FileSystemWriter: one thread, one file per rank)."""
    return dcp.FileSystemWriter(str(path), sync_files=True) if engine == "dcp" else Writer(path)


def make_reader(engine: str, path: Path) -> Any:
    """The engine's storage reader."""
    return dcp.FileSystemReader(str(path)) if engine == "dcp" else Reader(path)


def clear_plan_cache() -> None:
    """Forget DCP's class-level plan caches (a fresh process would have none)."""
    for cache in PLAN_CACHES:
        getattr(SavePlanner, cache).clear()


def sequence(
    engine: str, state: dict[str, Any], base: Path, timer: Timer | None, peers: Peers | None = None
) -> dict[str, dict[str, float]]:
    """One first save, one cached save (new directory), one load, on every rank; rank 0's figures by phase."""
    clear_plan_cache()
    planner = dcp.DefaultSavePlanner(enable_plan_caching=True)
    writer = make_writer(engine, base / "first")
    if timer is not None:
        timer.watch(planner)
        timer.watch(writer, storage=True)
    out = {}
    for phase in ("first_save", "cached_save"):
        directory = base / ("first" if phase == "first_save" else "cached")
        if peers is not None:
            peers.directory = directory
        with measured(peers):
            dcp.save(state, checkpoint_id=str(directory), storage_writer=writer, planner=planner)
        out[phase] = phase_figures(timer, peers, directory)
    reader, load_planner = make_reader(engine, base / "cached"), dcp.DefaultLoadPlanner()
    if timer is not None:
        timer.watch(reader, storage=True)
        timer.watch(load_planner)
    loaded = destination(state)
    with measured(peers):
        dcp.load(loaded, checkpoint_id=str(base / "cached"), storage_reader=reader, planner=load_planner)
    out["load"] = phase_figures(timer, peers, base / "cached")
    check_loaded(loaded, state)
    return out


@contextlib.contextmanager
def measured(peers: Peers | None) -> Iterator[None]:
    """A phase all ranks start together after a collection, automatic garbage collection off (module docstring)."""
    freeze_heap()
    if peers is None:
        dist.barrier()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def freeze_heap() -> None:
    """Collect, then freeze what is alive (torch's imports, the peers: millions): later collections are quick."""
    gc.collect()
    gc.freeze()


def phase_figures(timer: Timer | None, peers: Peers | None, directory: Path) -> dict[str, float]:
    """Rank 0's figures of the phase just run (empty on other ranks)."""
    if timer is None:
        return {}
    figures = timer.take()
    figures["metadata_bytes"] = (directory / ".metadata").stat().st_size
    if peers is not None:
        figures.update(peers.take())
    return figures


def summarize(runs: list[dict[str, dict[str, float]]], world: int, engine: str, source: str) -> list[dict[str, Any]]:
    """One row per phase: the median of every figure over the repetitions."""
    rows = []
    for phase in PHASES:
        figures = [run[phase] for run in runs]
        row: dict[str, Any] = {
            "world_size": world,
            "engine": engine,
            "phase": phase,
            "source": source,
            "reps": len(runs),
        }
        for key in figures[0]:
            row[key] = statistics.median(f[key] for f in figures)
        row["metadata_bytes"] = int(row["metadata_bytes"])
        rows.append(row)
    return rows
