"""zstd codec: one plain zstd frame per chunk (level 3 by default, like DCP's ZStandard extension).

Each frame records its content size and an XXH64 content checksum (standard zstd frame fields, so `zstd -d`
reads it), which is how a wrong-size, truncated or bit-flipped chunk is refused. The C library releases the
GIL while it works; with `threads` > 1 zstd itself splits a chunk into jobs (it helps from ~8 MiB up).
"""

from __future__ import annotations

import threading

import zstandard

from ..errors import OptionError
from .base import Buffer, CodecError, as_bytes, check_itemsize, check_size, copy_into, threads_of, writable_out

DEFAULT_LEVEL = 3  # zstandard's default, which DCP's ZStandard extension uses
FORMAT = "zstd"


class ZstdCodec:
    """Plain zstd frames; byte order is left alone, so it gains little on float mantissas."""

    name = "zstd"

    def __init__(self, level: int | None = None, threads: int | None = None) -> None:
        self.level = DEFAULT_LEVEL if level is None else level
        if not 1 <= self.level <= zstandard.MAX_COMPRESSION_LEVEL:
            raise OptionError(f"zstd level must be 1..{zstandard.MAX_COMPRESSION_LEVEL}, got {self.level}")
        self.threads = threads_of(threads)
        self.descriptor = f"{FORMAT}/{self.level}"
        self._local = threading.local()  # zstandard's (de)compressor objects are not thread-safe

    def _compressor(self) -> zstandard.ZstdCompressor:
        """This thread's compressor (contexts are reused: allocating one costs more than a small chunk)."""
        compressor: zstandard.ZstdCompressor | None = getattr(self._local, "compressor", None)
        if compressor is None:
            workers = 0 if self.threads == 1 else self.threads
            compressor = zstandard.ZstdCompressor(
                level=self.level, threads=workers, write_checksum=True, write_content_size=True
            )
            self._local.compressor = compressor
        return compressor

    def _decompressor(self) -> zstandard.ZstdDecompressor:
        """This thread's decompressor."""
        decompressor: zstandard.ZstdDecompressor | None = getattr(self._local, "decompressor", None)
        if decompressor is None:
            decompressor = self._local.decompressor = zstandard.ZstdDecompressor()
        return decompressor

    def encode(self, data: Buffer, itemsize: int) -> bytes:
        """One zstd frame with content size and checksum."""
        check_itemsize(itemsize)
        return self._compressor().compress(as_bytes(data))

    def decode(self, data: Buffer, nbytes: int, itemsize: int) -> bytes:
        """The frame's content, checked against `nbytes` before decoding and by its checksum after."""
        check_itemsize(itemsize)
        view = as_bytes(data)
        self._check_frame(view, nbytes)
        try:
            decoded = self._decompressor().decompress(view, max_output_size=nbytes, allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise CodecError(f"{self.descriptor}: {exc}") from exc
        check_size(len(decoded), nbytes, self.descriptor)
        return decoded

    def decode_into(self, data: Buffer, out: memoryview, itemsize: int) -> None:
        """Decode, then one copy into `out` (zstandard's one-shot API cannot write into a caller's buffer)."""
        target = writable_out(out)
        copy_into(self.decode(data, len(target), itemsize), target, self.descriptor)

    def _check_frame(self, view: memoryview, nbytes: int) -> None:
        """Refuse a frame that is not zstd, has no checksum, or records a content size other than `nbytes`."""
        try:
            params = zstandard.get_frame_parameters(view)
        except zstandard.ZstdError as exc:
            raise CodecError(f"{self.descriptor}: not a zstd frame: {exc}") from exc
        if not params.has_checksum:
            raise CodecError(f"{self.descriptor}: zstd frame has no content checksum")
        check_size(params.content_size, nbytes, self.descriptor)


def create(level: int | None, threads: int | None) -> ZstdCodec:
    """A zstd codec at `level` (default 3)."""
    return ZstdCodec(level, threads)


def from_descriptor(descriptor: str, threads: int | None) -> ZstdCodec:
    """Rebuild the codec from ``zstd/<level>``."""
    fmt, _, level = descriptor.partition("/")
    if fmt != FORMAT or not level.isdigit():
        raise CodecError(f"unknown codec descriptor {descriptor!r}")
    return ZstdCodec(int(level), threads)
