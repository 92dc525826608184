"""Structural checks of a checkpoint's metadata before anything in it is used.

The seal (metadata.py) finds corruption; these checks refuse metadata that is well sealed but not what a
Writer writes (a hand-edited or forged file): every record names a data file the Writer makes, a known
format, codec, checksum and dtype; sizes agree with shapes and dtypes, chunk counts with chunk sizes;
every chunk of every tensor DCP will plan a read for has its record, of that chunk's shape and dtype.
A failure is InvalidCheckpoint naming the item, never an error from inside DCP.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from pathlib import Path
from typing import Any

import torch

from .. import codec as codecs
from .. import integrity
from ..errors import InvalidCheckpoint
from .encode import staging_bytes
from .records import DATA_NAME, FORMAT_V1, FORMATS, ItemRecord

MAX_CHUNK = 1 << 30  # the largest chunk a reader stages; a Writer's chunk_bytes is far below it
ALIGN = 4096
HEX = re.compile(r"[0-9a-f]*")
DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


def check_metadata(metadata: Any, path: Path, sealed: bool) -> None:
    """Refuse metadata that is not what a Writer commits (InvalidCheckpoint names what is wrong)."""
    from torch.distributed.checkpoint.metadata import Metadata

    if type(metadata) is not Metadata:
        raise InvalidCheckpoint(path, "not DCP metadata")
    if not isinstance(metadata.state_dict_metadata, dict) or not isinstance(metadata.storage_data, dict):
        raise InvalidCheckpoint(path, "DCP metadata without item tables")
    _check_storage_meta(metadata.storage_meta, path)
    records = _records(metadata.storage_data, path)
    _check_policy(records.values(), path, sealed)
    for fqn, item in metadata.state_dict_metadata.items():
        _check_item(fqn, item, records, path)


def _check_storage_meta(meta: Any, path: Path) -> None:
    """None, or a StorageMeta of strings (or None) and a list of module names, as a Writer writes it (the reader
    sets its load_id: anything else failed there, or in DCP, with an error not ours)."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    if meta is None:
        return
    ids = [getattr(meta, n, 0) for n in ("checkpoint_id", "save_id", "load_id")]
    modules = getattr(meta, "modules", None)
    if (
        type(meta) is not StorageMeta
        or not all(i is None or type(i) is str for i in ids)
        or type(modules) is not list
        or not all(type(m) is str for m in modules)
    ):
        raise InvalidCheckpoint(path, f"storage_meta {meta!r:.80} is not what a Writer writes")


def checksum_of(metadata: Any) -> str:
    """The one checksum algorithm every record of a checked checkpoint uses ("none" if it has no records)."""
    table = getattr(metadata.storage_data, "checksum", None)  # format 3 names it once
    return table if isinstance(table, str) else next((r.checksum for r in metadata.storage_data.values()), "none")


def _records(storage_data: dict[Any, Any], path: Path) -> dict[Any, ItemRecord]:
    """storage_data with every key a MetadataIndex and every value a well-formed ItemRecord."""
    from torch.distributed.checkpoint.metadata import MetadataIndex

    for index, record in storage_data.items():
        if type(index) is not MetadataIndex or type(index.fqn) is not str:
            raise InvalidCheckpoint(path, f"storage key {index!r:.80} is not a MetadataIndex")
        if type(record) is not ItemRecord:
            raise InvalidCheckpoint(path, f"{index.fqn!r}: storage record is not an ItemRecord")
        problem = record_problem(record)
        if problem:
            raise InvalidCheckpoint(path, f"{index.fqn!r}: {problem}")
    return storage_data


def _check_policy(records: Any, path: Path, sealed: bool) -> None:
    """One checksum for the whole checkpoint, and format-2 records only in sealed metadata."""
    checksums = {r.checksum for r in records}
    if len(checksums) > 1:
        raise InvalidCheckpoint(path, f"records disagree on the checksum algorithm: {sorted(checksums)}")
    formats = {r.format for r in records}
    if not sealed and formats - {FORMAT_V1}:
        raise InvalidCheckpoint(path, f"{', '.join(sorted(formats))} metadata without its seal (cut or corrupt)")


def record_problem(r: ItemRecord) -> str:
    """What is wrong with a record ("" if nothing): names, codes, sizes, chunks and digests."""
    for check in (_names_problem, _size_problem, _chunks_problem, _digests_problem):
        problem = check(r)
        if problem:
            return problem
    return ""


def _names_problem(r: ItemRecord) -> str:
    """File, format, checksum, codec and dtype must be names a Writer writes."""
    if type(r.file) is not str or not DATA_NAME.fullmatch(r.file):
        return f"data file name {r.file!r:.80} is not one a Writer makes"
    if r.format not in FORMATS:
        return f"unknown record format {r.format!r:.40}"
    if type(r.checksum) is not str or (r.checksum != "none" and r.checksum not in integrity.ALGORITHMS):
        return f"unknown checksum {r.checksum!r:.40}"
    if type(r.dtype) is not str or (r.dtype and r.dtype not in DTYPES):
        return f"unknown dtype {r.dtype!r:.40}"
    if type(r.codec) is not str or (r.codec != "none" and not r.dtype):
        return f"codec {r.codec!r:.40} on a byte item"
    return codec_problem(r.codec)


@functools.lru_cache(maxsize=256)
def codec_problem(descriptor: str) -> str:
    """A codec descriptor this reader can rebuild, or why not."""
    if descriptor == "none":
        return ""
    try:
        codecs.from_descriptor(descriptor, threads=1)
    except codecs.CodecError as e:
        return f"codec: {e}"
    return ""


def _size_problem(r: ItemRecord) -> str:
    """nbytes agrees with shape and dtype; chunk_bytes is a Writer's chunk size."""
    if type(r.shape) is not tuple or not all(type(n) is int and n >= 0 for n in r.shape):
        return f"shape {r.shape!r:.80} is not a tuple of sizes"
    if type(r.nbytes) is not int or r.nbytes < 0:
        return f"size {r.nbytes!r:.40} is not a byte count"
    if r.dtype and r.nbytes != math.prod(r.shape) * DTYPES[r.dtype].itemsize:
        return f"{r.nbytes} bytes do not hold shape {r.shape} of {r.dtype}"
    if not r.dtype and r.shape:
        return "a byte item with a shape"
    if type(r.chunk_bytes) is not int or not 0 < r.chunk_bytes <= MAX_CHUNK or r.chunk_bytes % ALIGN:
        return f"chunk size {r.chunk_bytes!r:.40} is not a multiple of {ALIGN} up to {MAX_CHUNK}"
    return ""


def _chunks_problem(r: ItemRecord) -> str:
    """As many chunks as the size needs, each at a valid place with a plausible stored length."""
    if type(r.chunks) is not tuple or len(r.chunks) != integrity.chunk_count(r.nbytes, r.chunk_bytes):
        return f"{len(r.chunks) if type(r.chunks) is tuple else r.chunks!r:.40} chunks for {r.nbytes} bytes"
    encoded = r.codec != "none"
    bound = _staging_bound(r.chunk_bytes) if encoded else 0
    for k, chunk in enumerate(r.chunks):
        if type(chunk) is not tuple or len(chunk) != 2 or type(chunk[0]) is not int or type(chunk[1]) is not int:
            return f"chunk {k} is not (offset, length)"
        offset, stored = chunk
        if offset < 0 or offset % ALIGN:
            return f"chunk {k} at offset {offset}, not {ALIGN}-aligned"
        if encoded and not 0 < stored <= bound:
            return f"encoded chunk {k} of {stored} bytes for a {r.chunk_bytes}-byte chunk"
        if not encoded and stored != min(r.chunk_bytes, r.nbytes - k * r.chunk_bytes):
            return f"raw chunk {k} of {stored} bytes (expected {min(r.chunk_bytes, r.nbytes - k * r.chunk_bytes)})"
    return ""


def _staging_bound(chunk_bytes: int) -> int:
    """The most bytes an encoded chunk may take (a reader's staging buffer)."""
    return staging_bytes(chunk_bytes)


def _digests_problem(r: ItemRecord) -> str:
    """One digest per chunk, hex of the algorithm's width ("" for checksum none)."""
    width = integrity.width(r.checksum)
    if type(r.digests) is not tuple or len(r.digests) != len(r.chunks):
        return "digests do not match the chunks"
    for k, d in enumerate(r.digests):
        if type(d) is not str or len(d) != width or not HEX.fullmatch(d):
            return f"digest {k} is not a {r.checksum} digest"
    return ""


def _check_item(fqn: Any, item: Any, records: dict[Any, ItemRecord], path: Path) -> None:
    """Every chunk DCP may plan a read of has its record, with the chunk's shape and dtype."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata, MetadataIndex, TensorStorageMetadata

    if type(fqn) is not str:
        raise InvalidCheckpoint(path, f"item key {fqn!r:.80} is not a string")
    if type(item) is BytesStorageMetadata:
        record = records.get(MetadataIndex(fqn))
        if record is None or record.dtype:
            raise InvalidCheckpoint(path, f"{fqn!r}: no byte record")
        return
    if type(item) is not TensorStorageMetadata:
        raise InvalidCheckpoint(path, f"{fqn!r}: unknown item type {type(item).__name__}")
    dtype = _tensor_dtype(fqn, item, path)
    boxes = [_chunk_box(fqn, k, chunk, tuple(item.size), path) for k, chunk in enumerate(item.chunks)]
    for k, (offsets, sizes) in enumerate(boxes):
        record = records.get(MetadataIndex(fqn, offsets))
        if record is None or record.dtype != dtype or record.shape != sizes:
            raise InvalidCheckpoint(path, f"{fqn!r}: chunk {k} at {offsets} has no record of shape {sizes} {dtype}")
    problem = tiling_problem([b[0] for b in boxes], [b[1] for b in boxes], tuple(item.size))
    if problem:
        raise InvalidCheckpoint(path, f"{fqn!r}: {problem}")


def tiling_problem(offsets: list[tuple[int, ...]], sizes: list[tuple[int, ...]], size: tuple[int, ...]) -> str:
    """Why chunks (each inside the tensor) do not tile it ("" if they do): their elements must add up to the
    tensor's and no two may share an element, else part of the tensor is never read."""
    held, total = sum(map(math.prod, sizes)), math.prod(size)
    if held != total:
        return f"chunks hold {held} of its {total} elements"
    pair = overlapping(offsets, sizes)
    return f"chunks {pair[0]} and {pair[1]} overlap" if pair else ""


def overlapping(offsets: list[tuple[int, ...]], sizes: list[tuple[int, ...]]) -> tuple[int, int] | None:
    """Two chunks that share an element (their indices, in order), None if none do. A sweep along the dimension
    with the most distinct offsets compares a chunk only with those still open where it starts: a sharded
    tensor's chunks meet one or a few there, whatever their number."""
    if len(offsets) < 2 or not offsets[0] or _grid(offsets, sizes):
        return None
    dim = max(range(len(offsets[0])), key=lambda d: len({o[d] for o in offsets}))
    order = sorted(range(len(offsets)), key=lambda k: offsets[k][dim])
    open_: list[int] = []
    for k in order:
        if 0 in sizes[k]:
            continue  # holds no element
        start = offsets[k][dim]
        open_ = [j for j in open_ if offsets[j][dim] + sizes[j][dim] > start]
        for j in open_:
            if all(a < c + m and c < a + n for a, n, c, m in zip(offsets[k], sizes[k], offsets[j], sizes[j])):
                return min(j, k), max(j, k)
        open_.append(k)
    return None


def _grid(offsets: list[tuple[int, ...]], sizes: list[tuple[int, ...]]) -> bool:
    """Whether the chunks are disjoint as the cells of a grid are (how shardings cut a tensor), checked without
    comparing pairs: distinct offsets, and along every dimension the chunks' spans are equal or disjoint."""
    if len(set(offsets)) != len(offsets):
        return False
    for d in range(len(offsets[0])):
        spans = sorted({(o[d], n[d]) for o, n in zip(offsets, sizes)})
        if any(a + n > b for (a, n), (b, _) in itertools.pairwise(spans)):
            return False
    return True


def _tensor_dtype(fqn: str, item: Any, path: Path) -> str:
    """The dtype name of a tensor item, after checking its size and properties."""
    from torch.distributed.checkpoint.metadata import TensorProperties

    if type(item.properties) is not TensorProperties or type(item.properties.dtype) is not torch.dtype:
        raise InvalidCheckpoint(path, f"{fqn!r}: tensor properties without a dtype")
    if type(item.size) is not torch.Size or not isinstance(item.chunks, list):
        raise InvalidCheckpoint(path, f"{fqn!r}: tensor without a size and a chunk list")
    return str(item.properties.dtype).removeprefix("torch.")


def _chunk_box(
    fqn: str, k: int, chunk: Any, size: tuple[int, ...], path: Path
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A saved chunk's (offsets, sizes), inside the tensor's size."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata

    if type(chunk) is not ChunkStorageMetadata or type(chunk.offsets) is not torch.Size:
        raise InvalidCheckpoint(path, f"{fqn!r}: chunk {k} is not DCP chunk metadata")
    offsets, sizes = tuple(chunk.offsets), tuple(chunk.sizes) if type(chunk.sizes) is torch.Size else ()
    inside = len(offsets) == len(sizes) == len(size) and all(
        o >= 0 and n >= 0 and o + n <= s for o, n, s in zip(offsets, sizes, size)
    )
    if not inside:
        raise InvalidCheckpoint(path, f"{fqn!r}: chunk {k} {offsets}+{sizes} is outside the tensor's {size}")
    return offsets, sizes
