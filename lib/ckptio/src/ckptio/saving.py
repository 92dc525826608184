"""The save engine: a state dict's layout (plan.py) turned into write pieces for an I/O backend.

FastPersist-style: the file is filled by parallel positional writes of checksum chunks (16 MiB by
default) in file order. A chunk whose memory is aligned enough is written from the tensor itself;
any other is copied into one of a few reused, huge-page-backed staging buffers (a memmove for CPU
tensors, a torch copy for device tensors), hashed there and written, so one worker's copy overlaps
the others' writes. Storage tails shorter than a page go out inside the small "gap" regions around
zip headers. The header and index regions are written last (commit), then the backend makes the
file durable, then durable.replace_atomically renames it over the final name. An `s3://` location takes the
same pieces into an object writer (s3/single.py): one upload, the object whole or absent.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import torch

from . import backends, integrity
from . import plan as planning
from .memory import Staging, StagingBuffers, copy, round_up, view
from .options import IOOptions
from .places import place


@dataclass(frozen=True)
class Saved:
    """What one save did: where, how many bytes, whether it overwrote a recycled generation, and the most
    staging memory it held at once (its buffers, shared with the other saves of a Checkpointer)."""

    path: str
    nbytes: int
    recycled: bool
    staging_bytes: int = 0


def save_to(
    state_dict: Any,
    path: str | os.PathLike[str],
    options: IOOptions,
    checksum: str | None,
    staging: StagingBuffers,
    recycle: bool = False,
) -> Saved:
    """Write `state_dict` durably to the place `path` names (places: a file replaced atomically, an object
    uploaded whole), planned before anything is written there."""
    where = place(path)
    plan = planning.build(state_dict, integrity.normalize(checksum), options.chunk_bytes)
    with where.single_writer(options, staging, recycle) as target:
        write_file(plan, target.writer)
    return Saved(where.name, plan.size, target.recycled, staging.peak_bytes)


def write_file(plan: planning.Plan, writer: backends.Writer) -> None:
    """Data chunks and interior regions in parallel, then the header and index regions, then durable."""
    digests = {s.key: [""] * integrity.chunk_count(s.nbytes, plan.chunk_bytes) for s in plan.sources}
    regions = planning.regions(plan, plan.chunk_bytes)
    body = [_chunk_piece(c, plan.checksum, digests) for c in planning.chunks(plan)]
    body += [_region_piece(plan, r) for r in regions if not _is_commit_region(plan, r)]
    writer.reserve(plan.size)
    writer.write(sorted(body, key=lambda p: p.offset or 0))
    planning.finalize(plan, digests)
    writer.write([_region_piece(plan, r) for r in regions if _is_commit_region(plan, r)])
    writer.finish(plan.size)


def _chunk_piece(chunk: planning.Chunk, checksum: str, digests: dict[str, list[str]]) -> backends.WritePiece:
    """A checksum chunk of a storage: written from the tensor's memory when aligned, else staged."""
    source = chunk.source
    digest = integrity.digest_fn(checksum)

    def seen(data: memoryview) -> None:
        if digest:
            digests[source.key][chunk.index] = digest(data)

    address = source.storage.data_ptr() + chunk.start if source.on_cpu else None
    return backends.WritePiece(
        source.offset + chunk.start, chunk.nbytes, chunk.write_nbytes, address, lambda buf: _stage(chunk, buf), seen
    )


def _stage(chunk: planning.Chunk, buf: Staging) -> memoryview:
    """Copy a chunk into a staging buffer (memmove on CPU, a torch copy from other devices)."""
    source = chunk.source
    if source.on_cpu:
        copy(buf.address, source.storage.data_ptr() + chunk.start, chunk.nbytes)
    else:
        flat = torch.empty(0, dtype=torch.uint8, device=source.storage.device).set_(source.storage)
        dst = torch.frombuffer(buf.mm, dtype=torch.uint8, count=chunk.nbytes)
        dst.copy_(flat[chunk.start : chunk.start + chunk.nbytes])
    return view(buf.address, chunk.nbytes)


def _region_piece(plan: planning.Plan, region: planning.Region) -> backends.WritePiece:
    """A gap region (zip headers, storage tails, padding), composed in a zero-filled staging buffer."""

    def fill(buf: Staging) -> memoryview:
        padded = round_up(region.nbytes, planning.A)
        ctypes.memset(buf.address, 0, padded)
        data = view(buf.address, padded)
        planning.fill_region(plan, region, data)
        return data

    return backends.WritePiece(region.start, region.nbytes, region.nbytes, None, fill, _ignore)


def _ignore(data: memoryview) -> None:
    """Regions are not hashed (the index covers the pickle and storages; the header the index)."""


def _is_commit_region(plan: planning.Plan, region: planning.Region) -> bool:
    """Regions holding the header or the index/central directory are written last (commit)."""
    return region.start < plan.header_offset + 4096 or region.start + region.nbytes > plan.index_offset
