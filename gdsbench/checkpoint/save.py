"""save(): fill the zip skeleton with parallel positional writes, then commit header+index last.

Write path (FastPersist-style): `threads` workers take checksum chunks (default 16 MiB) in file
order. A chunk whose memory is page-aligned goes to disk with no copy; otherwise the worker
memcpy's it into one of a few reusable, huge-page-backed aligned staging buffers, hashes the staged
bytes and pwrite's them. pwrite, memmove and the hashes all release the GIL, so one worker's copy
overlaps other workers' writes (the staging buffers rotate among the workers: N-way buffering).
Storage tails shorter than a page go out inside the small gap regions around zip headers.
"""

from __future__ import annotations

import errno
import os
import queue
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from . import durable, integrity
from . import io as backends
from . import plan as planning
from .memory import POOL, Staging, copy, queue_of, round_up, run_parallel, view

DEFAULT_THREADS = 4
DEFAULT_CHUNK_BYTES = 16 << 20
DEFAULT_BUFFER_BYTES = 64 << 20


@dataclass
class _Writer:
    """Shared state of one save: fd, backend, staging buffers, digests being collected."""

    fd: int
    backend: backends.Backend
    plan: planning.Plan
    buffers: queue.Queue[Staging]
    digests: dict[str, list[str]]

    def _stage(self, chunk: planning.Chunk, buf: Staging) -> memoryview:
        """Copy a chunk into an aligned staging buffer (memmove on CPU, torch copy otherwise)."""
        s = chunk.source
        if s.on_cpu:
            copy(buf.address, s.storage.data_ptr() + chunk.start, chunk.nbytes)
        else:
            flat = torch.empty(0, dtype=torch.uint8, device=s.storage.device).set_(s.storage)
            dst = torch.frombuffer(buf.mm, dtype=torch.uint8, count=chunk.nbytes)
            dst.copy_(flat[chunk.start : chunk.start + chunk.nbytes])
        return view(buf.address, chunk.nbytes)

    def _direct_ok(self, chunk: planning.Chunk) -> bool:
        """Whether the chunk's own memory satisfies the backend's alignment (no copy needed)."""
        s = chunk.source
        return s.on_cpu and (s.storage.data_ptr() + chunk.start) % self.backend.alignment == 0

    def _finish(self, chunk: planning.Chunk, data: memoryview) -> None:
        """Hash the chunk's bytes and write its aligned part."""
        fn = integrity.digest_fn(self.plan.checksum)
        if fn:
            self.digests[chunk.source.key][chunk.index] = fn(data)
        if chunk.write_nbytes:
            backends.write_all(self.fd, data[: chunk.write_nbytes], chunk.source.offset + chunk.start)

    def write_chunk(self, chunk: planning.Chunk) -> None:
        """Write one storage chunk, staging it only if its memory is unaligned or off-CPU."""
        if self._direct_ok(chunk):
            self._finish(chunk, view(chunk.source.storage.data_ptr() + chunk.start, chunk.nbytes))
            return
        buf = self.buffers.get()
        try:
            self._finish(chunk, self._stage(chunk, buf))
        finally:
            self.buffers.put(buf)

    def write_region(self, region: planning.Region) -> None:
        """Compose a gap region (headers, tails, padding) in a staging buffer and write it."""
        buf = self.buffers.get()
        try:
            padded = round_up(region.nbytes, self.backend.alignment)
            data = view(buf.address, padded)
            data[:] = bytes(padded)
            planning.fill_region(self.plan, region, data)
            backends.write_all(self.fd, data if self.backend.alignment > 1 else data[: region.nbytes], region.start)
        finally:
            self.buffers.put(buf)


def _is_commit_region(plan: planning.Plan, region: planning.Region) -> bool:
    """Regions holding the header or the index/central directory are written last (commit)."""
    return region.start < plan.header_offset + 4096 or region.start + region.nbytes > plan.index_offset


def _preallocate(fd: int, nbytes: int) -> None:
    """Reserve the file's blocks up front so parallel O_DIRECT writes are overwrites, not appends."""
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise


def _write_file(fd: int, backend: backends.Backend, plan: planning.Plan, threads: int, buffer_bytes: int) -> None:
    """Data chunks and interior regions in parallel, then header and index regions, then fsync."""
    count = max(1, buffer_bytes // plan.chunk_bytes)
    staging = POOL.take(count, plan.chunk_bytes)
    buffers = queue_of(staging)
    fn_digests = {s.key: [""] * integrity.chunk_count(s.nbytes, plan.chunk_bytes) for s in plan.sources}
    writer = _Writer(fd, backend, plan, buffers, fn_digests)
    try:
        _preallocate(fd, round_up(plan.size, backend.alignment))
        regions = planning.regions(plan, plan.chunk_bytes)
        tasks: list[tuple[Any, Any]] = [(writer.write_chunk, c) for c in planning.chunks(plan)]
        tasks += [(writer.write_region, r) for r in regions if not _is_commit_region(plan, r)]
        tasks.sort(key=lambda t: t[1].start + (t[1].source.offset if isinstance(t[1], planning.Chunk) else 0))
        run_parallel([partial(fn, arg) for fn, arg in tasks], threads, "gdsbench-save")
        planning.finalize(plan, writer.digests)
        for r in regions:
            if _is_commit_region(plan, r):
                writer.write_region(r)
        os.ftruncate(fd, plan.size)
        os.fsync(fd)
    finally:
        POOL.give_back(staging, keep=count)


def _check_args(threads: int | None, buffer_bytes: int, chunk_bytes: int) -> int:
    """Validate numeric options; return the thread count to use."""
    if chunk_bytes <= 0 or chunk_bytes % 4096:
        raise ValueError(f"chunk_bytes must be a positive multiple of 4096, not {chunk_bytes}")
    if buffer_bytes < chunk_bytes:
        raise ValueError(f"buffer_bytes ({buffer_bytes}) must hold at least one chunk ({chunk_bytes})")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, not {threads}")
    return threads or DEFAULT_THREADS


def save(
    state_dict: Any,
    path: str | os.PathLike[str],
    *,
    threads: int | None = None,
    buffer_bytes: int = DEFAULT_BUFFER_BYTES,
    checksum: str | None = "xxh3",
    backend: str = "auto",
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    recycle: bool = False,
) -> None:
    """Save a (nested) state dict durably, in a file torch.load(weights_only=True) can read.

    The file is written under a temporary name in the same directory, fsynced, renamed over `path`
    and the directory fsynced: a crash never leaves a torn file at `path` nor harms the previous one.

    Args:
        state_dict: nested dicts/lists/tuples of tensors (any dtype, views, shared storages) and
            plain Python values (int, float, str, bool, None, ...).
        path: destination file; replaced atomically if it exists.
        threads: writer threads (default 4).
        buffer_bytes: total size of the reusable aligned staging buffers (default 64 MiB); extra
            memory used by a save is bounded by this plus small metadata.
        checksum: "xxh3" (default), "crc32c", or None to record no data checksums.
        backend: "auto" or "direct" (O_DIRECT, falling back to buffered I/O with a
            DirectIOFallbackWarning where the filesystem refuses it) or "buffered".
        chunk_bytes: I/O and checksum granularity, a multiple of 4096 (default 16 MiB).
        recycle: keep the replaced checkpoint as a hidden spare (`.NAME.gdsbench-spare`) and write
            the next save into its blocks before renaming it into place: overwrites instead of
            new-file writes, at the cost of disk space for two generations. A spare still open
            anywhere (a reader of that generation) is never overwritten. Default False: a save
            without recycling removes a spare left by earlier recycling saves to `path`.

    Returns:
        None.

    Raises:
        ValueError: bad option values or backend name.
        BackendUnavailable: backend="gds" (load-only).
        OSError: the filesystem failed (ENOSPC, EACCES, ...); the previous file at `path` is intact.
        RuntimeError: from torch's pickler, e.g. two tensors viewing one storage with different dtypes.
    """
    nthreads = _check_args(threads, buffer_bytes, chunk_bytes)
    algorithm = integrity.normalize(checksum)
    backends.check_name(backend)
    plan = planning.build(state_dict, algorithm, chunk_bytes)
    with durable.replace_atomically(os.fspath(path), recycle=recycle) as target:
        chosen, fd = backends.open_with_fallback(target.path, backend, write=True, existing=target.recycled)
        try:
            _write_file(fd, chosen, plan, nthreads, buffer_bytes)
        finally:
            os.close(fd)
