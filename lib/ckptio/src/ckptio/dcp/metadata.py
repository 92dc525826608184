"""A DCP checkpoint's `.metadata`: sealed, written, read back and checked (records.py names what it holds).

Commit protocol: a save writes only new file names (its own save id), so nothing the current
`.metadata` refers to is touched; each rank fsyncs its data file and the directory before its
write results reach the coordinator; the coordinator then writes `.metadata` under a temporary name,
fsyncs it, renames it into place and fsyncs the directory. Only then are the data files of earlier
saves (and of saves that died half-way) removed. An interrupted save or overwrite therefore leaves the
previous checkpoint loadable; a torn or flipped chunk is refused when read (CorruptCheckpoint names
the file and tensor). Saves to one directory commit one at a time (lock.py), so the cleanup never
removes files a live save will commit.

A checkpoint directory is untrusted input. `.metadata` is a payload followed by a sealed trailer (magic +
SHA-256 of the payload), checked before a byte of it is decoded; it is opened without following links, and
must be a regular file. A Writer writes format 3 (table.py: a JSON header and integer columns, no pickle;
each record is built and checked when a rank first asks for it). Formats 1 and 2 (a pickle of DCP's
Metadata) still load: unpickled with torch's weights-only unpickler and an allowlist of DCP's metadata
classes, then checked whole (validate.py); a Writer still writes format 2 for metadata format 3 cannot
express (planner data of other types than JSON's, tuples and dicts; records a custom planner left without
an item). Loading a checkpoint never runs arbitrary pickled code nor opens a file outside the directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch import _weights_only_unpickler as restricted

from ..durable import fsync_dir
from ..errors import CorruptCheckpoint, InvalidCheckpoint
from ..format import regular_only
from ..unpickle import allowlist_once
from .records import LEGACY_ITEM_RECORD, METADATA, SEAL_BYTES, SEAL_MAGIC, SEAL_MAGIC_V3, ItemRecord
from .table import PREFIX, decode
from .table_encode import encode
from .validate import check_metadata


def _allowed() -> list[Any]:
    """The classes a checkpoint's .metadata may contain: DCP's metadata types and ItemRecord (also under
    the name gdsbench 0.1 pickled it with, so its checkpoints keep loading)."""
    from torch.distributed.checkpoint import metadata as md

    names = [
        "Metadata",
        "TensorStorageMetadata",
        "TensorProperties",
        "ChunkStorageMetadata",
        "BytesStorageMetadata",
        "MetadataIndex",
        "StorageMeta",
        "_MEM_FORMAT_ENCODING",
    ]
    return [getattr(md, name) for name in names] + [ItemRecord, (ItemRecord, LEGACY_ITEM_RECORD)]


def write_metadata(directory: Path, metadata: Any, save_id: str) -> None:
    """Commit a checkpoint: sealed .metadata written under a temporary name, fsynced, renamed, directory
    fsynced. A failure removes the temporary file."""
    tmp = directory / f"{METADATA}.{save_id}.tmp"
    data = seal(metadata)
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / METADATA)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(str(directory))


def read_metadata(directory: Path) -> Any:
    """A checkpoint's Metadata: the seal checked, then the weights-only unpickler, then structural checks."""
    return read_commit(directory)[0]


def read_commit(directory: Path) -> tuple[Any, bytes]:
    """A checkpoint's Metadata (as read_metadata) and the identity of its commit (commit_id)."""
    data = _metadata_bytes(directory)
    path = directory / METADATA
    payload, magic = unseal(path, data)
    if magic == SEAL_MAGIC_V3:
        return decode(payload, path), commit_id(data)
    metadata = _unpickle(path, payload)
    check_metadata(metadata, path, magic is not None)
    return metadata, commit_id(data)


def current_commit(directory: Path) -> bytes:
    """The identity of the commit `.metadata` holds now (its bytes read, nothing decoded)."""
    return commit_id(_metadata_bytes(directory))


def commit_id(data: bytes) -> bytes:
    """What tells one commit's `.metadata` from another's: its seal's digest (every byte hashed if unsealed)."""
    magic = data[-SEAL_BYTES : -SEAL_BYTES + len(SEAL_MAGIC)] if len(data) >= SEAL_BYTES else b""
    return data[-SEAL_BYTES:] if magic in (SEAL_MAGIC, SEAL_MAGIC_V3) else hashlib.sha256(data).digest()


def _metadata_bytes(directory: Path) -> bytes:
    """The bytes of a committed `.metadata` (InvalidCheckpoint if there is none)."""
    if not os.path.lexists(directory / METADATA):
        raise InvalidCheckpoint(directory, f"no {METADATA}: not a committed checkpoint")
    return read_regular(directory, METADATA)


def seal(metadata: Any) -> bytes:
    """The bytes of a .metadata: format 3 where it expresses the metadata, else format 2; then the seal."""
    payload = encode(metadata)
    if payload is not None:
        return seal_table(payload)
    payload = pickle.dumps(metadata, protocol=2)  # the weights-only unpickler reads protocol 2
    return payload + SEAL_MAGIC + hashlib.sha256(payload).digest()


def seal_table(payload: bytes) -> bytes:
    """The bytes of a format-3 .metadata: its payload (table_encode.py), then the seal."""
    return payload + SEAL_MAGIC_V3 + hashlib.sha256(payload).digest()


def read_regular(directory: Path, name: str) -> bytes:
    """The bytes of a regular file directly inside `directory`, never through a link, a FIFO or a device."""
    fd = open_regular(directory, name)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def open_regular(directory: Path, name: str) -> int:
    """A read-only descriptor of `name` inside `directory`: no link followed, no blocking open, regular
    files only (anything else is InvalidCheckpoint; a missing file too)."""
    if "/" in name or name in ("", ".", ".."):
        raise InvalidCheckpoint(directory, f"refused file name {name!r}: not inside the checkpoint directory")
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise InvalidCheckpoint(directory, f"cannot open the checkpoint directory: {e.strerror}") from None
    try:
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise InvalidCheckpoint(directory / name, "missing (a file the checkpoint needs)") from None
    except OSError as e:
        raise InvalidCheckpoint(directory / name, f"cannot open it safely: {e.strerror}") from None
    finally:
        os.close(dir_fd)
    return regular_only(fd, directory / name)


def unseal(path: str | os.PathLike[str], data: bytes) -> tuple[bytes, bytes | None]:
    """The payload of a .metadata file and its seal's magic (None: unsealed, format 1); CorruptCheckpoint if
    the seal disagrees, InvalidCheckpoint for a format-3 payload that lost its seal."""
    magic = data[-SEAL_BYTES : -SEAL_BYTES + len(SEAL_MAGIC)] if len(data) >= SEAL_BYTES else b""
    if magic not in (SEAL_MAGIC, SEAL_MAGIC_V3):
        if data.startswith(PREFIX):
            raise InvalidCheckpoint(path, "format-3 metadata without its seal (cut or corrupt)")
        return data, None  # format 1 (validate.py then accepts format-1 records only)
    payload, digest = data[:-SEAL_BYTES], data[-SEAL_BYTES + len(SEAL_MAGIC) :]
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptCheckpoint(path, METADATA, "SHA-256 of the metadata does not match its seal")
    return payload, magic


def _unpickle(path: Path, payload: bytes) -> Any:
    """Unpickle metadata with the weights-only unpickler and DCP's metadata classes only."""
    try:
        with torch.serialization.safe_globals(_allowed()), allowlist_once():
            return restricted.Unpickler(io.BytesIO(payload)).load()
    except Exception as e:  # the unpickler raises many types on hostile input: all mean "refused"
        raise InvalidCheckpoint(path, f"metadata refused by the weights-only unpickler: {e}") from None


def referenced_files(metadata: Any) -> set[str]:
    """The data files a committed checkpoint's records point into."""
    table = getattr(metadata.storage_data, "files", None)  # format 3 lists them (records are built on use)
    if isinstance(table, list):
        return set(table)
    return {r.file for r in metadata.storage_data.values() if isinstance(r, ItemRecord)}
