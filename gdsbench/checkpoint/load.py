"""load(): validate the index, read storages with parallel preadv straight into their final memory,
verify chunk checksums in the reading threads, then rebuild the object with torch's weights_only
unpickler (never arbitrary unpickling).

Destination memory: storages are grouped into spans of consecutive records; each span is one
anonymous mapping advised to use huge pages that mirrors the file range, so every storage starts
page-aligned (O_DIRECT reads land in place, with no bounce buffer: a tail's page is padded inside
the span) and small neighbouring storages are fetched with one read. Tensors are
`torch.frombuffer` views of the span, which keeps the mapping alive while any tensor uses it.
"""

from __future__ import annotations

import io as _pyio
import mmap as _mmap
import os
import pickle
import queue
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from . import format as fmt
from . import integrity
from . import io as backends
from .errors import BackendUnavailable, CorruptCheckpoint, InvalidCheckpoint, TruncatedCheckpoint
from .io import gds
from .memory import (
    POOL,
    Prefaulter,
    Staging,
    address_of,
    copy,
    huge_buffer,
    populate_read,
    queue_of,
    round_up,
    run_parallel,
    view,
)
from .plan import tensor_names

DEFAULT_THREADS = 8
# Destination memory: huge pages let one O_DIRECT request grow past the ~1 MiB that 254 segments of
# 4 KiB pages allow, and prefault threads pay the first-touch cost ahead of the reads. Measured here
# (1.5 GiB, cold): 4 KiB pages faulted by the reads 1.3 GB/s; huge pages so 0.7-1.1; huge pages with
# 2 prefault threads 2.3-2.7 GB/s, against fio's 1.15 GB/s (16M, iodepth 8, malloc buffers).
HUGE_DEST = True
PREFAULT_THREADS = 2
IN_PLACE_BUFFERS = 4  # staging buffers for loads into existing tensors: 64 MiB in flight at 16 MiB chunks
SPAN_BYTES = 64 << 20  # storages smaller than this share mappings of up to this size


@dataclass(frozen=True)
class Span:
    """One destination mapping mirroring file bytes [start, start + nbytes)."""

    start: int
    nbytes: int
    storages: tuple[fmt.StorageEntry, ...]


@dataclass(frozen=True)
class ReadTask:
    """One read of file bytes [start, start + nbytes) into a span, then digests to check."""

    span: int
    start: int
    nbytes: int
    checks: tuple[tuple[fmt.StorageEntry, int], ...]  # (storage, chunk index) verified after the read


def plan_spans(storages: tuple[fmt.StorageEntry, ...]) -> list[Span]:
    """Group non-empty storages, in file order, into spans of at most SPAN_BYTES (big ones alone)."""
    spans: list[Span] = []
    group: list[fmt.StorageEntry] = []
    for s in sorted((s for s in storages if s.nbytes), key=lambda s: s.offset):
        if group and s.offset + s.nbytes - group[0].offset > SPAN_BYTES:
            spans.append(_span(group))
            group = []
        group.append(s)
    if group:
        spans.append(_span(group))
    return spans


def _span(group: list[fmt.StorageEntry]) -> Span:
    """A span covering `group`, its end padded to a page."""
    end = round_up(group[-1].offset + group[-1].nbytes, fmt.ALIGNMENT)
    return Span(group[0].offset, end - group[0].offset, tuple(group))


def _storage_tasks(i: int, s: fmt.StorageEntry, chunk: int, align: int) -> list[ReadTask]:
    """One task per checksum chunk of a large storage."""
    out = []
    for k in range(integrity.chunk_count(s.nbytes, chunk)):
        n = min(chunk, s.nbytes - k * chunk)
        out.append(ReadTask(i, s.offset + k * chunk, round_up(n, align), ((s, k),)))
    return out


def plan_reads(spans: list[Span], chunk: int, align: int) -> list[ReadTask]:
    """Reads in file order: chunks of large storages; runs of small storages merged up to `chunk`."""
    tasks: list[ReadTask] = []
    for i, span in enumerate(spans):
        run: list[fmt.StorageEntry] = []
        for s in (*span.storages, None):
            fits = s is not None and s.nbytes < chunk and (not run or s.offset + s.nbytes - run[0].offset <= chunk)
            if run and not fits:
                end = run[-1].offset + run[-1].nbytes
                tasks.append(
                    ReadTask(i, run[0].offset, round_up(end, align) - run[0].offset, tuple((r, 0) for r in run))
                )
                run = []
            if s is None:
                break
            if s.nbytes < chunk:
                run.append(s)
            else:
                tasks.extend(_storage_tasks(i, s, chunk, align))
    return tasks


@dataclass
class _Reader:
    """Shared state of one load: fd, index, destination mappings and their addresses."""

    fd: int
    index: fmt.Index
    spans: list[Span]
    maps: list[Any]
    addresses: list[int]
    verify: bool

    def run(self, task: ReadTask) -> None:
        """Read one task's bytes into place and verify the chunks it completes."""
        span = self.spans[task.span]
        dest_addr = self.addresses[task.span] + (task.start - span.start)
        limit = min(task.nbytes, span.start + len(self.maps[task.span]) - task.start)
        got = backends.read_full(self.fd, view(dest_addr, limit), task.start)
        need = max(s.offset + min(self.index.chunk_bytes * (k + 1), s.nbytes) for s, k in task.checks) - task.start
        if got < need:
            raise TruncatedCheckpoint(self.index.path, task.start + need, task.start + got)
        if self.verify:
            self._verify(task, self.addresses[task.span] - span.start)

    def _verify(self, task: ReadTask, base: int) -> None:
        """Check each chunk the task completed; `base` maps file offsets to addresses."""
        for s, k in task.checks:
            check_chunk(self.index, s, k, base + s.offset + k * self.index.chunk_bytes)


def check_chunk(index: fmt.Index, s: fmt.StorageEntry, k: int, address: int) -> None:
    """Compare chunk `k` of storage `s`, in memory at `address`, with its digest; name the tensor on mismatch."""
    fn = integrity.digest_fn(index.checksum)
    if fn is None:
        return
    chunk = index.chunk_bytes
    n = min(chunk, s.nbytes - k * chunk)
    if fn(view(address, n)) != s.digests[k]:
        raise CorruptCheckpoint(
            index.path,
            s.name,
            f"storage {s.key}, bytes {k * chunk}..{k * chunk + n} at file offset {s.offset + k * chunk}",
        )


def _storages_from_spans(spans: list[Span], maps: list[Any]) -> dict[str, torch.UntypedStorage]:
    """uint8 storages viewing their bytes inside the span mappings (the views keep maps alive)."""
    out: dict[str, torch.UntypedStorage] = {}
    for span, mm in zip(spans, maps):
        for s in span.storages:
            t = torch.frombuffer(mm, dtype=torch.uint8, count=s.nbytes, offset=s.offset - span.start)
            out[s.key] = t.untyped_storage()
    return out


@dataclass
class _InPlace:
    """Reads chunks of storages into existing tensors through reused aligned staging buffers.

    A tensor's memory rarely meets O_DIRECT's alignment (torch's large CPU tensors start 64 bytes past
    a page), so each chunk lands in a pooled, already-touched staging buffer, is verified there, and is
    copied into the tensor (memmove runs at ~15 GB/s here, far above the disk).
    """

    fd: int
    index: fmt.Index
    align: int
    buffers: queue.Queue[Staging]
    verify: bool

    def run(self, s: fmt.StorageEntry, k: int, dest: int) -> None:
        """Read, verify and place chunk `k` of storage `s` at address `dest`."""
        chunk = self.index.chunk_bytes
        n = min(chunk, s.nbytes - k * chunk)
        buf = self.buffers.get()
        try:
            got = backends.read_full(self.fd, view(buf.address, round_up(n, self.align)), s.offset + k * chunk)
            if got < n:
                raise TruncatedCheckpoint(self.index.path, s.offset + k * chunk + n, s.offset + k * chunk + got)
            if self.verify:
                check_chunk(self.index, s, k, buf.address)
            copy(dest + k * chunk, buf.address, n)
        finally:
            self.buffers.put(buf)


def targets(index: fmt.Index, into: Any) -> dict[str, torch.Tensor]:
    """Storages a tensor of `into` can receive whole: same key path, dtype and size, CPU, contiguous."""
    by_name = dict(tensor_names(into)) if into is not None else {}
    found = {}
    for s in index.storages:
        t = by_name.get(s.name)
        if (
            t is not None
            and t.device.type == "cpu"
            and t.is_contiguous()
            and t.storage_offset() == 0
            and str(t.dtype).removeprefix("torch.") == s.dtype
            and t.untyped_storage().nbytes() == s.nbytes
        ):
            found[s.key] = t
    return found


def read_storages(
    fd: int, backend: backends.Backend, index: fmt.Index, threads: int, verify: bool, into: Any = None
) -> dict[str, torch.UntypedStorage]:
    """Read every storage of `index`, verifying as it goes: into matching tensors of `into`, else into
    fresh huge-page CPU memory prefaulted ahead of the reads."""
    verify = verify and index.checksum != "none"
    placed = targets(index, into)
    spans = plan_spans(tuple(s for s in index.storages if s.key not in placed))
    maps = [huge_buffer(s.nbytes, huge=HUGE_DEST) for s in spans]
    addresses = [address_of(m) for m in maps]
    reader = _Reader(fd, index, spans, maps, addresses, verify)
    jobs = [(t.start, partial(reader.run, t)) for t in plan_reads(spans, index.chunk_bytes, backend.alignment)]
    staging = POOL.take(min(threads, IN_PLACE_BUFFERS), index.chunk_bytes) if placed else []
    in_place = _InPlace(fd, index, backend.alignment, queue_of(staging), verify)
    for s in index.storages:
        if s.key in placed:
            jobs += [
                (s.offset + k * index.chunk_bytes, partial(in_place.run, s, k, placed[s.key].data_ptr()))
                for k in range(integrity.chunk_count(s.nbytes, index.chunk_bytes))
            ]
    prefaulter = Prefaulter(zip(addresses, (len(m) for m in maps)), PREFAULT_THREADS)
    try:
        run_parallel([job for _, job in sorted(jobs, key=lambda j: j[0])], threads, "gdsbench-load")
    finally:
        prefaulter.join()
        if staging:
            POOL.give_back(staging, keep=len(staging))
    out = _storages_from_spans(spans, maps)
    out.update({key: t.untyped_storage() for key, t in placed.items()})
    for s in index.storages:
        out.setdefault(s.key, torch.UntypedStorage(0))
    return out


def map_storages(index: fmt.Index, threads: int, verify: bool) -> dict[str, torch.UntypedStorage]:
    """Map the file copy-on-write and fault every storage in with parallel readahead; storages are
    views of the mapping (page-cache pages: no copy, no fresh memory to zero), verified as they arrive."""
    end = max((s.offset + s.nbytes for s in index.storages), default=0)
    out: dict[str, torch.UntypedStorage] = {s.key: torch.UntypedStorage(0) for s in index.storages if not s.nbytes}
    if end == 0:
        return out
    with open(index.path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size < end:
            raise TruncatedCheckpoint(index.path, end, size)
        mm = _mmap.mmap(f.fileno(), end, flags=_mmap.MAP_PRIVATE, prot=_mmap.PROT_READ | _mmap.PROT_WRITE)
    base = address_of(mm)
    chunk = index.chunk_bytes

    def fetch(s: fmt.StorageEntry, k: int) -> None:
        populate_read(base + s.offset + k * chunk, min(chunk, s.nbytes - k * chunk))
        if verify:
            check_chunk(index, s, k, base + s.offset + k * chunk)

    work = sorted(
        (
            (s.offset + k * chunk, s, k)
            for s in index.storages
            if s.nbytes
            for k in range(integrity.chunk_count(s.nbytes, chunk))
        ),
        key=lambda w: w[0],
    )
    run_parallel([partial(fetch, s, k) for _, s, k in work], threads, "gdsbench-map")
    for s in index.storages:
        if s.nbytes:
            out[s.key] = torch.frombuffer(mm, dtype=torch.uint8, count=s.nbytes, offset=s.offset).untyped_storage()
    return out


def _read_pickle(index: fmt.Index, verify: bool) -> bytes:
    """The data.pkl bytes (a small buffered read), checked against the index digest."""
    with open(index.path, "rb", buffering=0) as f:
        data = os.pread(f.fileno(), index.pickle_nbytes, index.pickle_offset)
    if len(data) != index.pickle_nbytes:
        raise TruncatedCheckpoint(
            index.path, index.pickle_offset + index.pickle_nbytes, index.pickle_offset + len(data)
        )
    fn = integrity.digest_fn(index.checksum)
    if verify and fn and fn(memoryview(data)) != index.pickle_digest:
        raise CorruptCheckpoint(index.path, "<pickle data.pkl>", "object structure record")
    return data


def _unpickle(index: fmt.Index, data: bytes, storages: dict[str, Any]) -> Any:
    """Rebuild the object with torch's weights_only unpickler, resolving storages by key."""
    from torch import _weights_only_unpickler as restricted

    entries = {s.key: s for s in index.storages}
    typed: dict[str, torch.storage.TypedStorage] = {}

    def persistent_load(saved_id: Any) -> torch.storage.TypedStorage:
        if not (isinstance(saved_id, tuple) and len(saved_id) == 5 and saved_id[0] == "storage"):
            raise InvalidCheckpoint(index.path, f"unexpected persistent id {saved_id!r:.80}")
        storage_type, key, _location, numel = saved_id[1:]
        dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
        entry = entries.get(key)
        if (
            entry is None
            or entry.dtype != str(dtype).removeprefix("torch.")
            or entry.nbytes != numel * torch._utils._element_size(dtype)
        ):
            raise InvalidCheckpoint(index.path, f"pickle refers to storage {key!r} unlike the index")
        if key not in typed:
            typed[key] = torch.storage.TypedStorage(wrap_storage=storages[key], dtype=dtype, _internal=True)
        return typed[key]

    unpickler = restricted.Unpickler(_pyio.BytesIO(data), encoding="utf-8")
    unpickler.persistent_load = persistent_load  # type: ignore[method-assign]
    try:
        return unpickler.load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, RuntimeError) as e:
        raise InvalidCheckpoint(index.path, f"weights_only unpickling refused the object: {e}") from None


def _device(map_location: Any) -> torch.device:
    """Resolve map_location (None, str, torch.device) to a CPU or CUDA device, checking CUDA exists."""
    device = torch.device("cpu" if map_location is None else map_location)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable("cuda", f"map_location={map_location!r} but no CUDA device is available")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"map_location must be 'cpu' or a CUDA device, not {map_location!r}")
    return device


def _to_device(storages: dict[str, torch.UntypedStorage], device: torch.device) -> dict[str, torch.UntypedStorage]:
    """Move CPU storages to a CUDA device (the non-gds CUDA path)."""
    return {k: v.to(device=device) if device.type != "cpu" else v for k, v in storages.items()}


def _gds_storages(index: fmt.Index, device: torch.device) -> dict[str, torch.UntypedStorage]:
    """Read storages straight into CUDA memory with kvikio (caller checked availability)."""
    tensors = gds.read_storages(index.path, [(s.key, s.offset, s.nbytes) for s in index.storages], device)
    return {k: t.untyped_storage() for k, t in tensors.items()}


def load(
    path: str | os.PathLike[str],
    *,
    map_location: Any = "cpu",
    threads: int | None = None,
    verify: bool = True,
    backend: str = "auto",
    into: Any = None,
    mmap: bool = False,
) -> Any:
    """Load a checkpoint written by `save`, bit-exact, with storage sharing preserved.

    Args:
        path: the checkpoint file.
        map_location: "cpu" (default) or a CUDA device ("cuda", "cuda:1", torch.device).
        threads: reader threads (default 8).
        verify: check every chunk checksum and the pickle digest (default True).
        backend: "auto"/"direct" (O_DIRECT, buffered fallback with a warning), "buffered", or
            "gds" (kvikio straight into CUDA memory; needs a CUDA map_location).
        into: optional state dict (nested like the saved one) whose CPU tensors receive the data in
            place, as DCP loads do: a tensor with the same key path, dtype and size, contiguous and
            owning its whole storage, is filled and returned in the result (no new memory: in a VM
            first touch of fresh memory can cost more than the read). Other tensors load as usual.
        mmap: map the file copy-on-write instead of reading it into new memory: every page is faulted
            in up front by `threads` threads (parallel readahead through the page cache) and
            verified, and tensors are views of the mapping, as torch.load(mmap=True) makes them but
            eager and parallel. Page-cache pages are filled by the device, not zeroed first as new
            memory is, which pays where first touch is slow (VMs). The tensors keep the file
            mapped: truncating it under them (not something `save` does) would crash on access.
            Excludes `into` and `backend`.

    Returns:
        The saved object (dicts/lists/tuples of tensors and plain values).

    Raises:
        InvalidCheckpoint: not a gdsbench checkpoint, malformed index/zip directory, or a pickle
            that weights_only unpickling refuses.
        TruncatedCheckpoint: the file is shorter than its header declares.
        CorruptCheckpoint: a checksum mismatch; names the tensor's key path and the file.
        BackendUnavailable: CUDA map_location without a CUDA device, or gds unavailable (reason given).
        ValueError: bad backend name, map_location or threads; mmap with into or backend.
    """
    path = os.fspath(path)
    device = _device(map_location)
    backends.check_name(backend)
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, not {threads}")
    if mmap and (into is not None or backend not in ("auto", "buffered")):
        raise ValueError(
            "mmap=True reads through the page cache into its own mapping: it takes neither into= "
            f"nor backend={backend!r}"
        )
    index = fmt.read_index(path)
    if mmap:
        storages = _to_device(map_storages(index, threads or DEFAULT_THREADS, verify), device)
    elif _use_gds(backend, device):
        storages = _gds_storages(index, device)
    else:
        storages = _to_device(_read_cpu(index, backend, threads or DEFAULT_THREADS, verify, into), device)
    return _unpickle(index, _read_pickle(index, verify), storages)


def _use_gds(backend: str, device: torch.device) -> bool:
    """gds when asked (raising with the reason if it cannot run) or when auto and usable."""
    reason = gds.unavailable() if device.type == "cuda" else "gds needs a CUDA map_location"
    if backend == "gds" and reason:
        raise BackendUnavailable("gds", reason)
    return backend == "gds" or (backend == "auto" and reason is None)


def _read_cpu(index: fmt.Index, backend: str, threads: int, verify: bool, into: Any) -> dict[str, torch.UntypedStorage]:
    """Open with O_DIRECT (or buffered) and read every storage into CPU memory."""
    chosen, fd = backends.open_with_fallback(index.path, backend, write=False)
    try:
        return read_storages(fd, chosen, index, threads, verify, into)
    finally:
        os.close(fd)
