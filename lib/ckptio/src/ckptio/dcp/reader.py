"""Reader: a torch.distributed.checkpoint StorageReader for checkpoints written by Writer.

    dcp.load(state_dict, storage_reader=Reader("ckpt/"))     # DCP's planners and resharding, our storage
    dcp.load(state_dict, storage_reader=Reader("s3://bucket/ckpt"))  # objects (ckptio[s3])

Reads are byte ranges sorted by file offset, parallel on IOOptions.threads workers, each stored chunk
verified against its checksum and decoded (decode.py); only the rows a destination shard spans are
fetched, never whole saved items. Every data file the metadata names is opened right after it is read, so a
save committing meanwhile cannot pull them away (it removes the files it replaces once its `.metadata` is in
place): where one is already gone and `.metadata` changed, the newer commit is read instead, up to REREADS
times. A load thus gets the old checkpoint or the new one, whole; ranks that read different commits are
refused (the coordinator compares them). After planning a rank keeps open only the files its plan reads.
On an object store (store.py chooses, once per location) the metadata must be format 3, each data object's
size comes from one listing, and its pieces are read by parallel ranged GETs (object_store.py).

The directory is untrusted: `.metadata` must carry its seal and pass the structural checks
(metadata.py, validate.py); data files are only the names a Writer makes, opened inside the directory
without following links, regular files only, long enough for every chunk recorded in them; DCP's byte
items (non-tensor values) are rebuilt by torch's weights-only unpickler before any planner sees them. Each
record's chunks lie at distinct places inside its file before anything is allocated for it: no item declares
more bytes than its file stores.
Every refusal is a CheckpointError (inside torch's CheckpointException: `unwrap` gets it out).

With `broadcast=True`, an item that several ranks need (a replicated tensor, or the same shard on
every rank of a replica group) is read from storage by one rank, chosen to balance the bytes each
reads, and sent to the others with torch.distributed.broadcast over the process group.
"""

from __future__ import annotations

import io
import itertools
import os
import uuid
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, ReadItem
from torch.distributed.checkpoint.storage import StorageReader
from torch.futures import Future

from .. import codec as codecs
from ..errors import CheckpointError, InvalidCheckpoint, TruncatedCheckpoint
from ..memory import Prefaulter, StagingCache, host_bytes, round_up
from ..options import IOOptions, resolve_host
from ..places import place
from .decode import ALIGN, Want, box_of, dtype_of, pieces, row_range
from .located import store_at, store_for
from .metadata import referenced_files
from .objects import loadable_bytes
from .records import ItemRecord
from .store import Store
from .validate import checksum_of

UNVERIFIED = "written without checksums: Reader(verify=False) loads it unverified"
REREADS = 5  # how many newer commits a load takes when the files of the one it read were removed meanwhile


@dataclass(frozen=True)
class Broadcast:
    """An item several ranks read: the rank that reads it from storage for all of them."""

    index: MetadataIndex
    reader: int
    nbytes: int


class Reader(StorageReader):
    """DCP StorageReader: parallel, verified, range-limited reads of a Writer's checkpoint.

    Args:
        path: the checkpoint directory, or `s3://bucket/prefix` (ckptio[s3]); `checkpoint_id` of dcp.load
            overrides it.
        options: threads, backend, staging memory (host defaults if None).
        verify: check every stored chunk's checksum (default True); a checkpoint written without
            checksums is refused unless verify=False.
        broadcast: read each item several ranks need once, on one rank, and broadcast it.

    Raises (inside DCP's CheckpointException): InvalidCheckpoint, TruncatedCheckpoint, CorruptCheckpoint,
    ObjectStoreError (with the HTTP status) on an object store.
    Raises OptionError at once for options.backend "gds" (reads go through host memory).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        options: IOOptions | None = None,
        verify: bool = True,
        broadcast: bool = False,
    ) -> None:
        super().__init__()
        self.options = resolve_host(options, "Reader reads")
        self.store: Store = store_for(path, self.options)
        self.verify = verify
        self.broadcast = broadcast
        self.load_id = uuid.uuid4().hex
        self.rank = 0
        self.storage_data: dict[MetadataIndex, ItemRecord] = {}
        self.read_bytes = 0  # raw bytes this rank fetched from storage in the last load
        self._held = True  # whether every data file the metadata names could be held
        self._commit = b""  # the identity of the commit read (metadata.commit_id)
        self._refused: CheckpointError | None = None
        self._slot_bytes = self.options.chunk_bytes

    @property
    def path(self) -> Any:
        """The checkpoint: a Path, or an ObjectLocation (str() gives its s3:// URL)."""
        return self.store.path

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new load begins; `checkpoint_id`, when given, is the checkpoint's location."""
        if checkpoint_id is not None:
            self.store = store_at(self.store, checkpoint_id, self.options)
        self.load_id = uuid.uuid4().hex

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        """The committed metadata, checked (seal, then its structure; records as they are used). DCP swallows an error here and asks again with `rank=`: that second call
        returns empty metadata, and set_up_storage_reader raises the first call's error, so it reaches
        the caller as itself."""
        if "rank" in kwargs and self._refused is not None:
            return Metadata(state_dict_metadata={})
        try:
            metadata = self._checked_metadata()
        except CheckpointError as e:
            self._refused = e
            raise
        self._refused = None
        if metadata.storage_meta is not None:
            metadata.storage_meta.load_id = self.load_id
        return metadata

    def _checked_metadata(self) -> Metadata:
        """The metadata, its checksum policy honoured, its data files held open: where one could not be opened and
        `.metadata` changed meanwhile (a save committed and removed the files it replaced), the newer commit."""
        metadata = self._read_and_hold()
        for _ in range(REREADS):
            if self._held or self.store.current_commit() == self._commit:
                break
            metadata = self._read_and_hold()
        return metadata

    def _read_and_hold(self) -> Metadata:
        """The committed metadata (its identity kept) and every data file it names held open."""
        metadata, self._commit = self.store.read_commit()
        if self.verify and checksum_of(metadata) == "none":
            raise InvalidCheckpoint(self.path, UNVERIFIED)
        self._held = self.store.hold(referenced_files(metadata))
        return metadata

    def _pin(self, items: list[ReadItem]) -> None:
        """Check the records of this rank's read items against the data files held (each must hold every chunk
        recorded in it, at distinct places), then let go of the files the plan does not read."""
        records = [(ri.storage_index.fqn, self.storage_data[ri.storage_index]) for ri in items]
        needed = {record.file for _, record in records}
        try:
            for fqn, record in records:
                _check_extent(self.store.where(record.file), fqn, record, self.store.size(record.file))
        except BaseException:
            self.close()
            raise
        self.store.keep_only(needed)
        self._slot_bytes = _slot_of([r for _, r in records], self.options.chunk_bytes)

    def close(self) -> None:
        """Release the data files held open (a load does when it ends)."""
        self.store.release()

    def __del__(self) -> None:
        """A load that failed before reading still lets its files go."""
        if "store" in self.__dict__:  # not when the location was refused
            self.close()

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Keep the records of every saved item and this rank's number."""
        if self._refused is not None:
            raise self._refused
        self.storage_data = metadata.storage_data
        self.rank = kwargs.get("rank", _rank())

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """DCP's plan, carrying the commit this rank read; the records it reads checked, their files held open."""
        self._pin(plan.items)
        return replace(plan, storage_data=self._commit)

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """Refuse plans made from different commits (a save committed while the ranks read `.metadata`); with
        broadcast, pick for every item several ranks read the rank that reads it for all of them."""
        commits = {plan.storage_data for plan in plans if isinstance(plan.storage_data, bytes)}
        if len(commits) > 1:
            raise CheckpointError(
                f"{self.path}: a save committed while the ranks read its metadata (the ranks "
                "read different commits, whose items would mix): load again"
            )
        schedule = broadcast_schedule(plans, self.storage_data) if self.broadcast else None
        return [replace(plan, storage_data=schedule) for plan in plans]

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read, verify and place every item of this rank's plan (and take part in the broadcasts)."""
        future: Future[None] = Future()
        self.read_bytes = 0
        schedule: list[Broadcast] = plan.storage_data if self.broadcast and plan.storage_data else []
        shared = {b.index for b in schedule}
        own = [ri for ri in plan.items if ri.storage_index not in shared]
        try:
            with StagingCache() as cache:
                self._read_items(own, planner, cache)
                self._broadcast(schedule, plan.items, planner, cache)
        finally:
            self.close()  # the pinned data files: DCP never closes a storage reader
        future.set_result(None)
        return future

    def _read_items(self, items: list[ReadItem], planner: LoadPlanner, cache: StagingCache) -> None:
        """Read items from storage in batches whose reshard scratch fits IOOptions.scratch_bytes."""
        batch: list[ReadItem] = []
        held = 0
        for ri in sorted(items, key=lambda r: self._position(r)):
            need = self.storage_data[ri.storage_index].nbytes
            if batch and held + need > self.options.scratch_bytes:
                self._read_batch(batch, planner, cache)
                batch, held = [], 0
            batch.append(ri)
            held += need
        if batch:
            self._read_batch(batch, planner, cache)

    def _position(self, ri: ReadItem) -> tuple[str, int]:
        """Where an item's bytes start: reads go in file order."""
        record = self.storage_data[ri.storage_index]
        return record.file, record.chunks[0][0] if record.chunks else 0

    def _read_batch(self, items: list[ReadItem], planner: LoadPlanner, cache: StagingCache) -> None:
        """Plan the reads of a batch, run them file by file (the destinations faulted in ahead of them: first
        touch in the kernel, not one fault per page), then copy and commit each destination."""
        placed = [self._want(ri, planner) for ri in items]
        by_file: dict[str, list[Want]] = defaultdict(list)
        for want, _ in placed:
            by_file[want.record.file].append(want)
            self.read_bytes += want.end - want.start
        prefaulter = Prefaulter((), self.options.prefault_threads, within=_cpu_ranges(want for want, _ in placed))
        try:
            for name, file_pieces in by_file.items():
                self._read_file(name, file_pieces, cache)
        finally:
            prefaulter.join()
        for _, finish in placed:
            finish()

    def _want(self, ri: ReadItem, planner: LoadPlanner) -> tuple[Want, Any]:
        """What bytes a read item needs, where they go, and what to do once they are there."""
        record = self.storage_data[ri.storage_index]
        fqn = ri.storage_index.fqn
        if ri.type == LoadItemType.BYTE_IO:
            scratch = torch.empty(record.nbytes, dtype=torch.uint8)
            load = lambda: _load_bytes(planner, ri, scratch, self.store.where(record.file))  # noqa: E731
            return Want(record, fqn, 0, record.nbytes, scratch.data_ptr(), scratch), load
        dest = planner.resolve_tensor(ri).detach()
        offsets, lengths = tuple(ri.storage_offsets), tuple(ri.lengths)
        start, end, whole = row_range(record, offsets, lengths)
        if whole and dest.device.type == "cpu" and dest.is_contiguous() and dest.dtype == dtype_of(record):
            return Want(record, fqn, start, end, dest.data_ptr(), dest), lambda: planner.commit_tensor(ri, dest)
        scratch = torch.empty(end - start, dtype=torch.uint8)

        def finish() -> None:
            dest.copy_(box_of(scratch, record, offsets, lengths))
            planner.commit_tensor(ri, dest)

        return Want(record, fqn, start, end, scratch.data_ptr(), scratch), finish

    def _read_file(self, name: str, wants: list[Want], cache: StagingCache) -> None:
        """Run one data file's reads for `wants`, in file order, on the options' backend."""
        staging = cache.within(self.options.buffer_bytes, self._slot_bytes)
        reader = self.store.reader(name, self.options, staging)
        where = str(self.path).rstrip("/")
        try:
            file_pieces = [
                piece
                for want in wants
                for piece in pieces(where, want, self._codec(want.record.codec), self.verify, reader.memory_alignment)
            ]
            reader.read(sorted(file_pieces, key=lambda p: p.offset))
        finally:
            reader.close()

    def _codec(self, descriptor: str) -> Any:
        """The codec a record was written with (None for raw bytes)."""
        return None if descriptor == "none" else codecs.from_descriptor(descriptor, threads=1)

    def _broadcast(
        self, schedule: list[Broadcast], items: list[ReadItem], planner: LoadPlanner, cache: StagingCache
    ) -> None:
        """Every rank, in the schedule's order: the reader reads the whole item, everyone receives it, and
        the ranks that asked for parts of it take them."""
        import torch.distributed as dist

        mine = defaultdict(list)
        for ri in items:
            mine[ri.storage_index].append(ri)
        for entry in schedule:
            record = self.storage_data[entry.index]
            whole = torch.empty(record.nbytes, dtype=torch.uint8)
            if entry.reader == self.rank:
                want = Want(record, entry.index.fqn, 0, record.nbytes, whole.data_ptr(), whole)
                self._read_file(record.file, [want], cache)
                self.read_bytes += record.nbytes
            dist.broadcast(whole, src=entry.reader)
            for ri in mine.get(entry.index, []):
                _take(ri, record, whole, planner, self.store.where(record.file))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """A directory holding a committed checkpoint, or an `s3://bucket/prefix` (read when loaded)."""
        if not isinstance(checkpoint_id, (str, os.PathLike)):
            return False
        try:
            return place(checkpoint_id).holds_dcp()
        except CheckpointError:
            return False


def _cpu_ranges(wants: Any) -> list[tuple[int, int]]:
    """The host memory the wants' bytes land in (destinations and scratch), in read order."""
    return [
        (w.address, w.end - w.start)
        for w in wants
        if isinstance(w.owner, torch.Tensor) and w.owner.device.type == "cpu"
    ]


def _slot_of(records: Any, default: int) -> int:
    """The staging buffer a stored chunk needs: the largest one stored (4 KiB-aligned reads), never more."""
    return max((round_up(stored, ALIGN) for r in records for _, stored in r.chunks), default=default)


def _check_extent(path: str, fqn: str, record: ItemRecord, size: int) -> None:
    """Every chunk of a record lies inside its data file (TruncatedCheckpoint if the file is short), no two at the
    same bytes: the item's declared size is then bounded by the bytes stored (InvalidCheckpoint if not)."""
    spans = sorted(record.chunks)
    end = max((offset + stored for offset, stored in spans), default=0)
    if end > size:
        raise TruncatedCheckpoint(path, end, size)
    if any(a + n > b for (a, n), (b, _) in itertools.pairwise(spans)):
        distinct = sum(_union(spans))
        raise InvalidCheckpoint(
            path, f"{fqn!r}: {record.nbytes} bytes declared, {distinct} stored (chunks that share stored bytes)"
        )


def _union(spans: list[tuple[int, int]]) -> list[int]:
    """The lengths of the union of sorted (offset, length) spans."""
    merged: list[list[int]] = []
    for offset, stored in spans:
        if merged and offset <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], offset + stored)
        else:
            merged.append([offset, offset + stored])
    return [hi - lo for lo, hi in merged]


def _load_bytes(planner: LoadPlanner, ri: ReadItem, data: torch.Tensor, path: str) -> None:
    """Hand a byte item to the planner only as rebuilt by the weights-only unpickler."""
    planner.load_bytes(ri, io.BytesIO(loadable_bytes(host_bytes(data), ri.storage_index.fqn, path)))


def _take(ri: ReadItem, record: ItemRecord, whole: torch.Tensor, planner: LoadPlanner, path: str) -> None:
    """A read item's part of an item held whole in memory (of the data file at `path`): bytes to load_bytes, or
    a box to the tensor."""
    if ri.type == LoadItemType.BYTE_IO:
        _load_bytes(planner, ri, whole, path)
        return
    offsets, lengths = tuple(ri.storage_offsets), tuple(ri.lengths)
    start, end, _ = row_range(record, offsets, lengths)
    dest = planner.resolve_tensor(ri).detach()
    dest.copy_(box_of(whole[start:end], record, offsets, lengths))
    planner.commit_tensor(ri, dest)


def broadcast_schedule(plans: list[LoadPlan], records: dict[MetadataIndex, ItemRecord]) -> list[Broadcast]:
    """Items more than one rank reads, each assigned to the least-loaded of its readers (largest first)."""
    readers: dict[MetadataIndex, set[int]] = defaultdict(set)
    for rank, plan in enumerate(plans):
        for ri in plan.items:
            readers[ri.storage_index].add(rank)
    shared = sorted((i for i, r in readers.items() if len(r) > 1), key=lambda i: -records[i].nbytes)
    load = [0] * len(plans)
    schedule = []
    for index in shared:
        reader = min(readers[index], key=lambda r: (load[r], r))
        load[reader] += records[index].nbytes
        schedule.append(Broadcast(index, reader, records[index].nbytes))
    return schedule


def _rank() -> int:
    """This process's rank where DCP did not say, 0 without a process group."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
