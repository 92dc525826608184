"""Aligned, huge-page-backed anonymous memory and raw views of it.

Why huge pages: virtio caps a request at 254 segments, so a buffer in 4 KiB pages caps a request
near 1 MiB while 2 MiB pages let it grow to several MiB. Why a pool: first touch of fresh memory is
slow in this VM (~1 GB/s), so staging buffers are allocated once and reused across saves.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

PAGE = mmap.PAGESIZE
MADV_POPULATE_READ = 22  # Linux >= 5.14: fault pages in (file pages: read them), without a user fault per page
MADV_POPULATE_WRITE = 23  # Linux >= 5.14: fault pages in writable, in the kernel, without a user fault per page
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


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
        with contextlib.suppress(OSError):  # THP disabled: still correct, just smaller requests
            mm.madvise(mmap.MADV_HUGEPAGE)
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


def populate(address: int, nbytes: int) -> None:
    """Fault in (and zero) fresh memory ahead of use; ctypes releases the GIL for the call.

    First touch of fresh memory is the slow part of reading into new tensors in a VM; done here, in
    its own threads, it overlaps the disk reads instead of stalling them. Kernels without
    MADV_POPULATE_WRITE get a memset, which faults the pages the ordinary way.
    """
    if _libc.madvise(address, nbytes, MADV_POPULATE_WRITE) != 0:
        ctypes.memset(address, 0, nbytes)


def populate_read(address: int, nbytes: int) -> None:
    """Fault a file mapping's pages in, reading them from the file (readahead) in the calling thread.

    Kernels without MADV_POPULATE_READ get one byte read per page instead (slower, same effect).
    """
    start = round_down(address, PAGE)
    length = round_up(address + nbytes, PAGE) - start
    if _libc.madvise(start, length, MADV_POPULATE_READ) != 0:
        pages = view(start, length)
        for offset in range(0, length, PAGE):
            pages[offset]


def trim_heap() -> bool:
    """Hand the C heap's free pages back to the kernel (glibc malloc_trim); False where libc has none."""
    trim = getattr(_libc, "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


def run_parallel(jobs: list[Callable[[], None]], threads: int, name: str) -> None:
    """Run jobs on `threads` workers in order; on the first failure cancel what has not started, re-raise it."""
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name) as pool:
        futures = [pool.submit(job) for job in jobs]
        _, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for f in pending:
            f.cancel()
        for f in futures:
            if f.done() and not f.cancelled() and f.exception() is not None:
                raise f.exception()  # type: ignore[misc]


class Prefaulter:
    """Threads that populate destination ranges in order, running ahead of the reads into them."""

    STEP = 32 << 20

    def __init__(self, ranges: Iterable[tuple[int, int]], threads: int) -> None:
        self._steps = iter([(a + off, min(self.STEP, n - off)) for a, n in ranges for off in range(0, n, self.STEP)])
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, name="gdsbench-prefault", daemon=True) for _ in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    def _work(self) -> None:
        """Populate the next step until none is left (a read that got there first faulted it already)."""
        while True:
            with self._lock:
                step = next(self._steps, None)
            if step is None:
                return
            populate(*step)

    def join(self) -> None:
        """Wait for every step to be populated."""
        for thread in self._threads:
            thread.join()


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


def queue_of(buffers: list[Staging]) -> queue.Queue[Staging]:
    """A queue holding `buffers`, so worker threads borrow them one at a time."""
    handed: queue.Queue[Staging] = queue.Queue()
    for buf in buffers:
        handed.put(buf)
    return handed
