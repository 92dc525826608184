"""Opt-in zipnn codec (the ratio peer to measure): Huffman-codes exponent bytes; registered only if zipnn imports.

Three hazards of zipnn 0.5.4, each handled here: `compress` rewrites its input in place (so it only ever sees a
private copy), a bit flip in its stream decodes to wrong bytes without an error, and a buffer shorter than one
float32 crashes the process (so the stream is sealed with an xxh3 trailer, and buffers must hold whole words).
zipnn's byte mode knows fp8, bf16/fp16 and fp32; 8- and 16-byte elements are grouped as float32 words.
"""

from __future__ import annotations

import threading
from typing import Any

import zipnn

from .base import (
    Buffer,
    CodecError,
    as_bytes,
    check_itemsize,
    check_size,
    copy_into,
    no_level,
    seal,
    threads_of,
    unseal,
    writable_out,
)

FORMAT = "zipnn"
SEAL_NAME = "xxh3"
DESCRIPTOR = f"{FORMAT}/{SEAL_NAME}"
ZIPNN_HEADER = 32  # "ZN", version, ..., original length at bytes 16..24 (little-endian)


def word_of(itemsize: int) -> tuple[str, int]:
    """zipnn's byte-mode dtype and word width for an element size (lossless whatever the real dtype)."""
    if itemsize in (1, 2):
        return ("float8_e4m3fn", 1) if itemsize == 1 else ("bfloat16", 2)
    if itemsize % 4 == 0:
        return "float32", 4
    raise CodecError(f"zipnn cannot group {itemsize}-byte elements")


class ZipnnCodec:
    """zipnn over one chunk; every call works on a private copy."""

    name = "zipnn"
    descriptor = DESCRIPTOR

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads_of(threads)
        self._local = threading.local()  # ZipNN objects rewrite their header per call: one per thread

    def _zipnn(self, dtype: str) -> Any:
        """This thread's ZipNN instance for a byte-mode dtype."""
        cache: dict[str, Any] = self._local.__dict__.setdefault("by_dtype", {})
        if dtype not in cache:
            cache[dtype] = zipnn.ZipNN(method="AUTO", input_format="byte", bytearray_dtype=dtype, threads=self.threads)
        return cache[dtype]

    def encode(self, data: Buffer, itemsize: int) -> bytes:
        """zipnn's stream over a private copy of the chunk, sealed with xxh3."""
        check_itemsize(itemsize)
        view = as_bytes(data)
        if not view:
            return seal([])
        dtype, word = word_of(itemsize)
        if len(view) % word:
            raise CodecError(f"zipnn needs whole {word}-byte words, got {len(view)} bytes")
        return seal([bytes(self._zipnn(dtype).compress(bytearray(view)))])

    def decode(self, data: Buffer, nbytes: int, itemsize: int) -> Buffer:
        """The chunk's bytes, after the seal and zipnn's recorded length are checked."""
        check_itemsize(itemsize)
        body = unseal(data, self.descriptor)
        if not body:
            check_size(0, nbytes, self.descriptor)
            return b""
        if len(body) < ZIPNN_HEADER or bytes(body[:2]) != b"ZN":
            raise CodecError(f"{self.descriptor}: not a zipnn stream")
        check_size(int.from_bytes(body[16:24], "little"), nbytes, self.descriptor)
        decoded: Buffer = self._zipnn(word_of(itemsize)[0]).decompress(bytes(body))
        check_size(len(decoded), nbytes, self.descriptor)
        return decoded

    def decode_into(self, data: Buffer, out: memoryview, itemsize: int) -> None:
        """Decode, then one copy into `out`."""
        target = writable_out(out)
        copy_into(self.decode(data, len(target), itemsize), target, self.descriptor)


def create(level: int | None, threads: int | None) -> ZipnnCodec:
    """The zipnn codec (its settings are zipnn's own: no level)."""
    no_level("zipnn", level)
    return ZipnnCodec(threads)


def from_descriptor(descriptor: str, threads: int | None) -> ZipnnCodec:
    """Rebuild the codec from ``zipnn/xxh3``."""
    if descriptor != DESCRIPTOR:
        raise CodecError(f"unknown codec descriptor {descriptor!r}")
    return ZipnnCodec(threads)
