"""The on-disk layout (see docs/format.md): torch's zip format, 4 KiB-aligned stored records,
plus a `ckptio/header` record first and a `ckptio/index` record after the data. Files written before the
library had its own name (gdsbench 0.1: `gdsbench/header`, `gdsbench/index`, format `gdsbench-checkpoint`)
read the same way.

This module only describes and validates bytes: no threads, no I/O policy. `read_index` turns a
path into a validated `Index` or raises InvalidCheckpoint / TruncatedCheckpoint / CorruptCheckpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from . import integrity
from .errors import CorruptCheckpoint, InvalidCheckpoint, TruncatedCheckpoint

FORMAT_NAME = "ckptio-checkpoint"
FORMAT_VERSION = 1
ALIGNMENT = 4096
HEADER_RECORD = "ckptio/header"
INDEX_RECORD = "ckptio/index"
#: The record folder each format name goes with: this one, and gdsbench 0.1's (read, never written).
FAMILIES = {"ckptio": FORMAT_NAME, "gdsbench": "gdsbench-checkpoint"}
PICKLE_RECORD = "data.pkl"
MAGIC = b"GDSBCKPT"
HEADER = struct.Struct("<8sIIQQQQ")  # magic, version, flags, file_size, index_off, index_len, index_xxh3
MAX_INDEX_BYTES = 64 << 20
MAX_DIRECTORY_BYTES = 256 << 20

ReadAt = Callable[[int, int], bytes]
#: Several (offset, length) reads at once (an object store answers them in parallel); the bytes of each, in order.
ReadMany = Callable[[list[tuple[int, int]]], list[bytes]]

DTYPES: dict[str, Any] = {}  # filled lazily: dtype name -> torch.dtype


def dtype_table() -> dict[str, Any]:
    """Every torch dtype this torch build has, by its short name ('bfloat16', 'float8_e4m3fn')."""
    if not DTYPES:
        import torch

        for name in dir(torch):
            value = getattr(torch, name)
            if isinstance(value, torch.dtype):
                DTYPES[str(value).removeprefix("torch.")] = value
    return DTYPES


@dataclass(frozen=True)
class Header:
    """The fixed 48-byte record at the front: where the index is and how big the file must be."""

    version: int
    file_size: int
    index_offset: int
    index_nbytes: int
    index_xxh3: int

    def pack(self) -> bytes:
        """Serialise to the on-disk 48 bytes."""
        return HEADER.pack(
            MAGIC, self.version, 0, self.file_size, self.index_offset, self.index_nbytes, self.index_xxh3
        )


@dataclass(frozen=True)
class StorageEntry:
    """One saved storage: zip record `data/<key>` at an aligned offset, and its chunk digests."""

    key: str
    name: str  # key path of the first tensor using it, e.g. "layers.3.attn.wq"
    dtype: str
    nbytes: int
    offset: int  # file offset of the record's data (from the zip directory)
    digests: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    """Everything load() needs, validated against the zip directory.

    `path` names the file in messages; `data_path` is what reads open (by default the same; a load
    pins the inode it validated by reading through /proc/self/fd, so a concurrent save's rename
    cannot mix one generation's index with another's data)."""

    path: str
    header: Header
    checksum: str
    chunk_bytes: int
    pickle_offset: int
    pickle_nbytes: int
    pickle_digest: str
    storages: tuple[StorageEntry, ...]
    data_path: str = ""

    def __post_init__(self) -> None:
        """Reads go to the named file unless told otherwise."""
        if not self.data_path:
            object.__setattr__(self, "data_path", self.path)


@dataclass(frozen=True)
class ZipEntry:
    """A zip record as the central directory and local header describe it."""

    name: str
    data_offset: int
    nbytes: int
    method: int


def render_index(checksum: str, chunk_bytes: int, pickle_digest: str, storages: list[dict[str, Any]]) -> bytes:
    """The index record's JSON bytes (digests are fixed width, so placeholders keep the length)."""
    doc = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "alignment": ALIGNMENT,
        "checksum": checksum,
        "chunk_bytes": chunk_bytes,
        "pickle_digest": pickle_digest,
        "storages": storages,
    }
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=True).encode()


# ---------------------------------------------------------------- zip directory parsing


def _u(fmt: str, data: bytes, at: int) -> tuple[int, ...]:
    """struct.unpack_from with little-endian `fmt`."""
    return struct.unpack_from("<" + fmt, data, at)


def _zip64_extra(extra: bytes, fields: list[int]) -> list[int]:
    """Replace 0xFFFFFFFF fields (in order) by values from the zip64 extra block (id 1)."""
    at = 0
    while at + 4 <= len(extra):
        tag, size = _u("HH", extra, at)
        if tag == 1:
            vals = list(struct.unpack_from(f"<{size // 8}Q", extra, at + 4))
            out = []
            for f in fields:
                out.append(vals.pop(0) if f == 0xFFFFFFFF and vals else f)
            return out
        at += 4 + size
    return fields


def _end_of_directory(read_at: ReadAt, size: int) -> tuple[int, int, int]:
    """(directory offset, directory size, entry count) from the EOCD / zip64 EOCD records."""
    tail_len = min(size, 22 + 65535)
    tail = read_at(size - tail_len, tail_len)
    pos = tail.rfind(b"PK\x05\x06")
    if pos < 0 or pos + 22 > len(tail):
        raise ValueError("no end-of-central-directory record")
    count, cd_size, cd_off = _u("HII", tail, pos + 10)
    if 0xFFFFFFFF in (cd_size, cd_off) or count == 0xFFFF:
        loc = pos - 20
        if loc < 0 or tail[loc : loc + 4] != b"PK\x06\x07":
            raise ValueError("zip64 locator missing")
        (eocd64,) = _u("Q", tail, loc + 8)
        rec = read_at(eocd64, 56)
        if len(rec) < 56 or rec[:4] != b"PK\x06\x06":
            raise ValueError("zip64 end-of-central-directory record missing")
        count, cd_size, cd_off = _u("QQQ", rec, 32)
    return cd_off, cd_size, count


def read_zip_directory(read_at: ReadAt, size: int, read_many: ReadMany | None = None) -> dict[str, ZipEntry]:
    """Parse the central directory, then every record's local header (all at once through `read_many` where
    given); return records by full name."""
    cd_off, cd_size, count = _end_of_directory(read_at, size)
    if cd_size > MAX_DIRECTORY_BYTES or cd_off + cd_size > size:
        raise ValueError("central directory out of bounds")
    cd = read_at(cd_off, cd_size)
    listed: list[tuple[str, int, int, int]] = []  # name, local header offset, size, method
    at = 0
    for _ in range(count):
        if cd[at : at + 4] != b"PK\x01\x02":
            raise ValueError("bad central directory entry")
        (method,) = _u("H", cd, at + 10)
        csize, usize, nlen, elen, clen = _u("IIHHH", cd, at + 20)
        (lho,) = _u("I", cd, at + 42)
        name = cd[at + 46 : at + 46 + nlen].decode("utf-8", "replace")
        extra = cd[at + 46 + nlen : at + 46 + nlen + elen]
        usize, csize, lho = _zip64_extra(extra, [usize, csize, lho])
        listed.append((name, lho, usize, method))
        at += 46 + nlen + elen + clen
    ranges = [(lho, 30) for _, lho, _, _ in listed]
    locals_ = read_many(ranges) if read_many else [read_at(o, n) for o, n in ranges]
    return {
        name: ZipEntry(name, _local_data_offset(local, lho, name), usize, method)
        for (name, lho, usize, method), local in zip(listed, locals_)
    }


def _local_data_offset(local: bytes, header_offset: int, name: str) -> int:
    """Where a record's data starts: after its local header (the 30 bytes `local`), name and extra field."""
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise ValueError(f"bad local header for {name}")
    nlen, elen = _u("HH", local, 26)
    return header_offset + 30 + nlen + elen


# ---------------------------------------------------------------- reading and validating


def _reader(fd: int) -> ReadAt:
    """A read_at(offset, n) over an fd (short at EOF)."""
    return lambda offset, n: os.pread(fd, n, offset)


def _read_header(path: str, read_at: ReadAt, size: int) -> tuple[Header, str]:
    """Parse and check the first record: our magic, version and the file size it promises; with the
    family its name says (`ckptio`, or `gdsbench` for files of gdsbench 0.1)."""
    local = read_at(0, 30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise InvalidCheckpoint(path, "not a zip file (no local header at offset 0)")
    nlen, elen = _u("HH", local, 26)
    name = read_at(30, nlen).decode("utf-8", "replace")
    family = next((f for f in FAMILIES if name.endswith(f"/{f}/header")), None)
    if family is None:
        raise InvalidCheckpoint(
            path, f"first record is {name!r}, not '<archive>/{HEADER_RECORD}' (a plain torch.save file? use torch.load)"
        )
    start = 30 + nlen + elen
    raw = read_at(start, HEADER.size)
    if len(raw) < HEADER.size:
        raise TruncatedCheckpoint(path, start + HEADER.size, size)
    magic, version, _flags, file_size, ioff, ilen, ixxh = HEADER.unpack(raw)
    if magic != MAGIC:
        raise InvalidCheckpoint(path, "bad header magic")
    if version != FORMAT_VERSION:
        raise InvalidCheckpoint(path, f"unsupported format version {version} (this reader: {FORMAT_VERSION})")
    if size < file_size:
        raise TruncatedCheckpoint(path, file_size, size)
    if size > file_size:
        raise InvalidCheckpoint(path, f"{size - file_size} trailing bytes after the end the header declares")
    if ilen > MAX_INDEX_BYTES:
        raise InvalidCheckpoint(path, f"index of {ilen} bytes exceeds the {MAX_INDEX_BYTES}-byte limit")
    if ioff + ilen > file_size or ioff < start + HEADER.size:
        raise InvalidCheckpoint(path, "index extent outside the file")
    return Header(version, file_size, ioff, ilen, ixxh), family


def _read_index_doc(path: str, read_at: ReadAt, header: Header, family: str) -> dict[str, Any]:
    """Read the index record, check its xxh3 against the header, parse its JSON."""
    raw = read_at(header.index_offset, header.index_nbytes)
    if integrity.index_digest(raw) != header.index_xxh3:
        raise CorruptCheckpoint(path, "<index>", "index record does not match its header digest")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InvalidCheckpoint(path, f"index is not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FAMILIES[family]:
        raise InvalidCheckpoint(path, f"index has no 'format': {FAMILIES[family]!r}")
    return doc


def _want(path: str, doc: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """doc[key], which must exist and be of `kind` (bools are not ints)."""
    value = doc.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise InvalidCheckpoint(path, f"index field {key!r} missing or not {kind}")
    return value


def _check_digests(
    path: str, doc: dict[str, Any], digests: Any, nbytes: int, checksum: str, chunk: int
) -> tuple[str, ...]:
    """Digest list must have one fixed-width hex string per chunk (none when checksum is 'none')."""
    expect = 0 if checksum == "none" else integrity.chunk_count(nbytes, chunk)
    w = integrity.width(checksum)
    ok = (
        isinstance(digests, list)
        and len(digests) == expect
        and all(isinstance(d, str) and len(d) == w and all(c in "0123456789abcdef" for c in d) for d in digests)
    )
    if not ok:
        raise InvalidCheckpoint(path, f"storage {doc.get('key')!r}: digests malformed")
    return tuple(digests)


def _storage_entries(
    path: str, doc: dict[str, Any], checksum: str, chunk: int, records: dict[str, ZipEntry], archive: str
) -> tuple[StorageEntry, ...]:
    """Validate each index storage against the dtype table and its zip record."""
    entries = []
    for item in _want(path, doc, "storages", list):
        if not isinstance(item, dict):
            raise InvalidCheckpoint(path, "storage entry is not an object")
        key, name = _want(path, item, "key", str), _want(path, item, "name", str)
        dtype, nbytes = _want(path, item, "dtype", str), _want(path, item, "nbytes", int)
        if dtype not in dtype_table() or nbytes < 0:
            raise InvalidCheckpoint(path, f"storage {key!r}: bad dtype {dtype!r} or size {nbytes}")
        rec = records.get(f"{archive}/data/{key}")
        if rec is None or rec.nbytes != nbytes or rec.method != 0:
            raise InvalidCheckpoint(path, f"storage {key!r}: zip record missing, compressed or of another size")
        if nbytes and rec.data_offset % ALIGNMENT:
            raise InvalidCheckpoint(path, f"storage {key!r}: data offset {rec.data_offset} not {ALIGNMENT}-aligned")
        digests = _check_digests(path, item, item.get("digests"), nbytes, checksum, chunk)
        entries.append(StorageEntry(key, name, dtype, nbytes, rec.data_offset, digests))
    return tuple(entries)


def _check_extents(path: str, header: Header, storages: tuple[StorageEntry, ...], pickle: ZipEntry) -> None:
    """Extents must lie inside the file and must not overlap each other, the pickle or the index."""
    spans = sorted(
        [(s.offset, s.offset + s.nbytes, s.key) for s in storages if s.nbytes]
        + [
            (pickle.data_offset, pickle.data_offset + pickle.nbytes, "data.pkl"),
            (header.index_offset, header.index_offset + header.index_nbytes, "index"),
        ]
    )
    prev_end, prev = 0, "start"
    for start, end, key in spans:
        if start < prev_end:
            raise InvalidCheckpoint(path, f"record {key!r} overlaps {prev!r}")
        if end > header.file_size:
            raise InvalidCheckpoint(path, f"record {key!r} extends past the end of the file")
        prev_end, prev = end, key


def parse_index(path: str, fd: int) -> Index:
    """Validate an open checkpoint file and return its Index (the work behind read_index)."""
    return parse(path, _reader(fd), os.fstat(fd).st_size)


def parse(path: str, read_at: ReadAt, size: int, read_many: ReadMany | None = None) -> Index:
    """Validate a checkpoint of `size` bytes read through `read_at` (a file's or an object's) and return its Index."""
    header, family = _read_header(path, read_at, size)
    doc = _read_index_doc(path, read_at, header, family)
    if doc.get("version") != FORMAT_VERSION:
        raise InvalidCheckpoint(path, f"unsupported index version {doc.get('version')!r}")
    checksum = _want(path, doc, "checksum", str)
    chunk = _want(path, doc, "chunk_bytes", int)
    if checksum not in ("none", *integrity.ALGORITHMS) or chunk <= 0 or chunk % ALIGNMENT:
        raise InvalidCheckpoint(path, f"bad checksum {checksum!r} or chunk_bytes {chunk}")
    try:
        records = read_zip_directory(read_at, size, read_many)
    except (ValueError, struct.error) as e:
        raise InvalidCheckpoint(path, f"zip directory: {e}") from None
    archive = next(iter(records), "/").split("/", 1)[0]
    pickle = records.get(f"{archive}/{PICKLE_RECORD}")
    index_rec = records.get(f"{archive}/{family}/index")
    if (
        pickle is None
        or index_rec is None
        or (index_rec.data_offset, index_rec.nbytes) != (header.index_offset, header.index_nbytes)
    ):
        raise InvalidCheckpoint(path, "zip directory lacks data.pkl or disagrees with the header about the index")
    storages = _storage_entries(path, doc, checksum, chunk, records, archive)
    if len({s.key for s in storages}) != len(storages):
        raise InvalidCheckpoint(path, "duplicate storage keys in index")
    _check_extents(path, header, storages, pickle)
    pickle_digest = _want(path, doc, "pickle_digest", str)
    return Index(path, header, checksum, chunk, pickle.data_offset, pickle.nbytes, pickle_digest, storages)


def regular_only(fd: int, path: str | os.PathLike[str]) -> int:
    """`fd`, made blocking again, if it is a regular file; else closed, and InvalidCheckpoint naming what
    is there instead (a directory, FIFO, device or socket)."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kinds = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket"}
        kind = next((name for test, name in kinds.items() if test(mode)), "a device")
        raise InvalidCheckpoint(path, f"not a regular file: {kind}")
    os.set_blocking(fd, True)
    return fd


def open_file(path: str) -> int:
    """A read-only descriptor of a checkpoint file: opened without blocking (a FIFO cannot hang it), regular
    files only (InvalidCheckpoint otherwise). A link is followed: the caller named it."""
    return regular_only(os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY), path)


@contextlib.contextmanager
def pinned_index(path: str | os.PathLike[str]) -> Iterator[Index]:
    """Open a checkpoint once, validate its index, and yield it with `data_path` reading that same
    inode for as long as the block runs (whatever renames happen to the name meanwhile)."""
    path = os.fspath(path)
    fd = open_file(path)
    try:
        yield replace(parse_index(path, fd), data_path=f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def read_index(path: str | os.PathLike[str]) -> Index:
    """Open and validate a checkpoint's header, index and zip directory without reading tensor data.

    Args:
        path: the checkpoint file.

    Returns:
        The validated Index: checksum algorithm, chunk size, pickle extent and one StorageEntry per
        saved storage (key, tensor name, dtype, size, aligned file offset, chunk digests).

    Raises:
        InvalidCheckpoint: not a ckptio checkpoint, or a malformed header, index or zip directory.
        TruncatedCheckpoint: the file is shorter than its header declares.
        CorruptCheckpoint: the index bytes do not match the digest in the header.
    """
    path = os.fspath(path)
    fd = open_file(path)
    try:
        return parse_index(path, fd)
    finally:
        os.close(fd)
