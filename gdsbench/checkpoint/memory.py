"""Aligned, huge-page-backed anonymous memory and raw views of it.

Why huge pages: virtio caps a request at 254 segments, so a buffer in 4 KiB pages caps a request
near 1 MiB while 2 MiB pages let it grow to several MiB. Why a pool: first touch of fresh memory is
slow in this VM (~1 GB/s), so staging buffers are allocated once and reused across saves.
"""

from __future__ import annotations

import ctypes
import mmap
import threading

PAGE = mmap.PAGESIZE


def round_up(n: int, align: int) -> int:
    """Smallest multiple of `align` that is >= n."""
    return -(-n // align) * align


def round_down(n: int, align: int) -> int:
    """Largest multiple of `align` that is <= n."""
    return n // align * align


def huge_buffer(nbytes: int, huge: bool = True) -> mmap.mmap:
    """A page-aligned anonymous mapping of at least `nbytes`, advised to use transparent huge pages."""
    mm = mmap.mmap(-1, max(round_up(nbytes, PAGE), PAGE), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mm.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # THP disabled: still correct, just smaller requests
            pass
    return mm


def address_of(buf: mmap.mmap) -> int:
    """The virtual address of a mapping's first byte."""
    holder = ctypes.c_char.from_buffer(buf)
    try:
        return ctypes.addressof(holder)
    finally:
        del holder


def view(address: int, nbytes: int) -> memoryview:
    """A writable byte view of raw memory (no copy); the caller keeps the owner alive."""
    return memoryview((ctypes.c_ubyte * nbytes).from_address(address)).cast("B")


def copy(dst: int, src: int, nbytes: int) -> None:
    """memmove between raw addresses; ctypes releases the GIL for the call."""
    ctypes.memmove(dst, src, nbytes)


class Staging:
    """One reusable aligned staging buffer (address cached, mapping kept alive)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.mm = huge_buffer(nbytes)
        self.address = address_of(self.mm)
        view(self.address, nbytes)[:] = b"\0" * nbytes  # touch once, here, not on the hot path


class StagingPool:
    """Module-level pool of equally sized staging buffers, reused across save() calls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[Staging] = []

    def take(self, count: int, nbytes: int) -> list[Staging]:
        """Borrow `count` buffers of `nbytes`; buffers of another size are dropped."""
        with self._lock:
            keep = [b for b in self._free if b.nbytes == nbytes]
            self._free = []
            taken = keep[:count]
        return taken + [Staging(nbytes) for _ in range(count - len(taken))]

    def give_back(self, buffers: list[Staging], keep: int) -> None:
        """Return buffers, keeping at most `keep` for the next call."""
        with self._lock:
            self._free = (self._free + buffers)[:keep]

    def clear(self) -> None:
        """Release every pooled buffer (frees their memory)."""
        with self._lock:
            self._free = []


POOL = StagingPool()
