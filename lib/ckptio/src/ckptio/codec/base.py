"""The codec contract: one chunk of tensor bytes in, independently decodable bytes out, and its errors."""

from __future__ import annotations

import struct
from typing import Protocol

import xxhash

from ..errors import CheckpointError, OptionError

# Anything a codec reads from: bytes, bytearray, memoryview (of a tensor, a numpy array, an mmap).
Buffer = bytes | bytearray | memoryview

# Byte order and size of the xxh3-64 trailer that seals encoded chunks whose C decoder must never see garbage.
_SEAL = struct.Struct("<Q")
SEAL_BYTES = _SEAL.size


class CodecError(CheckpointError, ValueError):
    """An unknown codec, or encoded bytes cannot be decoded to what the caller expects (corrupt, truncated, wrong size, unknown)."""


class CodecUnavailable(CodecError):
    """The library a codec needs is not installed here; the message says what to install."""


class Codec(Protocol):
    """A stateless, thread-safe way to encode one chunk of a tensor's bytes so that it decodes on its own."""

    @property
    def name(self) -> str:
        """The registry name the codec was created under (``none``, ``zstd``, ``blosc``, ...)."""
        ...

    @property
    def descriptor(self) -> str:
        """Everything a reader needs to decode, e.g. ``blosc2/zstd-1/shuffle/xxh3``; record it beside the data."""
        ...

    def encode(self, data: Buffer, itemsize: int) -> Buffer:
        """Encode one C-contiguous chunk whose elements are `itemsize` bytes wide."""
        ...

    def decode(self, data: Buffer, nbytes: int, itemsize: int) -> Buffer:
        """Decode one chunk that must expand to exactly `nbytes`; raise CodecError otherwise."""
        ...

    def decode_into(self, data: Buffer, out: memoryview, itemsize: int) -> None:
        """Decode one chunk straight into `out` (writable, exactly the decoded size) where the library can."""
        ...


def as_bytes(data: Buffer) -> memoryview:
    """A flat byte view of a C-contiguous buffer (a tensor's uint8 view, bytes, ...), without copying."""
    view = memoryview(data)
    if not view.c_contiguous:
        raise CodecError("codec buffers must be C-contiguous")
    return view if view.ndim == 1 and view.format == "B" else view.cast("B")


def writable_out(out: memoryview | bytearray) -> memoryview:
    """The caller's destination as a flat writable byte view; refuse read-only or non-contiguous memory."""
    view = as_bytes(out)
    if view.readonly:
        raise CodecError("decode destination is read-only")
    return view


def check_itemsize(itemsize: int, limit: int = 1 << 16) -> int:
    """Validate an element size (1 for bytes/bool/fp8, 2 for bf16, ...) before it reaches a C library."""
    if not 1 <= itemsize <= limit:
        raise CodecError(f"itemsize must be between 1 and {limit}, got {itemsize}")
    return itemsize


def check_size(actual: int, expected: int, codec: str) -> None:
    """Refuse a chunk that decodes (or would decode) to a size other than what the caller recorded."""
    if actual != expected:
        raise CodecError(f"{codec}: chunk decodes to {actual} bytes, expected {expected}")


def threads_of(threads: int | None) -> int:
    """Library threads per call: the caller's count, or 1 (the storage layer parallelises across chunks)."""
    if threads is None:
        return 1
    if threads < 1:
        raise OptionError(f"threads must be >= 1, got {threads}")
    return threads


def no_level(codec: str, level: int | None) -> None:
    """Refuse a level for a codec that has none, rather than ignoring it silently."""
    if level is not None:
        raise OptionError(f"codec {codec!r} has no level")


def seal(parts: list[Buffer]) -> bytes:
    """Concatenate encoded parts and append their xxh3-64, so corruption is caught before any C decoder runs."""
    return b"".join(seal_parts(parts))


def seal_parts(parts: list[Buffer]) -> list[Buffer]:
    """`seal` without the concatenation: the parts, then their xxh3-64 trailer (a caller copies them once)."""
    digest = xxhash.xxh3_64()
    for part in parts:
        digest.update(part)
    return [*parts, _SEAL.pack(digest.intdigest())]


def encode_parts(codec: Codec, data: Buffer, itemsize: int) -> list[Buffer]:
    """A chunk encoded as parts whose concatenation is `codec.encode(data, itemsize)`: the codec's own
    `encode_parts` where it has one (it saves a copy of the encoded bytes), else its `encode`."""
    parts = getattr(codec, "encode_parts", None)
    return list(parts(data, itemsize)) if parts is not None else [codec.encode(data, itemsize)]


def copy_parts(parts: list[Buffer], out: memoryview, codec: str) -> int:
    """Copy encoded parts back to back to the start of `out`; their total size, or CodecError if it overflows."""
    views = [as_bytes(part) for part in parts]
    total = sum(len(v) for v in views)
    if total > len(out):
        raise CodecError(f"{codec}: an encoded chunk of {total} bytes does not fit its {len(out)}-byte buffer")
    at = 0
    for v in views:
        out[at : at + len(v)] = v
        at += len(v)
    return total


def unseal(data: Buffer, codec: str) -> memoryview:
    """The encoded body of a sealed chunk, after checking its trailer; CodecError if truncated or corrupt."""
    view = as_bytes(data)
    if len(view) < SEAL_BYTES:
        raise CodecError(f"{codec}: encoded chunk of {len(view)} bytes is shorter than its checksum")
    body = view[: len(view) - SEAL_BYTES]
    (recorded,) = _SEAL.unpack(view[len(body) :])
    if xxhash.xxh3_64_intdigest(body) != recorded:
        raise CodecError(f"{codec}: checksum mismatch: the encoded chunk is corrupt or truncated")
    return body


def copy_into(decoded: Buffer, out: memoryview, codec: str) -> None:
    """Copy a decoded chunk into the caller's buffer after checking that the sizes agree."""
    source = as_bytes(decoded)
    check_size(len(source), len(out), codec)
    out[:] = source
