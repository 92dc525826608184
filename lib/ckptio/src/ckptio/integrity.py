"""Per-chunk checksums (xxh3_64 or crc32c); both release the GIL on large buffers."""

from __future__ import annotations

from collections.abc import Callable

import crc32c
import xxhash

from .errors import OptionError

Digest = Callable[[memoryview], str]

ALGORITHMS: dict[str, tuple[int, Digest]] = {
    "xxh3": (16, lambda b: format(xxhash.xxh3_64_intdigest(b), "016x")),
    "crc32c": (8, lambda b: format(crc32c.crc32c(b), "08x")),
}


def normalize(checksum: str | None) -> str:
    """Map the user's checksum choice to the name stored in the index ('none' for None)."""
    if checksum is None or checksum == "none":
        return "none"
    if checksum not in ALGORITHMS:
        raise OptionError(f"checksum must be one of {sorted(ALGORITHMS)} or None, not {checksum!r}")
    return checksum


def digest_fn(algorithm: str) -> Digest | None:
    """The hex-digest function for an algorithm name, or None for 'none'."""
    return None if algorithm == "none" else ALGORITHMS[algorithm][1]


def width(algorithm: str) -> int:
    """Number of hex characters in one digest of `algorithm` (0 for 'none')."""
    return 0 if algorithm == "none" else ALGORITHMS[algorithm][0]


def index_digest(data: bytes) -> int:
    """The xxh3_64 of the index record, stored in the header to detect index corruption."""
    return xxhash.xxh3_64_intdigest(data)


def chunk_count(nbytes: int, chunk_bytes: int) -> int:
    """How many checksum chunks cover a storage of `nbytes` (0 for an empty storage)."""
    return -(-nbytes // chunk_bytes)
