"""What ranks 1..N-1 send rank 0 in DCP's collectives, built from DTensor's own shard arithmetic: their save
plans, their cached-save plans (`SavePlan([], usable=False)`), their WriteResults (what FileSystemWriter /
ckptio.Writer return for their final plan: file names, offsets, torch.save overheads and ckptio records laid
out as those writers lay them out; a ckptio peer's data file exists, sparse, because ckptio's commit and Reader
stat and open every one) and their load plans, each pickled by its sender and unpickled by rank 0 as
`gather_object` does (so no object is shared between ranks). A peer's WriteResults are made once per world size
and engine: a ckptio peer keeps its first save id in later saves (each save has its own directory, so nothing
depends on it).

Private torch APIs: `torch.distributed.checkpoint.filesystem._StorageInfo` (peers' WriteResults) and
`torch.distributed.checkpoint.planner_helpers._create_read_item_for_tensor` (peers' load plans). From ckptio:
`ckptio.inspect.ItemRecord`/`data_file` and `ckptio.IOOptions` (peers' records).
"""

from __future__ import annotations

import math
import pickle
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from ckptio import IOOptions
from ckptio.inspect import ItemRecord, data_file
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import (
    LoadPlan,
    ReadItem,
    SavePlan,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.planner_helpers import _create_read_item_for_tensor
from torch.distributed.checkpoint.storage import WriteResult

from .state import Spec, shard_of

ALIGN = 4096  # ckptio lays every item out at a 4 KiB boundary (ckptio/dcp/encode.py)

#: The peers' pickled save and load plans by world size: the same for both engines (DCP's planner makes them).
_PAYLOADS: dict[tuple[str, int], list[bytes]] = {}


def samples(world: int) -> set[int]:
    """The peers checked against real DTensors: 1, N/2 and N-1."""
    return {1, world // 2, world - 1} - {0}


def check_equal(real: Any, built: Any, what: str) -> None:
    """The model's object for a rank equals the real one (else the model measures something else)."""
    if real != built:
        raise AssertionError(f"model mismatch: {what} differs from what the real planner made")


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
        saved = {wi.index.fqn: wi.index.index for wi in final}
        items: list[ReadItem] = []
        for spec in sorted(self.specs, key=lambda s: s.name):
            sizes, offsets = shard_of(spec.shape, self.world, rank)
            if math.prod(sizes) == 0:
                continue
            zeros = [0] * len(sizes)
            item = _create_read_item_for_tensor(
                dest_index=MetadataIndex(spec.name, offsets, 0),
                dest_offsets=zeros,
                storage_index=MetadataIndex(spec.name, offsets, saved[spec.name]),
                storage_offsets=zeros,
                lengths=list(sizes),
            )
            items.append(item)
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
            stand_in = self._stand_in()
            payloads = self._shared(
                self._load_plans(), lambda r: replace(self.load_plan(r, self.final[r]), storage_data=stand_in)
            )
            self.final = {r: self.final[r] for r in samples(self.world) | {0}}  # the rest is no longer needed
            if isinstance(self.commit, bytes):  # this load's commit in place of the stand-in's bytes
                return [payload.replace(stand_in, self.commit) for payload in payloads]
            return payloads
        return self.all_results(own)

    def _stand_in(self) -> Any:
        """What the cached peers' load plans carry where each load's commit goes (ckptio): bytes of its length that
        no pickle of a plan holds otherwise, replaced per load; DCP's plans carry none."""
        return b"\xa5" * len(self.commit) if isinstance(self.commit, bytes) else self.commit

    def _load_plans(self) -> str:
        """The payload kind of the peers' load plans (ckptio's carry a commit of a given length)."""
        return f"load_plans-{len(self.commit)}" if isinstance(self.commit, bytes) else "load_plans"

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


def chunk_nbytes(wi: WriteItem) -> int:
    """Bytes of a write item's chunk (tensor_storage_size() is the whole tensor's)."""
    assert wi.tensor_data is not None
    return math.prod(wi.tensor_data.chunk.sizes) * wi.tensor_data.properties.dtype.itemsize


def dcp_results(
    rank: int, items: list[WriteItem], own: list[WriteResult], own_items: list[WriteItem]
) -> list[WriteResult]:
    """FileSystemWriter's results: one file, plan order, each torch.save archive's overhead as rank 0's."""
    raw = {wi.index.fqn: chunk_nbytes(wi) for wi in own_items}
    overhead = {wr.index.fqn: wr.size_in_bytes - raw[wr.index.fqn] for wr in own}
    key, offset, out = f"__{rank}_0.distcp", 0, []
    for wi in items:
        length = chunk_nbytes(wi) + overhead[wi.index.fqn]
        out.append(WriteResult(index=wi.index, size_in_bytes=length, storage_data=_StorageInfo(key, offset, length)))
        offset += length
    return out


def chunk_spans(start: int, nbytes: int, chunk_bytes: int) -> tuple[tuple[int, int], ...]:
    """(offset, length) of every chunk of an item of `nbytes` written at `start`, as ckptio.Writer cuts it."""
    return tuple((start + at, min(chunk_bytes, nbytes - at)) for at in range(0, nbytes, chunk_bytes))


def digest(rank: int, item: int, chunk: int) -> str:
    """A distinct made-up xxh3 digest per rank, item and chunk (16 hex digits, as ckptio's)."""
    return f"{(rank << 24 | item << 8 | chunk) * 0x9E3779B97F4A7C15 & (1 << 64) - 1:016x}"


def ckptio_results(rank: int, items: list[WriteItem], save_id: str) -> tuple[list[WriteResult], str, int]:
    """ckptio.Writer's results for a rank (items 4 KiB-aligned in one new file), the file's name and size."""
    chunk_bytes, out, end = IOOptions().chunk_bytes, [], 0
    name = data_file(save_id, rank)  # one string per file, as ckptio.Writer's records share it
    for k, wi in enumerate(items):
        assert wi.tensor_data is not None
        nbytes, shape = chunk_nbytes(wi), tuple(wi.tensor_data.chunk.sizes)
        chunks = chunk_spans(end, nbytes, chunk_bytes)
        digests = tuple(digest(rank, k, c) for c in range(len(chunks)))
        dtype = sys.intern(str(wi.tensor_data.properties.dtype).removeprefix("torch."))
        record = ItemRecord(name, nbytes, dtype, shape, "none", chunk_bytes, chunks, digests, "xxh3")
        out.append(WriteResult(wi.index, nbytes, record))
        end += -(-nbytes // ALIGN) * ALIGN
    return out, name, end
