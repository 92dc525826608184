"""One rank's share of a DCP save: its write items turned into pieces for an I/O backend (a file's, or an
object's: s3/transfer.py takes the same pieces and the object holds the same bytes as the file), and records.

Raw items (codec "none", and DCP's byte items) are laid out up front, each at a 4 KiB-aligned
offset, chunk by chunk, so aligned CPU memory goes to disk with no copy. Compressed items cannot be
laid out before they are encoded: each chunk is encoded in a worker straight from the tensor's memory
(every worker encodes at once: the codec holds no staging buffer), copied once into a staging buffer
and appended after the raw items wherever the file ends at that moment; its record keeps where. Every
chunk's stored bytes are hashed as they go by, so a flipped or missing byte is found on load.
"""

from __future__ import annotations

import ctypes
import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import backends, integrity
from .. import codec as codecs
from ..memory import Staging, copy, host_bytes, round_up, view
from ..options import IOOptions
from .records import ItemRecord

ALIGN = 4096


def staging_bytes(chunk: int) -> int:
    """A staging buffer big enough for one chunk, raw or encoded (codecs may expand incompressible data)."""
    return round_up(chunk + chunk // 16 + (64 << 10), ALIGN)


@dataclass
class _Item:
    """One write item being written: its bytes (a flat uint8 tensor, or DCP's bytes) and what was recorded."""

    write_item: Any
    flat: torch.Tensor | None
    raw: memoryview | None
    nbytes: int
    dtype: str
    shape: tuple[int, ...]
    itemsize: int
    chunks: list[tuple[int, int]] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)

    def stage(self, start: int, nbytes: int, buf: Staging) -> None:
        """Copy raw bytes [start, start + nbytes) to the start of a staging buffer."""
        if self.raw is not None:
            view(buf.address, nbytes)[:] = self.raw[start : start + nbytes]
            return
        assert self.flat is not None
        if self.flat.device.type == "cpu":
            copy(buf.address, self.flat.data_ptr() + start, nbytes)
        else:
            torch.frombuffer(buf.mm, dtype=torch.uint8, count=nbytes).copy_(self.flat[start : start + nbytes])

    def host(self, start: int, nbytes: int) -> memoryview:
        """Raw bytes [start, start + nbytes) in host memory: in place for CPU data, copied from a device."""
        if self.raw is not None:
            return self.raw[start : start + nbytes]
        assert self.flat is not None
        if self.flat.device.type == "cpu":
            return view(self.flat.data_ptr() + start, nbytes)
        return memoryview(host_bytes(self.flat[start : start + nbytes]))


def prepare(write_item: Any, data: Any) -> _Item:
    """A write item's bytes: a tensor as a flat contiguous uint8 view (copied only if not contiguous)."""
    if isinstance(data, io.BytesIO):
        raw = memoryview(data.getbuffer()).cast("B")
        return _Item(write_item, None, raw, len(raw), "", (), 1)
    tensor = data.detach()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    flat = tensor.reshape(-1).view(torch.uint8)
    return _Item(
        write_item,
        flat,
        None,
        flat.numel(),
        str(tensor.dtype).removeprefix("torch."),
        tuple(tensor.shape),
        tensor.element_size(),
    )


def write_items(
    writer: backends.Writer, name: str, items: Sequence[_Item], options: IOOptions, codec: Any, checksum: str
) -> list[ItemRecord]:
    """Write every item of one rank through `writer` (a new file's, durably, or a new object's, uploaded by its
    finish), then close it; return the items' records (in data file `name`) in order."""
    digest = integrity.digest_fn(checksum)
    chunk = options.chunk_bytes
    laid, pieces, end = [], [], 0
    for item in items:
        n_chunks = integrity.chunk_count(item.nbytes, chunk)
        item.chunks, item.digests = [(0, 0)] * n_chunks, [""] * n_chunks
        if item.dtype and codec.name != "none":
            pieces += [_encoded_piece(item, k, chunk, codec, digest) for k in range(n_chunks)]
        else:
            laid += [_raw_piece(item, k, chunk, end, digest) for k in range(n_chunks)]
            end += round_up(item.nbytes, ALIGN)
    pieces.sort(key=lambda piece: -piece.nbytes)  # largest first: the save ends on small chunks, no worker idle
    try:
        writer.reserve(end)
        writer.write(laid + pieces)  # raw pieces in file order first; encoded ones append behind them
        writer.finish(writer.end)
    finally:
        writer.close()
    return [_record(name, item, codec, chunk, checksum) for item in items]


def _record(name: str, item: _Item, codec: Any, chunk: int, checksum: str) -> ItemRecord:
    """The record of a written item (byte items and codec 'none' items are stored raw). Its strings are shared
    objects (one file name per file, interned dtype names), so the metadata's pickle writes each once."""
    encoded = codec.descriptor if item.dtype and codec.name != "none" else "none"
    return ItemRecord(
        name,
        item.nbytes,
        sys.intern(item.dtype),
        item.shape,
        encoded,
        chunk,
        tuple(item.chunks),
        tuple(item.digests),
        checksum,
    )


def _raw_piece(
    item: _Item, k: int, chunk: int, base: int, digest: Callable[[memoryview], str] | None
) -> backends.WritePiece:
    """Chunk `k` of a raw item at its laid-out offset; its last page zero-padded when staged."""
    start = k * chunk
    n = min(chunk, item.nbytes - start)
    offset = base + start
    item.chunks[k] = (offset, n)

    def fill(buf: Staging) -> memoryview:
        item.stage(start, n, buf)
        ctypes.memset(buf.address + n, 0, round_up(n, ALIGN) - n)
        return view(buf.address, round_up(n, ALIGN))

    def seen(data: memoryview) -> None:
        if digest:
            item.digests[k] = digest(data[:n])

    address = item.flat.data_ptr() + start if item.flat is not None and item.flat.device.type == "cpu" else None
    return backends.WritePiece(offset, n, n, address, fill, seen)


def _encoded_piece(
    item: _Item, k: int, chunk: int, codec: Any, digest: Callable[[memoryview], str] | None
) -> backends.WritePiece:
    """Chunk `k` of an item, encoded by a worker before it borrows a staging buffer (so every thread encodes),
    copied into the buffer once and appended, zero-padded to ALIGN (whatever the writer's own alignment: the
    format keeps every chunk at an aligned offset); the record learns where it went."""
    start = k * chunk
    n = min(chunk, item.nbytes - start)
    encoded: list[codecs.Buffer] = []
    stored = [0]

    def prepare() -> None:
        encoded[:] = codecs.encode_parts(codec, item.host(start, n), item.itemsize)

    def fill(buf: Staging) -> memoryview:
        if not encoded:  # a writer that does not call prepare()
            prepare()
        stored[0] = size = codecs.copy_parts(encoded, view(buf.address, buf.nbytes), codec.descriptor)
        encoded.clear()
        ctypes.memset(buf.address + size, 0, round_up(size, ALIGN) - size)
        return view(buf.address, round_up(size, ALIGN))  # padded: the next chunk appended lands aligned

    def seen(data: memoryview) -> None:
        if digest:
            item.digests[k] = digest(data[: stored[0]])

    def placed(offset: int) -> None:
        item.chunks[k] = (offset, stored[0])

    return backends.WritePiece(None, n, n, None, fill, seen, placed, prepare)
