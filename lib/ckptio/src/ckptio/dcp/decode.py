"""One rank's share of a DCP load: read items turned into pieces for an I/O backend, verified and decoded.

A read item asks for a box of a saved chunk (all of it when the sharding is unchanged; a slab of rows
when resharding along dim 0; any box in general). The reader fetches only the rows the box spans,
chunk by stored chunk, verifies each stored chunk against its digest, decodes it and copies the rows
into place: straight into the destination when the box is whole rows of a contiguous CPU tensor,
else into a scratch buffer that is then narrowed and copied (a CUDA destination, a non-contiguous one,
a box narrower than the saved rows).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .. import backends, integrity
from ..codec import CodecError
from ..errors import CorruptCheckpoint, TruncatedCheckpoint
from ..memory import address_of, copy, round_up, view
from .records import ItemRecord

ALIGN = 4096


@dataclass
class Want:
    """The raw bytes [start, end) of a saved item some destination needs, and where they go."""

    record: ItemRecord
    fqn: str
    start: int
    end: int
    address: int  # destination of byte `start`
    owner: Any = None  # what keeps that memory alive (a scratch tensor, the destination)


def row_range(record: ItemRecord, offsets: tuple[int, ...], lengths: tuple[int, ...]) -> tuple[int, int, bool]:
    """The raw byte range of the rows a box of a saved chunk spans, and whether the box is exactly them."""
    shape, itemsize = record.shape, torch.empty(0, dtype=dtype_of(record)).element_size()
    if not shape:
        return 0, record.nbytes, True
    row = math.prod(shape[1:]) * itemsize
    whole = all(o == 0 and n == s for o, n, s in zip(offsets[1:], lengths[1:], shape[1:]))
    return offsets[0] * row, (offsets[0] + lengths[0]) * row, whole


def dtype_of(record: ItemRecord) -> torch.dtype:
    """The torch dtype a record names."""
    dtype: torch.dtype = getattr(torch, record.dtype)
    return dtype


def box_of(
    scratch: torch.Tensor, record: ItemRecord, offsets: tuple[int, ...], lengths: tuple[int, ...]
) -> torch.Tensor:
    """The requested box, viewed inside a scratch buffer holding the rows it spans."""
    rows = scratch.view(dtype_of(record))
    if not record.shape:
        return rows.reshape(())
    rows = rows.reshape((lengths[0], *record.shape[1:]))
    for dim in range(1, len(record.shape)):
        rows = rows.narrow(dim, offsets[dim], lengths[dim])
    return rows


def pieces(directory: str, want: Want, codec: Any, verify: bool, memory_alignment: int) -> list[backends.ReadPiece]:
    """Reads of every stored chunk overlapping [want.start, want.end), each verified, decoded and its
    overlap copied to the destination; a raw chunk whose whole read fits the destination at an address the
    reader takes (`memory_alignment`) is read straight into it, verified there, with no copy."""
    record = want.record
    out = []
    for k, (offset, stored) in enumerate(record.chunks):
        lo, hi = k * record.chunk_bytes, min((k + 1) * record.chunk_bytes, record.nbytes)
        if hi <= want.start or lo >= want.end:
            continue
        target, length = want.address + lo - want.start, round_up(stored, ALIGN)
        if codec is None and lo >= want.start and lo + length <= want.end and target % memory_alignment == 0:
            done = _checker(directory, want, k, verify)
            out.append(backends.ReadPiece(offset, length, stored, target, done))
            continue
        done = _placer(directory, want, k, lo, hi, codec, verify)
        out.append(backends.ReadPiece(offset, length, stored, None, done))
    return out


def _checker(directory: str, want: Want, k: int, verify: bool) -> Callable[[memoryview], None]:
    """What to do with stored chunk `k` once read in place: check it is whole and intact."""
    record = want.record
    offset, stored = record.chunks[k]
    digest = integrity.digest_fn(record.checksum) if verify else None
    path = f"{directory}/{record.file}"

    def done(data: memoryview) -> None:
        if len(data) < stored:
            raise TruncatedCheckpoint(path, offset + stored, offset + len(data))
        if digest and digest(data[:stored]) != record.digests[k]:
            raise CorruptCheckpoint(path, want.fqn, f"chunk {k} ({stored} stored bytes at offset {offset})")

    return done


def _placer(
    directory: str, want: Want, k: int, lo: int, hi: int, codec: Any, verify: bool
) -> Callable[[memoryview], None]:
    """What to do with stored chunk `k` once read: check it is whole and intact, decode, copy the overlap."""
    record = want.record
    stored = record.chunks[k][1]
    check = _checker(directory, want, k, verify)
    path = f"{directory}/{record.file}"

    def done(data: memoryview) -> None:
        check(data)
        first, last = max(lo, want.start), min(hi, want.end)
        target = want.address + first - want.start
        if codec is None:
            copy(target, address_of(data) + first - lo, last - first)
        elif (first, last) == (lo, hi):
            _decode(codec, data[:stored], view(target, hi - lo), record, path, want.fqn)
        else:
            raw = memoryview(bytearray(hi - lo))
            _decode(codec, data[:stored], raw, record, path, want.fqn)
            view(target, last - first)[:] = raw[first - lo : last - lo]

    return done


def _decode(codec: Any, data: memoryview, out: memoryview, record: ItemRecord, path: str, fqn: str) -> None:
    """Decode a stored chunk into `out`; a chunk that does not decode to its recorded size is corrupt."""
    try:
        codec.decode_into(data, out, torch.empty(0, dtype=dtype_of(record)).element_size())
    except CodecError as e:
        raise CorruptCheckpoint(path, fqn, f"codec {record.codec}: {e}") from None
