"""State dict -> unique storages (shared ones once) -> a zip skeleton with 4 KiB-aligned records
-> the list of writes that fill it: aligned storage bodies, and small "gap" regions holding zip
headers, the pickle, storage tails and the index.

The skeleton comes from torch's own zip writer (so torch.load reads the result) run under
`skip_data()` into an in-memory sink that keeps the metadata bytes and merely seeks over data.
"""

from __future__ import annotations

import bisect
import ctypes
import pickle
import types
from dataclasses import dataclass
from typing import Any

import torch

from . import format as fmt
from . import integrity
from .memory import host_bytes, round_down
from .tree import named_tensors
from .unpickle import check_loadable

A = fmt.ALIGNMENT


@dataclass(frozen=True)
class Source:
    """One unique storage to save: its zip key, the first tensor's key path, dtype and memory."""

    key: str
    name: str
    dtype: torch.dtype
    storage: torch.UntypedStorage
    nbytes: int
    offset: int  # file offset of its record data (aligned)

    @property
    def on_cpu(self) -> bool:
        """Whether the bytes can be addressed directly (else staged through torch copies)."""
        return self.storage.device.type == "cpu"

    @property
    def body(self) -> int:
        """Bytes of the storage that fill whole aligned pages (written as data chunks)."""
        return round_down(self.nbytes, A)


@dataclass(frozen=True)
class Chunk:
    """A checksum chunk of a storage and the aligned part of it to write directly."""

    source: Source
    index: int
    start: int  # byte offset within the storage
    nbytes: int  # bytes hashed
    write_nbytes: int  # leading bytes written by this task (the rest is a tail, in a Region)


@dataclass(frozen=True)
class Region:
    """A file range outside storage bodies: zip metadata, storage tails, padding."""

    start: int
    nbytes: int


class Sink:
    """File-like target for torch's zip writer: keeps written bytes, seeks over skipped data."""

    def __init__(self) -> None:
        self.pos = 0
        self.offsets: list[int] = []
        self.pieces: list[bytearray] = []

    def write(self, data: Any) -> int:
        """Record a metadata piece at the current position."""
        piece = bytearray(data)
        if piece:
            self.offsets.append(self.pos)
            self.pieces.append(piece)
        self.pos += len(piece)
        return len(piece)

    def seek(self, offset: int, whence: int = 0) -> int:
        """Skip over record data that skip_data() does not write."""
        self.pos = self.pos + offset if whence == 1 else offset
        return self.pos

    def tell(self) -> int:
        """Current position (the file size once the writer is finished)."""
        return self.pos

    def flush(self) -> None:
        """Nothing buffered."""

    def read_at(self, offset: int, nbytes: int) -> bytes:
        """Bytes of the skeleton in [offset, offset+nbytes), zeros where data will go."""
        out = bytearray(max(0, min(nbytes, self.pos - offset)))
        self.overlay(out, offset)
        return bytes(out)

    def overlay(self, dest: Any, offset: int) -> None:
        """Copy every piece intersecting [offset, offset+len(dest)) into `dest`."""
        end = offset + len(dest)
        i = max(0, bisect.bisect_right(self.offsets, offset) - 1)
        while i < len(self.pieces) and self.offsets[i] < end:
            p, off = self.pieces[i], self.offsets[i]
            lo, hi = max(off, offset), min(off + len(p), end)
            if lo < hi:
                dest[lo - offset : hi - offset] = p[lo - off : hi - off]
            i += 1

    def patch(self, offset: int, data: bytes) -> None:
        """Replace the piece that starts at `offset` with same-length bytes (header, index)."""
        i = bisect.bisect_left(self.offsets, offset)
        if i == len(self.offsets) or self.offsets[i] != offset or len(self.pieces[i]) != len(data):
            raise AssertionError("patch must replace a whole piece of the same length")
        self.pieces[i][:] = data


@dataclass
class Plan:
    """Everything save() needs: the skeleton, the sources, and where header and index sit."""

    sink: Sink
    sources: list[Source]  # sorted by file offset
    checksum: str
    chunk_bytes: int
    header_offset: int
    index_offset: int
    index_nbytes: int
    pickle_digest: str

    def __post_init__(self) -> None:
        """Cache source offsets (sources are sorted by offset) for bisecting."""
        self.offsets = [s.offset for s in self.sources]

    @property
    def size(self) -> int:
        """Final file size in bytes."""
        return self.sink.pos


def _storage_names(obj: Any) -> dict[int, str]:
    """Map each storage (by its C pointer) to the key path of the first tensor that uses it."""
    names: dict[int, str] = {}
    for name, t in named_tensors(obj):
        names.setdefault(t.untyped_storage()._cdata, name or "<root>")
    return names


def _capturing_pickle_module(seen: dict[str, tuple[Any, torch.dtype]]) -> Any:
    """A pickle module whose Pickler records every (key -> storage, dtype) torch assigns."""

    class Pickler(pickle.Pickler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            inner = type(self).persistent_id  # torch's PyTorchPickler.persistent_id

            def persistent_id(obj: Any) -> Any:
                pid = inner(self, obj)
                if pid is not None:
                    storage = obj._untyped_storage if isinstance(obj, torch.storage.TypedStorage) else obj
                    dtype = obj.dtype if isinstance(obj, torch.storage.TypedStorage) else torch.uint8
                    seen.setdefault(pid[2], (storage, dtype))
                return pid

            self.persistent_id = persistent_id  # type: ignore[method-assign]  # shadows the class method
            super().__init__(*args, **kwargs)

    return types.SimpleNamespace(Pickler=Pickler)


def _index_storages(sources: list[Source], checksum: str, chunk: int) -> list[dict[str, Any]]:
    """Index entries with digest placeholders of the final width."""
    w = integrity.width(checksum)
    return [
        {
            "key": s.key,
            "name": s.name,
            "dtype": str(s.dtype).removeprefix("torch."),
            "nbytes": s.nbytes,
            "digests": [] if checksum == "none" else ["0" * w] * integrity.chunk_count(s.nbytes, chunk),
        }
        for s in sources
    ]


def _run_torch_writer(state_dict: Any) -> tuple[Sink, dict[str, tuple[Any, torch.dtype]], Any]:
    """Run torch's zip writer into a Sink: header placeholder, torch's records, index placeholder."""
    sink = Sink()
    seen: dict[str, tuple[Any, torch.dtype]] = {}
    writer = torch._C.PyTorchFileWriter(sink, False, A)  # type: ignore[call-overload]  # no crc32: CRCs are 0
    writer.write_record(fmt.HEADER_RECORD, bytes(fmt.HEADER.size), fmt.HEADER.size)
    with torch.serialization.skip_data():
        torch.serialization._save(state_dict, writer, _capturing_pickle_module(seen), 2, False)
    return sink, seen, writer


def build(state_dict: Any, checksum: str, chunk_bytes: int) -> Plan:
    """Lay out the file for `state_dict`: skeleton bytes, record offsets, sources, placeholders."""
    sink, seen, writer = _run_torch_writer(state_dict)
    names = _storage_names(state_dict)
    provisional = [
        Source(k, names.get(st._cdata, f"<storage {k}>"), dt, st, st.nbytes(), 0) for k, (st, dt) in seen.items()
    ]
    index_storages = _index_storages(provisional, checksum, chunk_bytes)
    placeholder = fmt.render_index(checksum, chunk_bytes, "0" * integrity.width(checksum), index_storages)
    writer.write_record(fmt.INDEX_RECORD, placeholder, len(placeholder))
    writer.write_end_of_file()
    records = fmt.read_zip_directory(sink.read_at, sink.pos)
    archive = next(iter(records)).split("/", 1)[0]
    sources = sorted(
        (
            Source(s.key, s.name, s.dtype, s.storage, s.nbytes, records[f"{archive}/data/{s.key}"].data_offset)
            for s in provisional
        ),
        key=lambda s: s.offset,
    )
    pkl = records[f"{archive}/{fmt.PICKLE_RECORD}"]
    check_loadable(bytes(sink.read_at(pkl.data_offset, pkl.nbytes)), seen, state_dict)
    fn = integrity.digest_fn(checksum)
    pickle_digest = fn(memoryview(sink.read_at(pkl.data_offset, pkl.nbytes))) if fn else ""
    index = records[f"{archive}/{fmt.INDEX_RECORD}"]
    return Plan(
        sink,
        sources,
        checksum,
        chunk_bytes,
        records[f"{archive}/{fmt.HEADER_RECORD}"].data_offset,
        index.data_offset,
        index.nbytes,
        pickle_digest,
    )


def finalize(plan: Plan, digests: dict[str, list[str]]) -> None:
    """Patch the real index (with digests) and the header into the skeleton."""
    entries = _index_storages(plan.sources, plan.checksum, plan.chunk_bytes)
    for e in entries:
        e["digests"] = list(digests.get(e["key"], [])) if plan.checksum != "none" else []
    index = fmt.render_index(plan.checksum, plan.chunk_bytes, plan.pickle_digest, entries)
    plan.sink.patch(plan.index_offset, index)
    header = fmt.Header(fmt.FORMAT_VERSION, plan.size, plan.index_offset, len(index), integrity.index_digest(index))
    plan.sink.patch(plan.header_offset, header.pack())


def chunks(plan: Plan) -> list[Chunk]:
    """Checksum chunks of every storage, in file order, with the aligned part each one writes."""
    out = []
    for s in plan.sources:
        for k in range(integrity.chunk_count(s.nbytes, plan.chunk_bytes)):
            start = k * plan.chunk_bytes
            n = min(plan.chunk_bytes, s.nbytes - start)
            out.append(Chunk(s, k, start, n, max(0, min(n, s.body - start))))
    return out


def regions(plan: Plan, max_bytes: int) -> list[Region]:
    """The file ranges not covered by storage bodies, split into pieces of at most `max_bytes`."""
    bodies = sorted((s.offset, s.offset + s.body) for s in plan.sources if s.body)
    gaps, pos = [], 0
    for start, end in [*bodies, (plan.size, plan.size)]:
        if start > pos:
            gaps.append((pos, start))
        pos = max(pos, end)
    return [Region(g, min(max_bytes, end - g)) for lo, end in gaps for g in range(lo, end, max_bytes)]


def fill_region(plan: Plan, region: Region, dest: Any) -> None:
    """Compose a region's bytes into `dest` (pre-zeroed): skeleton pieces plus storage tails."""
    plan.sink.overlay(dest, region.start)
    end = region.start + region.nbytes
    first = max(0, bisect.bisect_right(plan.offsets, region.start) - 1)
    for s in plan.sources[first : bisect.bisect_left(plan.offsets, end)]:
        lo, hi = max(s.offset + s.body, region.start), min(s.offset + s.nbytes, end)
        if lo < hi:
            dest[lo - region.start : hi - region.start] = source_bytes(s, lo - s.offset, hi - lo)


def source_bytes(s: Source, start: int, nbytes: int) -> bytes:
    """A small copy of storage bytes [start, start+nbytes) (tails), from any device."""
    if s.on_cpu:
        return ctypes.string_at(s.storage.data_ptr() + start, nbytes)
    flat = torch.empty(0, dtype=torch.uint8, device=s.storage.device).set_(s.storage)
    return host_bytes(flat[start : start + nbytes])
