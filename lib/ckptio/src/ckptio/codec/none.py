"""The identity codec: chunks are stored as they are, without copying, so `none` costs nothing."""

from __future__ import annotations

from .base import Buffer, CodecError, as_bytes, check_itemsize, check_size, copy_into, no_level, writable_out

DESCRIPTOR = "none"


class NoneCodec:
    """Identity: encode returns a view of the input (it aliases the caller's memory until written)."""

    name = "none"
    descriptor = DESCRIPTOR

    def encode(self, data: Buffer, itemsize: int) -> Buffer:
        """The chunk itself, as a flat byte view: no copy."""
        check_itemsize(itemsize)
        return as_bytes(data)

    def decode(self, data: Buffer, nbytes: int, itemsize: int) -> Buffer:
        """The stored bytes themselves (a view), after checking their length: a cut-off chunk is refused."""
        check_itemsize(itemsize)
        view = as_bytes(data)
        check_size(len(view), nbytes, self.descriptor)
        return view

    def decode_into(self, data: Buffer, out: memoryview, itemsize: int) -> None:
        """One copy into the caller's buffer (a reader can skip the codec and read into it directly)."""
        check_itemsize(itemsize)
        copy_into(data, writable_out(out), self.descriptor)


def create(level: int | None, threads: int | None) -> NoneCodec:
    """The identity codec; it has no level (`threads` is irrelevant to it)."""
    del threads
    no_level("none", level)
    return NoneCodec()


def from_descriptor(descriptor: str, threads: int | None) -> NoneCodec:
    """The identity codec (`threads` is irrelevant to it)."""
    del threads
    if descriptor != DESCRIPTOR:
        raise CodecError(f"unknown codec descriptor {descriptor!r}")
    return NoneCodec()
