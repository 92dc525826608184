"""Page-cache control (runners.cache): evict drops one file's pages, drop_caches (root) drops them all.

Residency is read with mincore(2) on a read-only mapping of the file, so the tests see the page cache
itself, not a timing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

import pytest

from gdsbench.runners import cache

LIBC = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
LIBC.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
LIBC.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: Path) -> int:
    """How many of a file's pages are in the page cache now (mincore over a mapping that touches none)."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        address = LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    finally:
        os.close(fd)
    if address in (None, MAP_FAILED):
        raise OSError(ctypes.get_errno(), "mmap failed")
    try:
        vector = (ctypes.c_ubyte * -(-size // mmap.PAGESIZE))()
        if LIBC.mincore(address, size, vector) != 0:
            raise OSError(ctypes.get_errno(), "mincore failed")
        return sum(byte & 1 for byte in vector)
    finally:
        LIBC.munmap(address, size)


@pytest.fixture
def cached_file(tmp_path: Path) -> Path:
    """A 4 MiB file written through the page cache and read back, so its pages are resident."""
    path = tmp_path / "data.bin"
    data = os.urandom(4 << 20)
    path.write_bytes(data)
    assert path.read_bytes() == data
    if resident_pages(path) == 0:
        pytest.skip(f"{tmp_path}'s filesystem keeps no page cache")
    return path


def test_evict_drops_one_files_pages_and_keeps_its_data(cached_file: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.bin"
    other.write_bytes(b"x" * (1 << 20))
    other.read_bytes()
    data_before = cached_file.read_bytes()
    cache.evict(cached_file)
    assert resident_pages(cached_file) == 0
    assert resident_pages(other) > 0, "only the evicted file's pages went"
    assert cached_file.read_bytes() == data_before


@pytest.mark.needs_root
def test_drop_caches_drops_every_clean_page(cached_file: Path) -> None:
    assert cache.is_root() and cache.drop_caches() is True
    assert resident_pages(cached_file) == 0


def test_drop_caches_refused_without_root(cached_file: Path) -> None:
    if cache.is_root():
        pytest.skip("root may drop caches")
    assert cache.drop_caches() is False and resident_pages(cached_file) > 0
