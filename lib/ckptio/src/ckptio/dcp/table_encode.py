"""Writing `.metadata` format ckptio-dcp/3 (table.py describes the layout and reads it)."""

from __future__ import annotations

import json
import sys
from array import array
from typing import Any

from .. import integrity
from .records import FORMAT, ItemRecord
from .table import MAX_DEPTH, METADATA_FORMAT, PREFIX


class Unsupported(Exception):
    """The metadata holds something format 3 does not express (the caller writes format 2 instead)."""


def encode(metadata: Any) -> bytes | None:
    """The format-3 payload of a Writer's Metadata, or None if it holds what the format cannot express."""
    try:
        return encode_strict(metadata)
    except Unsupported:
        return None


def encode_strict(metadata: Any) -> bytes:
    """The format-3 payload of a Writer's Metadata; Unsupported, saying what, if the format cannot express it."""
    try:
        return _Encoder(metadata).payload()
    except (UnicodeEncodeError, OverflowError, TypeError, ValueError) as e:
        raise Unsupported(f"{type(e).__name__}: {e}") from None


class _Encoder:
    """One Metadata turned into the header, the int columns, the extents and the digests."""

    def __init__(self, metadata: Any) -> None:
        self.metadata = metadata
        self.records = metadata.storage_data
        checksums = {getattr(r, "checksum", None) for r in self.records.values()} or {"none"}
        self.checksum: Any = checksums.pop()
        if checksums or (self.checksum != "none" and self.checksum not in integrity.ALGORITHMS):
            raise Unsupported("records disagree on the checksum, or name none ckptio knows")
        self.width = integrity.width(self.checksum) // 2
        self.files: dict[str, int] = {}
        self.codecs: dict[str, int] = {}
        self.ints, self.extents, self.digests = array("q"), array("q"), bytearray()
        self.used = 0

    def payload(self) -> bytes:
        from torch.distributed.checkpoint.metadata import BytesStorageMetadata, TensorStorageMetadata

        items: list[Any] = []
        for fqn, item in self.metadata.state_dict_metadata.items():
            if type(fqn) is not str:
                raise Unsupported("an item key that is not a string")
            if type(item) is BytesStorageMetadata:
                items.append([fqn, "", [], None, 1])
                self._record(fqn, None, "", ())
            elif type(item) is TensorStorageMetadata:
                items.append(self._tensor(fqn, item))
            else:
                raise Unsupported("an item of a type other than DCP's")
        if self.used != len(self.records):
            raise Unsupported("records a planner left without an item")
        return _join(self._header(items), self.ints, self.extents, self.digests)

    def _header(self, items: list[Any]) -> bytes:
        header = {
            "format": METADATA_FORMAT,
            "version": _optional_str(self.metadata.version),
            "storage_meta": _storage_meta(self.metadata.storage_meta),
            "planner_data": tag(self.metadata.planner_data),
            "checksum": self.checksum,
            "files": list(self.files),
            "codecs": list(self.codecs),
            "ints": len(self.ints),
            "extents": len(self.extents) // 2,
            "items": items,
        }
        return json.dumps(header, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()

    def _tensor(self, fqn: str, item: Any) -> list[Any]:
        dtype = str(item.properties.dtype).removeprefix("torch.")
        for chunk in item.chunks:
            self.ints.extend(chunk.offsets)
        for chunk in item.chunks:
            self.ints.extend(chunk.sizes)
        for chunk in item.chunks:
            self._record(fqn, chunk.offsets, dtype, tuple(chunk.sizes))
        return [fqn, dtype, list(item.size), _properties(item.properties), len(item.chunks)]

    def _record(self, fqn: str, offsets: Any, dtype: str, shape: tuple[int, ...]) -> None:
        from torch.distributed.checkpoint.metadata import MetadataIndex

        r = self.records.get(MetadataIndex(fqn, offsets))
        if type(r) is not ItemRecord or r.format != FORMAT or r.dtype != dtype or r.shape != shape:
            raise Unsupported(f"{fqn}: record")
        if len(r.digests) != len(r.chunks) or any(len(d) != 2 * self.width for d in r.digests):
            raise Unsupported(f"{fqn}: digests")
        file = self.files.setdefault(r.file, len(self.files))
        codec = self.codecs.setdefault(r.codec, len(self.codecs))
        self.ints.extend((file, codec, r.chunk_bytes, r.nbytes, len(self.extents) // 2))
        for offset, stored in r.chunks:
            self.extents.extend((offset, stored))
        for digest in r.digests:
            self.digests += bytes.fromhex(digest)
        self.used += 1


def _join(header: bytes, ints: array[int], extents: array[int], digests: bytearray) -> bytes:
    """PREFIX, the header's length and the header, then the columns little-endian, then the digests."""
    if sys.byteorder == "big":
        ints.byteswap()
        extents.byteswap()
    return b"".join(
        [PREFIX, len(header).to_bytes(8, "little"), header, ints.tobytes(), extents.tobytes(), bytes(digests)]
    )


def _optional_str(value: Any) -> str | None:
    if value is not None and type(value) is not str:
        raise Unsupported("not a string")
    return value


def _storage_meta(meta: Any) -> dict[str, Any] | None:
    if meta is None:
        return None
    modules = list(meta.modules)
    if not all(type(m) is str for m in modules):
        raise Unsupported("storage_meta modules")
    names = ("checkpoint_id", "save_id", "load_id")
    return {
        **{n: _optional_str(None if getattr(meta, n) is None else str(getattr(meta, n))) for n in names},
        "modules": modules,
    }


def _properties(p: Any) -> list[Any] | None:
    """DCP's tensor properties but the dtype, null when they are the defaults."""
    names = [
        str(p.layout).removeprefix("torch."),
        bool(p.requires_grad),
        str(p.memory_format).removeprefix("torch."),
        bool(p.pin_memory),
    ]
    return None if names == ["strided", False, "contiguous_format", False] else names


def tag(value: Any, depth: int = 0) -> Any:
    """JSON for planner data: scalars as they are, lists, tuples and dicts tagged so each comes back as itself."""
    if depth > MAX_DEPTH:
        raise Unsupported("planner data too deep")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) in (list, tuple):
        return {"l" if type(value) is list else "t": [tag(v, depth + 1) for v in value]}
    if type(value) is dict:
        return {"d": [[tag(k, depth + 1), tag(v, depth + 1)] for k, v in value.items()]}
    raise Unsupported(f"planner data of type {type(value).__name__}")
