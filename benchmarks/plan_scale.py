"""DCP planning cost from 8 to 1,024 ranks, for DCP's own storage (`dcp`: FileSystemWriter/Reader) and
ckptio's (`dcp_fast`: ckptio.Writer/Reader), without starting 1,024 processes.

    python benchmarks/plan_scale.py --world-sizes 8,64,256,1024 --csv plan-scale.csv --plot plan-scale.png
    python benchmarks/plan_scale.py --validate 2,4,8,16 --csv validate.csv    # the model against real gloo runs

What is measured, per world size N, engine and phase (`first_save`: a save with no plan cache; `cached_save`:
the next save of the unchanged state dict with `DefaultSavePlanner(enable_plan_caching=True)`, into a new
directory as trainers do (step-N folders); `load`: reading the metadata and planning a load with the same
sharding): `seconds`, the coordinator's (rank 0's) planning time, i.e. its time inside the planner's and the
storage layer's planning methods (`set_up_planner`, `create_local_plan`, `storage_meta`,
`set_up_storage_writer/reader`, `read_metadata`, `prepare_local_plan`, `create_global_plan`,
`prepare_global_plan`: all rank 0 does in DCP's plan step but the gather and scatter themselves), as the CPU
time of its thread: planning is single-threaded and waits on nothing but a metadata read from the page cache,
so on a dedicated core it equals wall time, while this 2-core VM is shared and its wall clock measures the
neighbours (printed too). And `metadata_bytes`, the size of the `.metadata` the save committed (the load read).
The printed table adds the global part alone (`create_global_plan` + `prepare_global_plan`), the commit
(`finish`: metadata built from every rank's WriteResults, written, made durable; its fsync waits are not CPU
time), and, for the model, rank 0's unpickling of what it gathers (`decode`) and the bytes gathered.
Each figure is the median over repetitions (`--reps`, the engines interleaved; a world size is not repeated
once `--budget` seconds have gone: 1,024 ranks get one). Each phase runs with Python's automatic garbage
collection off, after a collection, in the model and the real ranks alike, as torchtitan trains (its
GarbageCollection disables it and collects between steps): what a collection costs depends on the
application's heap, which no model knows (with it on, the model's own heap inflated planning up to 2.4x).

The state dict is Llama-3-8B-like (gdsbench's `llama3-8b` preset: 291 tensors at their real row counts, `--layers`
to change the 32 layers) with every 2-D tensor cut to 2 columns, tiny in bytes (planning does not depend on
them), held as FSDP2 does: every tensor a DTensor Shard(0) over a 1-D mesh of N ranks (uneven at 1,024 ranks
for the 128,256-row vocabulary: DTensor gives the last ranks empty shards). Matrices bf16, the rest fp32.

How N ranks are modelled in one process. Rank 0 is real: it runs the public `dcp.save`/`dcp.load` with real
DTensors (their mesh coordinates come from torch's fake process group, as rank 0 of N), a real
`DefaultSavePlanner`/`DefaultLoadPlanner` and a real storage writer/reader that writes and reads its own
shard in a real directory. Only DCP's collectives are replaced: `_DistWrapper`, the one object through which
`_save_state_dict`/`_load_state_dict` talk to other ranks, becomes `ModelDist`, whose gather/scatter/broadcast
give rank 0 what N-1 peers would send, each object pickled by its sender and unpickled by rank 0 as
`gather_object` does (so no object is shared between ranks). `Peers` builds the peers' objects from DTensor's
own shard arithmetic (`_compute_local_shape_and_global_offset`): their save plans, their cached-save plans
(`SavePlan([], usable=False)`), their WriteResults (what FileSystemWriter / ckptio.Writer return for their
final plan: file names, offsets, torch.save overheads and ckptio records laid out as those writers lay them
out; a ckptio peer's data file exists, sparse, because ckptio's commit and Reader stat and open every one)
and their load plans. Every run checks that rank 0's real plans equal what `Peers` builds for rank 0, and
once per world size that real DTensors at ranks 1, N/2 and N-1 (fake process groups as those ranks) plan
exactly what `Peers` builds for them. So all the coordinator runs is DCP's and the storage layer's real code,
fed what N ranks would feed it. Running `dcp.save` on the fake process group alone was rejected: its
gather/scatter carry no data, so rank 0 would never plan over N ranks' plans.

What it leaves out: the network (the gather of N plans and N WriteResults into rank 0, the scatter, and the
broadcast of the global metadata to every rank after each commit, N times the metadata), rank 0's pickling for
the scatter and the broadcast, waiting for the slowest rank, the peers' own local planning (in parallel with
rank 0's, as costly), the latency of opening N files on a parallel file system (here local and cached), and
the data I/O. A peer's WriteResults are made once per world size and engine: a ckptio peer keeps its first
save id in later saves (each save has its own directory, so nothing depends on it). `--validate` runs the
model and real gloo runs on this host (forked ranks, MASTER_ADDR 127.0.0.1, GLOO_SOCKET_IFNAME=lo) with the
same instruments on rank 0 and prints model/real ratios; real runs time the same methods on rank 0.

Private torch APIs used: `torch.distributed.checkpoint.state_dict_saver._DistWrapper` and
`state_dict_loader._DistWrapper` (patched in the model), `torch.distributed.checkpoint.utils._DistWrapper`
(subclassed), `torch.distributed.checkpoint.filesystem._StorageInfo` (peers' WriteResults),
`torch.distributed.checkpoint.planner_helpers._create_read_item_for_tensor` (peers' load plans),
`torch.distributed.tensor._utils._compute_local_shape_and_global_offset` (DTensor's shard arithmetic),
`torch.testing._internal.distributed.fake_pg` (the "fake" backend and its FakeStore), and `SavePlanner`'s
class-level plan caches (`_cached_save_plan` ...), cleared between repetitions. From ckptio:
`ckptio.inspect.ItemRecord`/`data_file` and `ckptio.IOOptions` (peers' records).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import gc
import math
import os
import pickle
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import (
    LoadPlan,
    ReadItem,
    SavePlan,
    SavePlanner,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import WriteResult
from torch.distributed.checkpoint.utils import _DistWrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard

CSV_COLUMNS = ("world_size", "engine", "phase", "seconds", "metadata_bytes")
ENGINES = ("dcp", "dcp_fast")
PHASES = ("first_save", "cached_save", "load")
PRESET = "llama3-8b"
COLUMNS = 2  # every 2-D tensor keeps its real rows and this many columns: tiny, same plans
DTYPES = {"matrix": torch.bfloat16, "embedding": torch.float32, "norm": torch.float32, "bias": torch.float32}
ALIGN = 4096  # ckptio lays every item out at a 4 KiB boundary (ckptio/dcp/encode.py)
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


@dataclass(frozen=True)
class Setup:
    """How to run: work directory, engines, repetitions, seconds before no new one starts, layers (None: 32)."""

    base: Path
    engines: tuple[str, ...] = ENGINES
    reps: int = 5
    budget: float = 90.0
    layers: int | None = None


# -- the state dict -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One tensor of the model: its name, global shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


def model_specs(layers: int | None = None, preset: str = PRESET) -> list[Spec]:
    """The preset's tensors at their real row counts, 2-D ones cut to COLUMNS columns (`layers`: default 32)."""
    from gdsbench.workloads import PRESETS, Layout, tensor_plan

    p = PRESETS[preset]
    plan = tensor_plan(p, Layout(p.name, p.dims, p.layers if layers is None else layers, 0))
    return [Spec(name, (shape[0],) + (COLUMNS,) * (len(shape) - 1), DTYPES[role]) for name, shape, role in plan]


@functools.lru_cache(maxsize=1 << 16)
def shard_of(shape: tuple[int, ...], world: int, rank: int) -> tuple[torch.Size, torch.Size]:
    """(sizes, offsets) of rank's Shard(0) chunk of a tensor, by DTensor's own arithmetic."""
    from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset

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


# -- instruments: the same on rank 0 of a real run and in the model --------------------------------


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
    if engine == "dcp":
        return dcp.FileSystemWriter(str(path), sync_files=True)
    from ckptio import Writer

    return Writer(path)


def make_reader(engine: str, path: Path) -> Any:
    """The engine's storage reader."""
    if engine == "dcp":
        return dcp.FileSystemReader(str(path))
    from ckptio import Reader

    return Reader(path)


def clear_plan_cache() -> None:
    """Forget DCP's class-level plan caches (a fresh process would have none)."""
    for cache in ("_cached_save_plan", "_cached_all_plans", "_cached_global_plan", "_cached_metadata",
                  "_cached_final_save_plan"):  # fmt: skip
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


# -- the model: rank 0 real, the other N-1 ranks' messages built ----------------------------------


#: The peers' pickled save and load plans by world size: the same for both engines (DCP's planner makes them).
_PAYLOADS: dict[tuple[str, int], list[bytes]] = {}


@dataclass
class Peers:
    """What ranks 1..N-1 send rank 0 in DCP's collectives, for the Llama-like state dict at N ranks."""

    engine: str
    world: int
    specs: list[Spec]
    directory: Path = Path()
    final: dict[int, list[WriteItem]] = field(default_factory=dict)  # final save plan items, until not needed
    metadata: Any = None  # the global metadata rank 0 broadcast after the last commit
    decode: float = 0.0
    received: int = 0
    _results: list[bytes] | None = None
    _files: dict[str, int] = field(default_factory=dict)  # ckptio peers' data files: name -> size
    commit: Any = None  # what rank 0's load plan carries (ckptio's Reader: the commit it read), as every peer's

    def save_plan(self, rank: int) -> SavePlan:
        """Rank's first-save local plan: DefaultSavePlanner's WriteItems for its Shard(0) DTensors."""
        items = []
        for spec in self.specs:
            sizes, offsets = (torch.Size(x) for x in shard_of(spec.shape, self.world, rank))  # new, as DTensor's
            data = TensorWriteData(
                chunk=ChunkStorageMetadata(offsets=offsets, sizes=sizes),
                properties=TensorProperties(dtype=spec.dtype),
                size=torch.Size(spec.shape),
            )
            items.append(WriteItem(index=MetadataIndex(spec.name, offsets), type=WriteItemType.SHARD, tensor_data=data))
        return SavePlan(items, planner_data={spec.name: (spec.name,) for spec in self.specs})

    def load_plan(self, rank: int, final: list[WriteItem]) -> LoadPlan:
        """Rank's load plan (same sharding as saved): one read of its own saved chunk per tensor, in key order."""
        from torch.distributed.checkpoint.planner_helpers import _create_read_item_for_tensor

        saved = {wi.index.fqn: wi.index.index for wi in final}
        items: list[ReadItem] = []
        for spec in sorted(self.specs, key=lambda s: s.name):
            sizes, offsets = shard_of(spec.shape, self.world, rank)
            if math.prod(sizes) == 0:
                continue
            zeros = [0] * len(sizes)
            items.append(_create_read_item_for_tensor(
                dest_index=MetadataIndex(spec.name, offsets, 0), dest_offsets=zeros,
                storage_index=MetadataIndex(spec.name, offsets, saved[spec.name]), storage_offsets=zeros,
                lengths=list(sizes)))  # fmt: skip
        return LoadPlan(items, storage_data=self.commit)

    def results(self, rank: int, own: list[WriteResult]) -> list[WriteResult]:
        """Rank's WriteResults for its final plan, as its engine's writer returns them."""
        items = self.final[rank]
        if self.engine == "dcp":
            return dcp_results(rank, items, own, self.final[0])
        results, name, size = ckptio_results(rank, items, uuid.uuid4().hex)
        self._files[name] = size
        return results

    def all_results(self, own: list[WriteResult]) -> list[bytes]:
        """The peers' pickled WriteResults, made once (module docstring); ckptio peers' files made in each save."""
        if self._results is None:
            self._results = [pickle.dumps(self.results(r, own)) for r in range(1, self.world)]
        for name, size in self._files.items():
            with open(self.directory / name, "wb") as f:
                f.truncate(size)
        return self._results

    def gather(self, own: Any) -> list[Any]:
        """Rank 0's gather: its own object and the peers', each pickled by its sender, unpickled here."""
        payloads = [pickle.dumps(own), *self._payloads(own)]
        started = time.thread_time()
        out = [pickle.loads(p) for p in payloads]
        self.decode += time.thread_time() - started
        self.received += sum(map(len, payloads[1:]))
        return out

    def _payloads(self, own: Any) -> list[bytes]:
        """The peers' pickled objects for this gather: plans (first or cached), WriteResults or load plans."""
        if isinstance(own, SavePlan) and own.usable:
            check_equal(own, self.save_plan(0), "rank 0's save plan")
            return self._shared("plans", lambda r: self.save_plan(r))
        if isinstance(own, SavePlan):
            check_equal(own, SavePlan([], usable=False), "rank 0's cached-save plan")
            return [pickle.dumps(SavePlan([], usable=False))] * (self.world - 1)
        if isinstance(own, LoadPlan):
            self.commit = own.storage_data
            check_equal(own, self.load_plan(0, self.final[0]), "rank 0's load plan")
            payloads = self._shared(self._load_plans(), lambda r: self.load_plan(r, self.final[r]))
            self.final = {r: self.final[r] for r in samples(self.world) | {0}}  # the rest is no longer needed
            return payloads
        return self.all_results(own)

    def _load_plans(self) -> str:
        """The payload kind of the peers' load plans: they carry the commit read (ckptio), so one per commit."""
        return f"load_plans-{self.commit.hex()}" if isinstance(self.commit, bytes) else "load_plans"

    def _shared(self, kind: str, make: Callable[[int], Any]) -> list[bytes]:
        """The peers' pickled plans of a kind at this world size (made on first use)."""
        if (kind, self.world) not in _PAYLOADS:
            _PAYLOADS[(kind, self.world)] = [pickle.dumps(make(r)) for r in range(1, self.world)]
        return _PAYLOADS[(kind, self.world)]

    def scatter(self, plans: list[Any]) -> Any:
        """Rank 0's scatter: its own plan back through pickle; peers keep final plans while payloads are due."""
        if self._results is None or (self._load_plans(), self.world) not in _PAYLOADS:
            self.final.update({r: p.items for r, p in enumerate(plans) if isinstance(p, SavePlan) and p.usable})
        return pickle.loads(pickle.dumps(plans[0]))

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's broadcast (the global metadata after a commit); the peers keep it."""
        self.metadata = obj
        return obj

    def take(self) -> dict[str, float]:
        """The collectives' figures since the last take."""
        out = {"decode_seconds": self.decode, "received_bytes": self.received}
        self.decode, self.received = 0.0, 0
        return out


def check_equal(real: Any, built: Any, what: str) -> None:
    """The model's object for a rank equals the real one (else the model measures something else)."""
    if real != built:
        raise AssertionError(f"model mismatch: {what} differs from what the real planner made")


def chunk_nbytes(wi: WriteItem) -> int:
    """Bytes of a write item's chunk (tensor_storage_size() is the whole tensor's)."""
    assert wi.tensor_data is not None
    return math.prod(wi.tensor_data.chunk.sizes) * wi.tensor_data.properties.dtype.itemsize


def dcp_results(
    rank: int, items: list[WriteItem], own: list[WriteResult], own_items: list[WriteItem]
) -> list[WriteResult]:
    """FileSystemWriter's results: one file, plan order, each torch.save archive's overhead as rank 0's."""
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    raw = {wi.index.fqn: chunk_nbytes(wi) for wi in own_items}
    overhead = {wr.index.fqn: wr.size_in_bytes - raw[wr.index.fqn] for wr in own}
    key, offset, out = f"__{rank}_0.distcp", 0, []
    for wi in items:
        length = chunk_nbytes(wi) + overhead[wi.index.fqn]
        out.append(WriteResult(index=wi.index, size_in_bytes=length, storage_data=_StorageInfo(key, offset, length)))
        offset += length
    return out


def ckptio_results(rank: int, items: list[WriteItem], save_id: str) -> tuple[list[WriteResult], str, int]:
    """ckptio.Writer's results for a rank (items 4 KiB-aligned in one new file), the file's name and size."""
    from ckptio import IOOptions
    from ckptio.inspect import ItemRecord, data_file

    chunk_bytes, out, end = IOOptions().chunk_bytes, [], 0
    name = data_file(save_id, rank)  # one string per file, as ckptio.Writer's records share it
    for k, wi in enumerate(items):
        assert wi.tensor_data is not None
        nbytes = chunk_nbytes(wi)
        chunks = tuple((end + c * chunk_bytes, min(chunk_bytes, nbytes - c * chunk_bytes))
                       for c in range(-(-nbytes // chunk_bytes)))  # fmt: skip
        digests = tuple(
            f"{(rank << 24 | k << 8 | c) * 0x9E3779B97F4A7C15 & (1 << 64) - 1:016x}" for c in range(len(chunks))
        )
        dtype = sys.intern(str(wi.tensor_data.properties.dtype).removeprefix("torch."))
        record = ItemRecord(name, nbytes, dtype, tuple(wi.tensor_data.chunk.sizes), "none",
                            chunk_bytes, chunks, digests, "xxh3")  # fmt: skip
        out.append(WriteResult(wi.index, nbytes, record))
        end += -(-nbytes // ALIGN) * ALIGN
    return out, name, end


class ModelDist(_DistWrapper):
    """DCP's view of the process group from rank 0 of N: the collectives go through `Peers`."""

    def __init__(self, peers: Peers) -> None:  # no super().__init__: there is no process group to ask
        self.group = None
        self.use_dist = True
        self.coordinator_rank = 0
        self.global_coordinator_rank = 0
        self.rank = 0
        self.is_coordinator = True
        self.peers = peers

    def get_world_size(self) -> int:
        """N."""
        return self.peers.world

    def gather_object(self, object: Any) -> list[Any]:
        """Rank 0 receives every rank's object."""
        return self.peers.gather(object)

    def scatter_object(self, object_list: list[Any] | None) -> Any:
        """Rank 0 sends every rank its object and keeps its own."""
        assert object_list is not None
        return self.peers.scatter(object_list)

    def broadcast_object(self, object: Any) -> Any:
        """Rank 0 sends its object to every rank."""
        return self.peers.broadcast(object)

    def all_gather_object(self, object: Any) -> list[Any]:
        """The load's read step: every rank's (empty) result."""
        return [object] * self.peers.world

    def barrier(self) -> None:
        """Nothing to wait for."""


@contextlib.contextmanager
def modelled(peers: Peers) -> Iterator[None]:
    """DCP's save and load talk to `peers` instead of a process group."""
    make = lambda *args, **kwargs: ModelDist(peers)  # noqa: E731
    saved = state_dict_saver._DistWrapper, state_dict_loader._DistWrapper
    state_dict_saver._DistWrapper = state_dict_loader._DistWrapper = make  # type: ignore[assignment, misc]
    try:
        yield
    finally:
        state_dict_saver._DistWrapper, state_dict_loader._DistWrapper = saved  # type: ignore[misc]


@contextlib.contextmanager
def fake_group(world: int, rank: int = 0) -> Iterator[DeviceMesh]:
    """A fake process group as `rank` of `world` (no communication), and its 1-D CPU mesh."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield init_device_mesh("cpu", (world,))
    finally:
        dist.destroy_process_group()


def samples(world: int) -> set[int]:
    """The peers checked against real DTensors: 1, N/2 and N-1."""
    return {1, world // 2, world - 1} - {0}


def check_peers(peers: Peers) -> None:
    """Real DTensors at sampled ranks plan exactly the save and load plans `peers` built for them."""
    world = peers.world
    for rank in sorted(samples(world)):
        with fake_group(world, rank) as mesh:
            state = dtensor_state(peers.specs, mesh, world, rank)
            planner = dcp.DefaultSavePlanner()
            planner.set_up_planner(state, None, False)
            check_equal(planner.create_local_plan(), peers.save_plan(rank), f"rank {rank}'s save plan")
            loader = dcp.DefaultLoadPlanner()
            loader.set_up_planner(dict(sorted(state.items())), peers.metadata, False)
            built = peers.load_plan(rank, peers.final[rank])
            check_equal(loader.create_local_plan(), built, f"rank {rank}'s load plan")


def model_rows(world: int, setup: Setup) -> list[dict[str, Any]]:
    """The model at `world` ranks, engines interleaved (a busy spell hits both); then its peers checked."""
    specs = model_specs(setup.layers)
    peers = {engine: Peers(engine, world, specs) for engine in setup.engines}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {engine: [] for engine in setup.engines}
    started = time.perf_counter()
    with fake_group(world) as mesh, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state, timer = dtensor_state(specs, mesh, world, 0), Timer()
        for rep in range(setup.reps):
            if rep and time.perf_counter() - started > setup.budget:
                break
            for engine in setup.engines:
                directory = setup.base / f"model-{engine}-{world}-{rep}"
                with modelled(peers[engine]):
                    runs[engine].append(sequence(engine, state, directory, timer, peers[engine]))
                shutil.rmtree(directory, ignore_errors=True)
    check_peers(peers[setup.engines[0]])
    return [row for engine in setup.engines for row in summarize(runs[engine], world, engine, "model")]


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


# -- real gloo runs --------------------------------------------------------------------------------


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def real_rank(rank: int, world: int, port: int, setup: Setup, capture: bool) -> None:
    """One rank of a real gloo run: every engine's sequences; rank 0 pickles its figures into setup.base."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        state = dtensor_state(model_specs(setup.layers), mesh, world, rank)
        timers = {engine: Timer() for engine in setup.engines} if rank == 0 else {}
        freeze_heap()
        runs: dict[str, list[Any]] = {engine: [] for engine in setup.engines}
        for rep in range(-1, setup.reps):  # rep -1 warms up (imports, first calls) and is not counted
            for engine in setup.engines:  # interleaved, as in the model
                timer = timers.get(engine)
                if timer is not None:
                    timer.capture = capture and rep == 0
                figures = sequence(engine, state, setup.base / f"real-{engine}-{rep}", timer)
                runs[engine] += [figures] if rep >= 0 else []
                dist.barrier()
        out = {e: {"runs": runs[e], "captured": timers[e].captured if timers else {}} for e in setup.engines}
        if rank == 0:
            (setup.base / "real.pickle").write_bytes(pickle.dumps(out))
    finally:
        dist.destroy_process_group()


def real_run(world: int, setup: Setup, capture: bool = False) -> dict[str, Any]:
    """`world` gloo ranks on this host (loopback only), forked; rank 0's figures (and captures) by engine."""
    import torch.multiprocessing as mp

    setup.base.mkdir(parents=True, exist_ok=True)
    method = "fork" if sys.platform == "linux" else "spawn"
    mp.start_processes(real_rank, args=(world, free_port(), setup, capture), nprocs=world, start_method=method)
    out: dict[str, Any] = pickle.loads((setup.base / "real.pickle").read_bytes())
    return out


def real_rows(world: int, setup: Setup) -> list[dict[str, Any]]:
    """Rows of a real gloo run, as model_rows'."""
    out = real_run(world, replace(setup, base=setup.base / f"real-{world}"))
    return [row for engine in setup.engines for row in summarize(out[engine]["runs"], world, engine, "real")]


# -- output ----------------------------------------------------------------------------------------


def write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    """The CSV: exactly CSV_COLUMNS, one row per (world_size, engine, phase)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for row in rows:
            w.writerow([row["world_size"], row["engine"], row["phase"], f"{row['seconds']:.6f}", row["metadata_bytes"]])


def table(rows: list[dict[str, Any]]) -> str:
    """A readable table of the rows in milliseconds (rank 0's CPU time but `wall`; `storage`: part of `plan`)."""
    names = ("ranks", "engine", "phase", "plan ms", "storage ms", "wall ms", "global ms", "commit ms", "decode ms")
    head = "{:>6} {:<9} {:<12} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8} {:>12} {:>4}".format(
        *names, "recv MB", "metadata", "reps"
    )
    lines = [head, "-" * len(head)]
    keys = ("seconds", "storage_seconds", "wall_seconds", "global_seconds", "commit_seconds")
    for r in rows:
        times = " ".join(f"{r[k] * 1e3:10.2f}" for k in keys)
        model = "decode_seconds" in r
        gathered = (
            f"{r['decode_seconds'] * 1e3:10.2f} {r['received_bytes'] / 1e6:8.2f}" if model else f"{'-':>10} {'-':>8}"
        )
        case = f"{r['world_size']:>6} {r['engine']:<9} {r['phase']:<12}"
        lines.append(f"{case} {times} {gathered} {r['metadata_bytes']:>12,} {r['reps']:>4}")
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Seconds vs world size (log-log, one line per engine x phase) and metadata bytes vs world size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for engine in ENGINES:
        for phase, marker in zip(PHASES, "osD"):
            sel = [r for r in rows if r["engine"] == engine and r["phase"] == phase]
            style = "-" if engine == "dcp_fast" else "--"
            left.plot(
                [r["world_size"] for r in sel],
                [r["seconds"] for r in sel],
                style,
                marker=marker,
                label=f"{engine} {phase}",
            )
        sel = [r for r in rows if r["engine"] == engine and r["phase"] == "first_save"]
        right.plot([r["world_size"] for r in sel], [r["metadata_bytes"] for r in sel], marker="o", label=engine)
    sizes = sorted({int(r["world_size"]) for r in rows})
    for ax, title, unit in ((left, "rank 0's planning time", "CPU seconds"), (right, ".metadata size", "bytes")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.set_xlabel("world size (ranks)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("DCP planning: Llama-3-8B-like state dict, 291 Shard(0) DTensors over N ranks (model of rank 0)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def ratios(model: list[dict[str, Any]], real: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """model / real per world size, engine and phase: planning CPU time, planning wall time, metadata bytes."""
    index = {(r["world_size"], r["engine"], r["phase"]): r for r in real}
    out = []
    for m in model:
        r = index[(m["world_size"], m["engine"], m["phase"])]
        out.append(
            {
                "world_size": m["world_size"],
                "engine": m["engine"],
                "phase": m["phase"],
                "model_seconds": m["seconds"],
                "real_seconds": r["seconds"],
                "cpu_ratio": m["seconds"] / r["seconds"],
                "model_wall_seconds": m["wall_seconds"],
                "real_wall_seconds": r["wall_seconds"],
                "wall_ratio": m["wall_seconds"] / r["wall_seconds"],
                "model_metadata_bytes": m["metadata_bytes"],
                "real_metadata_bytes": r["metadata_bytes"],
                "metadata_ratio": m["metadata_bytes"] / r["metadata_bytes"],
            }
        )
    return out


def write_ratios(rows: list[dict[str, Any]], path: Path) -> None:
    """The validation CSV."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: f"{v:.6f}" if isinstance(v, float) else v for k, v in row.items()})


def within(rows: list[dict[str, Any]], key: str, factor: float = 2.0) -> bool:
    """Every ratio `key` lies within `factor` of 1."""
    return all(1 / factor <= r[key] <= factor for r in rows)


def ratio_table(rows: list[dict[str, Any]]) -> str:
    """A readable table of the validation ratios (milliseconds) and the within-2x verdicts."""
    names = ("ranks", "engine", "phase", "model ms", "real ms", "cpu m/r", "model wall", "real wall", "wall m/r")
    head = "{:>6} {:<9} {:<12} {:>9} {:>9} {:>8} {:>10} {:>10} {:>9} {:>7}".format(*names, "md m/r")
    lines = [head, "-" * len(head)]
    for r in rows:
        ms = [r[k] * 1e3 for k in ("model_seconds", "real_seconds", "model_wall_seconds", "real_wall_seconds")]
        lines.append(
            f"{r['world_size']:>6} {r['engine']:<9} {r['phase']:<12} {ms[0]:9.2f} {ms[1]:9.2f} {r['cpu_ratio']:8.2f} "
            f"{ms[2]:10.2f} {ms[3]:10.2f} {r['wall_ratio']:9.2f} {r['metadata_ratio']:7.3f}"
        )
    verdict = {key: "yes" if within(rows, key) else "NO" for key in ("cpu_ratio", "wall_ratio", "metadata_ratio")}
    lines.append(
        f"model within 2x of the real runs: planning CPU time {verdict['cpu_ratio']}, "
        f"wall time {verdict['wall_ratio']}, metadata bytes {verdict['metadata_ratio']}"
    )
    return "\n".join(lines)


def sizes(text: str) -> list[int]:
    """`8,64,256` -> [8, 64, 256]."""
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    """Run the model at the world sizes (or the validation against real gloo runs); print, write, plot."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--world-sizes", type=sizes, default=[8, 64, 256, 1024], help="comma-separated (default 8,64,256,1024)"
    )
    p.add_argument("--engines", default=",".join(ENGINES), help="dcp, dcp_fast or both (default)")
    p.add_argument("--reps", type=int, default=Setup.reps, help="repetitions per world size; the median counts")
    p.add_argument(
        "--budget", type=float, default=Setup.budget, help="no new repetition of a world size after this many seconds"
    )
    p.add_argument("--csv", type=Path, help="write the rows here (--validate: the model/real ratios)")
    p.add_argument("--plot", type=Path, help="write a PNG: seconds and metadata bytes vs world size")
    p.add_argument("--validate", type=sizes, help="model and real gloo runs at these world sizes (e.g. 2,4,8,16)")
    p.add_argument("--layers", type=int, help="transformer layers of the Llama-like model (default: its 32)")
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where checkpoints go (removed)")
    args = p.parse_args(argv)
    engines = tuple(e for e in args.engines.split(",") if e)
    base = Path(tempfile.mkdtemp(prefix="plan-scale-", dir=args.dir))
    setup = Setup(base, engines, args.reps, args.budget, args.layers)
    try:
        model_rows(2, replace(setup, reps=1))  # imports and first-call costs, not counted
        freeze_heap()
        if args.validate:
            return validate(args.validate, setup, args.csv)
        rows = [row for world in args.world_sizes for row in model_rows(world, setup)]
    finally:
        gc.unfreeze()
        shutil.rmtree(base, ignore_errors=True)
    print(table(rows))
    if args.csv:
        write_csv(rows, args.csv)
    if args.plot:
        plot(rows, args.plot)
    return 0


def validate(worlds: list[int], setup: Setup, out: Path | None) -> int:
    """The model and real gloo runs at each world size; the ratios printed (and written to `out`)."""
    model, real = [], []
    for world in worlds:
        model += model_rows(world, setup)
        real += real_rows(world, setup)
    print("model:\n" + table(model) + "\n\nreal gloo runs:\n" + table(real) + "\n")
    rows = ratios(model, real)
    print(ratio_table(rows))
    if out:
        write_ratios(rows, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
