"""`.metadata` format ckptio-dcp/3: DCP's Metadata as a JSON header and int64 columns, with no pickle in it.

The payload (metadata.py seals it):
    PREFIX          b"ckptio-dcp/3\\n"
    8 bytes         the header's length, little-endian
    header          JSON: DCP's version, storage_meta, planner_data (tagged: tuples stay tuples), the checksum,
                    the file and codec tables, the int and extent counts, and per item
                    [fqn, dtype ("" for a byte item), size, properties (null when DCP's defaults), chunk count]
    int64 columns   little-endian, item after item: its chunks' offsets (count x ndim), their sizes
                    (count x ndim), then per chunk (file, codec, chunk_bytes, nbytes, first extent);
                    after every item, every record's extents as (offset, stored) pairs
    digests         every extent's digest, raw bytes of the checksum's width, in extent order

A record's dtype and shape are its chunk's, so they cannot disagree. A load builds DCP's state_dict_metadata
whole (the planner reads all of it), every item's chunks checked to tile its tensor (inside it, their elements
adding up, none overlapping: validate.overlapping); the records (Records) are built and checked only when
asked for, so each rank checks the ones it reads.
Decoding is json and arrays of integers: nothing in the file names code to run.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import operator
import os
import sys
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from .. import integrity
from ..errors import CheckpointError, InvalidCheckpoint
from .records import DATA_NAME, ItemRecord
from .validate import DTYPES, codec_problem, overlapping, record_problem

Where = str | os.PathLike[str]  # the .metadata a message names: a local path, or an object's s3:// URL

METADATA_FORMAT = "ckptio-dcp/3"
PREFIX = b"ckptio-dcp/3\n"
FIXED = 5  # per chunk: file, codec, chunk_bytes, nbytes, first extent
LAYOUTS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.layout)}
MEMORY_FORMATS = {str(v).removeprefix("torch."): v for v in vars(torch).values() if isinstance(v, torch.memory_format)}
MAX_DEPTH = 64  # planner data nesting
SCALARS = frozenset((type(None), bool, int, float, str))  # planner data JSON carries as they are


def decode(payload: bytes, path: Where) -> Any:
    """DCP's Metadata from a format-3 payload (sealed already); InvalidCheckpoint for anything malformed."""
    try:
        with _collector_paused():
            return _decode(memoryview(payload), path)
    except CheckpointError:
        raise
    except Exception as e:  # json, array and torch raise many types on hostile input: all mean "refused"
        raise InvalidCheckpoint(path, f"metadata ({METADATA_FORMAT}) is malformed: {type(e).__name__}: {e}") from None


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while hundreds of thousands of acyclic objects are built (it
    would otherwise traverse them over and over: 5x the decode time at 64 ranks)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# -- reading ---------------------------------------------------------------------------------------


def untag(value: Any, depth: int = 0) -> Any:
    """The planner data `tag` wrote (InvalidCheckpoint-worthy ValueError for anything else)."""
    if type(value) in SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise ValueError("planner data nested too deep")
    if type(value) is dict and len(value) == 1:
        [(kind, inner)] = value.items()
        if kind in ("l", "t", "d") and type(inner) is list:
            if kind == "d":
                return {untag(k, depth + 1): untag(v, depth + 1) for k, v in _pairs(inner)}
            items = inner if set(map(type, inner)) <= SCALARS else [untag(v, depth + 1) for v in inner]
            return items if kind == "l" else tuple(items)
    raise ValueError(f"planner data {value!r:.60} is not tagged")


def _pairs(inner: list[Any]) -> list[tuple[Any, Any]]:
    if not all(type(p) is list and len(p) == 2 for p in inner):
        raise ValueError("planner data dict entries are not pairs")
    return [(p[0], p[1]) for p in inner]


def _expect(ok: bool, path: Where, what: str, *args: Any) -> None:
    """InvalidCheckpoint unless `ok`, saying `what` (formatted with `args` only then: this runs per item)."""
    if not ok:
        raise InvalidCheckpoint(path, f"metadata ({METADATA_FORMAT}): {what.format(*args)}")


def _decode(payload: memoryview, path: Where) -> Any:
    from torch.distributed.checkpoint.metadata import Metadata

    _expect(payload[: len(PREFIX)] == PREFIX and len(payload) >= len(PREFIX) + 8, path, "no header")
    start = len(PREFIX) + 8
    length = int.from_bytes(payload[len(PREFIX) : start], "little")
    _expect(length <= len(payload) - start, path, "header longer than the file")
    header = json.loads(bytes(payload[start : start + length]))
    _expect(type(header) is dict and header.get("format") == METADATA_FORMAT, path, "not a format-3 header")
    tables = _Tables(header, path)
    ints, extents, digests = tables.columns(payload[start + length :])
    items, entries = _items(header.get("items"), ints, path)
    return Metadata(
        state_dict_metadata=items,
        planner_data=untag(header.get("planner_data")),
        storage_data=Records(path, entries, ints, extents, digests, tables),
        storage_meta=_read_storage_meta(header.get("storage_meta"), path),
        version=_read_str(header.get("version"), path, "version"),
    )


class _Tables:
    """The header's checksum, file and codec tables and column counts, checked."""

    def __init__(self, header: dict[str, Any], path: Where) -> None:
        self.checksum: Any = header.get("checksum")
        _expect(self.checksum == "none" or self.checksum in integrity.ALGORITHMS, path, "unknown checksum")
        self.width = integrity.width(str(self.checksum)) // 2
        self.files: Any = header.get("files")
        self.codecs: Any = header.get("codecs")
        _expect(
            type(self.files) is list and all(type(f) is str and DATA_NAME.fullmatch(f) for f in self.files),
            path,
            "a data file name that is not one a Writer makes",
        )
        _expect(
            type(self.codecs) is list and all(type(c) is str and not codec_problem(c) for c in self.codecs),
            path,
            "a codec this reader cannot rebuild",
        )
        self.n_ints: Any = header.get("ints")
        self.n_extents: Any = header.get("extents")
        _expect(
            type(self.n_ints) is int and type(self.n_extents) is int and self.n_ints >= 0 and self.n_extents >= 0,
            path,
            "column counts are not counts",
        )
        self.path = path

    def columns(self, body: memoryview) -> tuple[array[int], array[int], bytes]:
        """The int columns, the extents (flat pairs) and the digests, each the length the header says."""
        ints_end = 8 * self.n_ints
        extents_end = ints_end + 16 * self.n_extents
        _expect(len(body) == extents_end + self.width * self.n_extents, self.path, "columns of the wrong length")
        ints, extents = array("q"), array("q")
        ints.frombytes(body[:ints_end])
        extents.frombytes(body[ints_end:extents_end])
        if sys.byteorder == "big":
            ints.byteswap()
            extents.byteswap()
        return ints, extents, bytes(body[extents_end:])


class _Entry:
    """Where one item's chunks and records lie in the int columns."""

    __slots__ = ("_where", "dtype", "fixed", "offsets", "sizes")

    def __init__(self, dtype: str, offsets: list[tuple[int, ...]], sizes: list[tuple[int, ...]], fixed: int) -> None:
        self.dtype, self.offsets, self.sizes, self.fixed = dtype, offsets, sizes, fixed
        self._where: dict[tuple[int, ...], int] | None = None

    def chunk(self, index: Any) -> int:
        """The chunk a MetadataIndex names (its index hint first); KeyError if none."""
        if index.offset is None:
            if self.dtype:
                raise KeyError(index)
            return 0
        wanted = tuple(index.offset)
        hint = index.index
        if type(hint) is int and 0 <= hint < len(self.offsets) and self.offsets[hint] == wanted:
            return hint
        if self._where is None:
            self._where = {o: k for k, o in enumerate(self.offsets)}
        return self._where[wanted]


def _items(raw: Any, ints: array[int], path: Where) -> tuple[dict[str, Any], dict[str, _Entry]]:
    """DCP's state_dict_metadata and each item's entry, every chunk checked to lie inside its tensor."""
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    _expect(type(raw) is list, path, "no item list")
    items: dict[str, Any] = {}
    entries: dict[str, _Entry] = {}
    at = 0
    for entry in raw:
        _expect(type(entry) is list and len(entry) == 5 and type(entry[0]) is str, path, "item {!r:.60}", entry)
        fqn, dtype, size, properties, count = entry
        _expect(fqn not in items, path, "{!r} twice", fqn)
        if dtype == "":
            _expect(size == [] and properties is None and count == 1, path, "{!r}: a byte item with a shape", fqn)
            items[fqn], entries[fqn] = BytesStorageMetadata(), _Entry("", [()], [()], at)
            at += FIXED
            continue
        items[fqn], entries[fqn], at = _tensor(fqn, dtype, size, properties, count, ints, at, path)
    _expect(at == len(ints), path, "int columns longer than the items")
    return items, entries


def _tensor(
    fqn: str, dtype: Any, size: Any, properties: Any, count: Any, ints: array[int], at: int, path: Where
) -> tuple[Any, _Entry, int]:
    """A tensor item's TensorStorageMetadata and entry; the position after its columns."""
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, TensorStorageMetadata

    _expect(type(dtype) is str and dtype in DTYPES, path, "{!r}: unknown dtype {!r:.40}", fqn, dtype)
    _expect(type(size) is list and all(type(n) is int and 0 <= n < 1 << 62 for n in size), path, "{!r}: size", fqn)
    _expect(type(count) is int and count >= 0, path, "{!r}: chunk count", fqn)
    ndim = len(size)
    end = at + count * (2 * ndim + FIXED)
    _expect(end <= len(ints), path, "{!r}: more chunks than the columns hold", fqn)
    offset_lists, size_lists = _boxes(ints, at, count, size)
    _expect(offset_lists is not None, path, "{!r}: chunks outside the tensor's {} or not covering it", fqn, size)
    pair = overlapping(offset_lists, size_lists) if count > 1 else None
    _expect(pair is None, path, "{!r}: chunks {} and {} overlap", fqn, *(pair or (0, 0)))
    Size = torch.Size
    chunks = list(map(ChunkStorageMetadata, map(Size, offset_lists), map(Size, size_lists)))
    item = TensorStorageMetadata(_read_properties(DTYPES[dtype], properties, fqn, path), Size(size), chunks)
    return item, _Entry(dtype, offset_lists, size_lists, at + 2 * count * ndim), end


def _boxes(ints: array[int], at: int, count: int, size: list[int]) -> tuple[Any, Any]:
    """An item's chunk offsets and sizes (tuples), each chunk checked inside `size` and their elements adding up to
    the tensor's (a Writer's chunks tile it); (None, None) if not. Built-in maps: no Python loop per chunk."""
    ndim = len(size)
    if ndim == 0:  # a scalar: one chunk, the whole tensor
        return ([()], [()]) if count == 1 else (None, None)
    offsets, sizes = ints[at : at + count * ndim].tolist(), ints[at + count * ndim : at + 2 * count * ndim].tolist()
    if count and min(min(offsets), min(sizes)) < 0:
        return None, None
    if not all(map(operator.le, map(operator.add, offsets, sizes), size * count)):  # both >= 0: no overflow
        return None, None
    size_tuples = list(zip(*[iter(sizes)] * ndim))
    if sum(map(math.prod, size_tuples)) != math.prod(size):
        return None, None
    return list(zip(*[iter(offsets)] * ndim)), size_tuples


def _read_properties(dtype: torch.dtype, raw: Any, fqn: str, path: Where) -> Any:
    from torch.distributed.checkpoint.metadata import TensorProperties

    if raw is None:
        return TensorProperties(dtype=dtype)
    ok = type(raw) is list and len(raw) == 4 and raw[0] in LAYOUTS and raw[2] in MEMORY_FORMATS
    _expect(ok and type(raw[1]) is bool and type(raw[3]) is bool, path, "{!r}: tensor properties", fqn)
    return TensorProperties(
        dtype=dtype,
        layout=LAYOUTS[raw[0]],
        requires_grad=raw[1],
        memory_format=MEMORY_FORMATS[raw[2]],
        pin_memory=raw[3],
    )


def _read_str(value: Any, path: Where, what: str) -> str | None:
    _expect(value is None or type(value) is str, path, "{} is not a string", what)
    return value


def _read_storage_meta(raw: Any, path: Where) -> Any:
    from torch.distributed.checkpoint.metadata import StorageMeta

    if raw is None:
        return None
    _expect(type(raw) is dict and set(raw) == {"checkpoint_id", "save_id", "load_id", "modules"}, path, "storage_meta")
    modules = raw["modules"]
    _expect(type(modules) is list and all(type(m) is str for m in modules), path, "storage_meta modules")
    ids = {n: _read_str(raw[n], path, n) for n in ("checkpoint_id", "save_id", "load_id")}
    return StorageMeta(**ids, modules=modules)


class Records(Mapping[Any, ItemRecord]):
    """DCP's storage_data of a format-3 checkpoint: a MetadataIndex's ItemRecord, built and checked on first
    use (InvalidCheckpoint if it is not what a Writer writes), so a rank pays for the records it reads."""

    def __init__(
        self,
        path: Where,
        entries: dict[str, _Entry],
        ints: array[int],
        extents: array[int],
        digests: bytes,
        tables: _Tables,
    ) -> None:
        self.path, self._entries, self._ints, self._extents, self._digests = path, entries, ints, extents, digests
        self.files: list[str] = tables.files
        self.codecs: list[str] = tables.codecs
        self.checksum: str = tables.checksum
        self._width = tables.width
        self._built: dict[tuple[str, int], ItemRecord] = {}

    def __getitem__(self, index: Any) -> ItemRecord:
        entry = self._entries[index.fqn]
        k = entry.chunk(index)
        record = self._built.get((index.fqn, k))
        if record is None:
            record = self._built[(index.fqn, k)] = self._build(index.fqn, entry, k)
        return record

    def __iter__(self) -> Iterator[Any]:
        from torch.distributed.checkpoint.metadata import MetadataIndex

        for fqn, entry in self._entries.items():
            if not entry.dtype:
                yield MetadataIndex(fqn)
                continue
            for k, offsets in enumerate(entry.offsets):
                yield MetadataIndex(fqn, offsets, k)

    def __len__(self) -> int:
        return sum(len(entry.offsets) for entry in self._entries.values())

    def _build(self, fqn: str, entry: _Entry, k: int) -> ItemRecord:
        file, codec, chunk_bytes, nbytes, first = self._ints[entry.fixed + FIXED * k : entry.fixed + FIXED * (k + 1)]
        _expect(0 <= file < len(self.files) and 0 <= codec < len(self.codecs), self.path, "{!r}: table index", fqn)
        _expect(chunk_bytes > 0 and nbytes >= 0 and first >= 0, self.path, "{!r}: chunk size or extent", fqn)
        count = integrity.chunk_count(nbytes, chunk_bytes)
        _expect(first + count <= len(self._extents) // 2, self.path, "{!r}: extents beyond the column", fqn)
        pairs = self._extents[2 * first : 2 * (first + count)]
        w = self._width
        digests = [self._digests[(first + j) * w : (first + j + 1) * w].hex() for j in range(count)]
        record = ItemRecord(
            self.files[file],
            nbytes,
            entry.dtype,
            tuple(entry.sizes[k]),
            self.codecs[codec],
            chunk_bytes,
            tuple(zip(pairs[::2], pairs[1::2])),
            tuple(digests),
            self.checksum,
        )
        problem = record_problem(record)
        _expect(not problem, self.path, "{!r}: {}", fqn, problem)
        return record
