"""Read strategies of a load: where each saved storage's bytes go, as read pieces for an I/O backend.

- fresh host memory (`read_host`): storages grouped into spans of consecutive records, each span
  one anonymous mapping (huge or small pages: IOOptions.fresh_pages) that mirrors the file range, so every storage
  starts page-aligned (O_DIRECT reads land in place, with no bounce buffer) and small neighbouring
  storages come with one read. Prefault threads fault the spans in ahead of the reads (first touch
  of fresh memory can cost more than the read). Tensors are `torch.frombuffer` views of the spans.
- existing tensors (`read_host` with `placed`): a chunk lands straight in the destination where the
  device takes its address (statx's O_DIRECT memory alignment: 4 bytes on NVMe, 512 on virtio) and is
  verified there; otherwise in a reused staging buffer, verified there and copied into the destination.
  The destinations' pages are faulted in ahead of the reads, in the kernel.
- a copy-on-write mapping of the file (`map_storages`): page-cache pages faulted in by parallel
  readahead, verified as they arrive; no fresh memory to zero.
- CUDA memory (`read_device`): new device tensors filled by a gds reader, verified on the host.
Every chunk is checked against its saved digest as it arrives; a short read names the file range.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch

from . import backends, integrity
from . import format as fmt
from .errors import CorruptCheckpoint, TruncatedCheckpoint
from .memory import Prefaulter, address_of, copy, huge_buffer, populate_read, round_up, view
from .options import IOOptions
from .parallel import run_parallel


@dataclass(frozen=True)
class Span:
    """One destination mapping mirroring file bytes [start, start + nbytes)."""

    start: int
    nbytes: int
    storages: tuple[fmt.StorageEntry, ...]


@dataclass(frozen=True)
class ReadTask:
    """One read of file bytes [start, start + nbytes) into a span, and the chunks it completes."""

    span: int
    start: int
    nbytes: int
    checks: tuple[tuple[fmt.StorageEntry, int], ...]  # (storage, chunk index) verified after the read


def check_chunk(index: fmt.Index, s: fmt.StorageEntry, k: int, data: memoryview) -> None:
    """Compare chunk `k` of storage `s` (its bytes in `data`) with its digest; name the tensor on mismatch."""
    digest = integrity.digest_fn(index.checksum)
    if digest is None:
        return
    start = k * index.chunk_bytes
    if digest(data) != s.digests[k]:
        raise CorruptCheckpoint(
            index.path, s.name, f"storage {s.key}, bytes {start}..{start + len(data)} at file offset {s.offset + start}"
        )


def chunk_size(index: fmt.Index, s: fmt.StorageEntry, k: int) -> int:
    """Bytes in chunk `k` of storage `s` (the last chunk may be short)."""
    return min(index.chunk_bytes, s.nbytes - k * index.chunk_bytes)


def _need(index: fmt.Index, got: int, offset: int, need: int) -> None:
    """A read that came back short means the file was cut: name where."""
    if got < need:
        raise TruncatedCheckpoint(index.path, offset + need, offset + got)


def plan_spans(storages: tuple[fmt.StorageEntry, ...], span_bytes: int) -> list[Span]:
    """Group non-empty storages, in file order, into spans of at most `span_bytes` (big ones alone)."""
    spans: list[Span] = []
    group: list[fmt.StorageEntry] = []
    for s in sorted((s for s in storages if s.nbytes), key=lambda s: s.offset):
        if group and s.offset + s.nbytes - group[0].offset > span_bytes:
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


def _storage_tasks(i: int, s: fmt.StorageEntry, chunk: int, align: int) -> list[ReadTask]:
    """One task per checksum chunk of a large storage."""
    out = []
    for k in range(integrity.chunk_count(s.nbytes, chunk)):
        n = min(chunk, s.nbytes - k * chunk)
        out.append(ReadTask(i, s.offset + k * chunk, round_up(n, align), ((s, k),)))
    return out


def _span_piece(index: fmt.Index, task: ReadTask, span: Span, base: int, verify: bool) -> backends.ReadPiece:
    """A read of `task` into its span (mapped at `base`), checking length and then each chunk it completes."""
    need = max(s.offset + k * index.chunk_bytes + chunk_size(index, s, k) for s, k in task.checks) - task.start

    def done(data: memoryview) -> None:
        _need(index, len(data), task.start, need)
        for s, k in task.checks if verify else ():
            at = s.offset + k * index.chunk_bytes - task.start
            check_chunk(index, s, k, data[at : at + chunk_size(index, s, k)])

    limit = min(task.nbytes, span.start + span.nbytes - task.start)
    return backends.ReadPiece(task.start, limit, need, base + task.start - span.start, done)


def _placed_piece(
    index: fmt.Index, s: fmt.StorageEntry, k: int, dest: int, reader: backends.Reader, verify: bool
) -> backends.ReadPiece:
    """A read of chunk `k` of `s` straight into `dest` where the reader takes its address and the whole read
    fits, else into a staging buffer, verified there, then copied to `dest`."""
    n, start = chunk_size(index, s, k), k * index.chunk_bytes
    offset, length = s.offset + start, round_up(n, reader.alignment)
    in_place = (dest + start) % reader.memory_alignment == 0 and start + length <= s.nbytes

    def done(data: memoryview) -> None:
        _need(index, len(data), offset, n)
        if verify:
            check_chunk(index, s, k, data[:n])
        if not in_place:
            copy(dest + start, address_of(data), n)

    return backends.ReadPiece(offset, length, n, dest + start if in_place else None, done)


def read_host(
    index: fmt.Index, reader: backends.Reader, options: IOOptions, verify: bool, placed: dict[str, int]
) -> dict[str, torch.UntypedStorage]:
    """Read every storage: those in `placed` (key -> address of existing memory) into place (straight or
    through staging buffers), the rest into fresh spans; both prefaulted ahead of the reads."""
    verify = verify and index.checksum != "none"
    spans = plan_spans(tuple(s for s in index.storages if s.key not in placed), options.span_bytes)
    maps = [huge_buffer(span.nbytes, huge=options.fresh_pages == "huge") for span in spans]
    bases = [address_of(m) for m in maps]
    pieces = [
        _span_piece(index, t, spans[t.span], bases[t.span], verify)
        for t in plan_reads(spans, index.chunk_bytes, reader.alignment)
    ]
    for s in index.storages:
        if s.key in placed:
            chunks = range(integrity.chunk_count(s.nbytes, index.chunk_bytes))
            pieces += [_placed_piece(index, s, k, placed[s.key], reader, verify) for k in chunks]
    within = [(address, s.nbytes) for s in index.storages if (address := placed.get(s.key)) is not None]
    prefaulter = Prefaulter(zip(bases, (len(m) for m in maps)), options.prefault_threads, within)
    try:
        reader.read(sorted(pieces, key=lambda p: p.offset))
    finally:
        prefaulter.join()
    out = _views_of_spans(spans, maps)
    for s in index.storages:
        if s.key not in placed:
            out.setdefault(s.key, torch.UntypedStorage(0))
    return out


def _views_of_spans(spans: list[Span], maps: list[mmap.mmap]) -> dict[str, torch.UntypedStorage]:
    """uint8 storages viewing their bytes inside the span mappings (the views keep the maps alive)."""
    out: dict[str, torch.UntypedStorage] = {}
    for span, mm in zip(spans, maps):
        for s in span.storages:
            t = torch.frombuffer(mm, dtype=torch.uint8, count=s.nbytes, offset=s.offset - span.start)
            out[s.key] = t.untyped_storage()
    return out


def map_storages(index: fmt.Index, options: IOOptions, verify: bool) -> dict[str, torch.UntypedStorage]:
    """Map the file copy-on-write and fault every storage in with parallel readahead; storages are
    views of the mapping (page-cache pages: no copy, no fresh memory to zero), verified as they arrive."""
    verify = verify and index.checksum != "none"
    end = max((s.offset + s.nbytes for s in index.storages), default=0)
    out = {s.key: torch.UntypedStorage(0) for s in index.storages if not s.nbytes}
    if end == 0:
        return out
    with open(index.data_path, "rb", buffering=0) as f:
        size = os.fstat(f.fileno()).st_size
        if size < end:
            raise TruncatedCheckpoint(index.path, end, size)
        mm = mmap.mmap(f.fileno(), end, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = address_of(mm)
    work = sorted(
        (s.offset + k * index.chunk_bytes, s, k)
        for s in index.storages
        if s.nbytes
        for k in range(integrity.chunk_count(s.nbytes, index.chunk_bytes))
    )
    jobs: list[Callable[[], None]] = [partial(_fault_in, index, base, s, k, verify) for _, s, k in work]
    run_parallel(jobs, options.threads, "ckptio-map")
    for s in index.storages:
        if s.nbytes:
            out[s.key] = torch.frombuffer(mm, dtype=torch.uint8, count=s.nbytes, offset=s.offset).untyped_storage()
    return out


def _fault_in(index: fmt.Index, base: int, s: fmt.StorageEntry, k: int, verify: bool) -> None:
    """Read chunk `k` of `s` into the mapping at `base` (readahead), then check it."""
    at = base + s.offset + k * index.chunk_bytes
    populate_read(at, chunk_size(index, s, k))
    if verify:
        check_chunk(index, s, k, view(at, chunk_size(index, s, k)))


def read_device(
    index: fmt.Index, reader: backends.Reader, device: torch.device, verify: bool
) -> dict[str, torch.UntypedStorage]:
    """Read every storage into new uint8 tensors on a CUDA `device` (gds), each chunk's byte count
    checked and, with `verify`, its bytes hashed on the host after a device-to-host copy."""
    verify = verify and index.checksum != "none"
    out: dict[str, torch.UntypedStorage] = {}
    pieces = []
    for s in index.storages:
        flat = torch.empty(s.nbytes, dtype=torch.uint8, device=device)
        out[s.key] = flat.untyped_storage()
        for k in range(integrity.chunk_count(s.nbytes, index.chunk_bytes)):
            n, start = chunk_size(index, s, k), k * index.chunk_bytes
            done = partial(_check_device_chunk, index, s, k, n) if verify else None
            pieces.append(backends.ReadPiece(s.offset + start, n, n, None, done, flat[start : start + n]))
    reader.read(pieces)
    return out


def _check_device_chunk(index: fmt.Index, s: fmt.StorageEntry, k: int, n: int, data: memoryview) -> None:
    """A device chunk's bytes, copied back to the host: all there, and matching the saved digest."""
    _need(index, len(data), s.offset + k * index.chunk_bytes, n)
    check_chunk(index, s, k, data[:n])
