"""The float codec: python-blosc2 byte-shuffles each element (typesize = element size) and ZSTD-codes each plane.

Weights from a narrow distribution share a few exponent values, so the bytes holding sign and exponent are
highly compressible while low mantissa bytes are nearly random; grouping byte i of every element together lets
zstd's entropy coder see each plane alone. Two presets (measured by benchmarks/codecs.py):

- ``blosc``: SHUFFLE + ZSTD clevel 1, the ratio preset (~31% saved on bf16 weights, ~16% on fp32);
- ``blosc-fast``: BITSHUFFLE + ZSTD clevel 1, ~2x faster to compress bf16 (1.5x fp32), 2-5 points less saved.

Encoded chunk = one or more blosc2 chunks back to back, then an xxh3-64 of them all. blosc2 keeps no checksum of
its own, so the trailer is what refuses a flipped bit before the C decoder ever reads it. One blosc2 chunk holds
at most `blosc2.MAX_BUFFERSIZE` (~2 GiB) input bytes: larger inputs are split into pieces of `piece_bytes`
(1 GiB), each an ordinary blosc2 chunk whose header records its own sizes. Settings never chosen: NEVER_SPLIT
(measured: with blosc2's default 32-128 KiB blocks it falls back to plain-zstd ratios; it ties only with large
blocks, so ALWAYS_SPLIT is passed); blosc2's own defaults (they differ from its docstring), hence every
parameter is passed explicitly.
"""

from __future__ import annotations

from typing import Any

import blosc2

from ..errors import OptionError
from .base import (
    Buffer,
    CodecError,
    as_bytes,
    check_itemsize,
    check_size,
    seal_parts,
    threads_of,
    unseal,
    writable_out,
)

FORMAT = "blosc2"
SEAL_NAME = "xxh3"
CODECS = {
    "zstd": blosc2.Codec.ZSTD,
    "lz4": blosc2.Codec.LZ4,
    "lz4hc": blosc2.Codec.LZ4HC,
    "blosclz": blosc2.Codec.BLOSCLZ,
    "zlib": blosc2.Codec.ZLIB,
}
FILTERS = {
    "nofilter": blosc2.Filter.NOFILTER,
    "shuffle": blosc2.Filter.SHUFFLE,
    "bitshuffle": blosc2.Filter.BITSHUFFLE,
}
# name -> (codec, clevel, filter)
PRESETS = {"blosc": ("zstd", 1, "shuffle"), "blosc-fast": ("zstd", 1, "bitshuffle")}
# 2 MiB blocks: each shuffled plane is >= 256 KiB, where zstd-1 picks its large-input parameters (measured:
# +0.6 points on bf16, +0.3 on fp32 and faster than blosc2's automatic 32-128 KiB blocks).
BLOCKSIZE = 2 << 20
PIECE_BYTES = 1 << 30  # input bytes per blosc2 chunk, well under blosc2.MAX_BUFFERSIZE
MAX_TYPESIZE = 255  # the blosc2 header stores typesize in one byte
HEADER_BYTES = 32  # a blosc2 chunk header (extended, as blosc2 writes it)


class BloscCodec:
    """blosc2 shuffle + codec over one chunk, each piece decodable alone, multi-threaded inside blosc2."""

    def __init__(
        self,
        codec: str = "zstd",
        clevel: int = 1,
        filter: str = "shuffle",
        threads: int | None = None,
        *,
        blocksize: int = BLOCKSIZE,
        piece_bytes: int = PIECE_BYTES,
    ) -> None:
        if codec not in CODECS or filter not in FILTERS:
            raise OptionError(f"blosc2 codec must be one of {sorted(CODECS)} and filter one of {sorted(FILTERS)}")
        if not 0 <= clevel <= 9:
            raise OptionError(f"blosc2 clevel must be 0..9, got {clevel}")
        if not 0 < piece_bytes <= PIECE_BYTES:
            raise OptionError(f"piece_bytes must be 1..{PIECE_BYTES}")
        self.codec, self.clevel, self.filter = codec, clevel, filter
        self.threads = threads_of(threads)
        self.blocksize, self.piece_bytes = blocksize, piece_bytes
        self.descriptor = f"{FORMAT}/{codec}-{clevel}/{filter}/{SEAL_NAME}"
        self.name = next((n for n, p in PRESETS.items() if p == (codec, clevel, filter)), "blosc")
        blosc2.set_releasegil(True)  # lets chunks compress in parallel Python threads (off by default)

    def _cparams(self, itemsize: int) -> dict[str, Any]:
        """Every compression parameter, explicit (blosc2's defaults are not what its docstring says)."""
        filter = FILTERS[self.filter]
        if itemsize == 1 and filter == blosc2.Filter.SHUFFLE:
            filter = blosc2.Filter.NOFILTER  # byte shuffle of 1-byte elements is the identity: skip the pass
        return {
            "codec": CODECS[self.codec],
            "clevel": self.clevel,
            "typesize": itemsize,
            "filters": [filter],
            "filters_meta": [0],
            "nthreads": self.threads,
            "blocksize": self.blocksize,
            "splitmode": blosc2.SplitMode.ALWAYS_SPLIT,
        }

    def encode(self, data: Buffer, itemsize: int) -> bytes:
        """blosc2 chunks of at most `piece_bytes` each (whole elements), sealed with their xxh3."""
        return b"".join(self.encode_parts(data, itemsize))

    def encode_parts(self, data: Buffer, itemsize: int) -> list[Buffer]:
        """`encode` as its parts (the blosc2 chunks, then the trailer), for a caller that copies them into place."""
        check_itemsize(itemsize, MAX_TYPESIZE)
        view = as_bytes(data)
        params = self._cparams(itemsize)
        step = max(itemsize, self.piece_bytes // itemsize * itemsize)
        return seal_parts([_compress(view[at : at + step], params) for at in range(0, len(view), step)])

    def decode(self, data: Buffer, nbytes: int, itemsize: int) -> bytearray:
        """A new buffer of exactly `nbytes`, decoded (see decode_into)."""
        out = bytearray(nbytes)
        self.decode_into(data, memoryview(out), itemsize)
        return out

    def decode_into(self, data: Buffer, out: memoryview, itemsize: int) -> None:
        """Check the seal and every piece's header against `len(out)`, then decompress straight into `out`."""
        check_itemsize(itemsize, MAX_TYPESIZE)
        target = writable_out(out)
        pieces = _pieces(unseal(data, self.descriptor), self.descriptor)
        check_size(sum(size for _, size in pieces), len(target), self.descriptor)
        at = 0
        for piece, size in pieces:
            try:
                blosc2.decompress2(piece, dst=target[at : at + size], nthreads=self.threads)
            except (RuntimeError, ValueError) as exc:
                raise CodecError(f"{self.descriptor}: {exc}") from exc
            at += size


def _compress(piece: memoryview, params: dict[str, Any]) -> bytes:
    """One blosc2 chunk; blosc2's RuntimeError becomes a CodecError naming the settings."""
    try:
        chunk: bytes = blosc2.compress2(piece, **params)
    except RuntimeError as exc:
        raise CodecError(f"blosc2 could not compress {len(piece)} bytes with {params}: {exc}") from exc
    return chunk


def _pieces(body: memoryview, descriptor: str) -> list[tuple[memoryview, int]]:
    """Split sealed body bytes into (blosc2 chunk, decoded size) pairs, reading each chunk's header."""
    pieces: list[tuple[memoryview, int]] = []
    at = 0
    while at < len(body):
        rest = body[at:]
        if len(rest) < HEADER_BYTES:
            raise CodecError(f"{descriptor}: truncated blosc2 header ({len(rest)} bytes)")
        nbytes, cbytes, _ = blosc2.get_cbuffer_sizes(rest)
        if not HEADER_BYTES <= cbytes <= len(rest) or nbytes <= 0:
            raise CodecError(f"{descriptor}: bad blosc2 header (nbytes {nbytes}, cbytes {cbytes}, {len(rest)} left)")
        pieces.append((rest[:cbytes], nbytes))
        at += cbytes
    return pieces


def from_descriptor(descriptor: str, threads: int | None) -> BloscCodec:
    """Rebuild the codec from ``blosc2/<codec>-<clevel>/<filter>/xxh3``."""
    parts = descriptor.split("/")
    if len(parts) != 4 or parts[0] != FORMAT or parts[3] != SEAL_NAME:
        raise CodecError(f"unknown codec descriptor {descriptor!r}")
    codec, _, clevel = parts[1].rpartition("-")
    if not clevel.isdigit():
        raise CodecError(f"unknown codec descriptor {descriptor!r}")
    return BloscCodec(codec, int(clevel), parts[2], threads)


def preset(name: str, level: int | None, threads: int | None) -> BloscCodec:
    """A named preset, `level` overriding its blosc2 clevel."""
    codec, clevel, filter = PRESETS[name]
    return BloscCodec(codec, clevel if level is None else level, filter, threads)


def create(level: int | None, threads: int | None) -> BloscCodec:
    """The ratio preset `blosc`: SHUFFLE + ZSTD clevel 1."""
    return preset("blosc", level, threads)


def create_fast(level: int | None, threads: int | None) -> BloscCodec:
    """The speed preset `blosc-fast`: BITSHUFFLE + ZSTD clevel 1."""
    return preset("blosc-fast", level, threads)
