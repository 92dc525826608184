"""Aligned, huge-page-backed anonymous memory and raw views of it.

Why huge pages: some block devices cap a request's scatter list (virtio: 254 segments), so a buffer
in 4 KiB pages caps a request near 1 MiB while 2 MiB pages let it grow to several MiB. Why owned,
reusable staging buffers: first touch of fresh memory can be slower than the disk (in VMs that
hand free memory back to their host), so a Checkpointer keeps its buffers across saves and loads.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

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
    """A page-aligned anonymous mapping of at least `nbytes`, advised to use transparent huge pages (or, with
    `huge=False`, not to: small pages even where THP is `always`)."""
    mm = mmap.mmap(-1, max(round_up(nbytes, PAGE), PAGE), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advice = getattr(mmap, "MADV_HUGEPAGE" if huge else "MADV_NOHUGEPAGE", None)
    if advice is not None:
        with contextlib.suppress(OSError):  # THP disabled: still correct, just smaller requests
            mm.madvise(advice)
    return mm


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"
BALLOON = "/sys/bus/virtio/drivers/virtio_balloon"
BALLOON_REPORTS_FREE_PAGES = 5  # VIRTIO_BALLOON_F_REPORTING: the bit in a device's `features` string


@functools.cache
def faster_fresh_pages() -> str:
    """The pages new memory faults in faster with here: "small" where THP is `never`, or where a virtio balloon
    reports free pages to the host (it hands free 2-4 MiB blocks back, so a huge page's first touch waits for the
    host to back all of it: 0.5-0.8 GB/s in this project's VM against 2.1-3.2 for small pages, docs/benchmarks.md);
    "huge" otherwise (bare metal: one fault per 2 MiB). A timed probe cannot tell: memory freed moments ago is
    still backed, and any probe's own memory is."""
    try:
        with open(THP_ENABLED) as f:
            if "[never]" in f.read():
                return "small"
    except OSError:
        return "small"
    return "small" if balloon_reports_free_pages() else "huge"


def balloon_reports_free_pages() -> bool:
    """Whether a virtio balloon device of this guest has free page reporting on."""
    try:
        devices = [os.path.join(BALLOON, name) for name in os.listdir(BALLOON) if name.startswith("virtio")]
    except OSError:
        return False
    for device in devices:
        try:
            with open(os.path.join(device, "features")) as f:
                bits = f.read().strip()
        except OSError:
            continue
        if len(bits) > BALLOON_REPORTS_FREE_PAGES and bits[BALLOON_REPORTS_FREE_PAGES] == "1":
            return True
    return False


def address_of(buf: mmap.mmap | memoryview) -> int:
    """The virtual address of a writable buffer's first byte (a mapping, or a view of raw memory)."""
    holder = ctypes.c_char.from_buffer(buf)
    try:
        return ctypes.addressof(holder)
    finally:
        del holder


def view(address: int, nbytes: int) -> memoryview:
    """A writable byte view of raw memory (no copy); the caller keeps the owner alive."""
    return memoryview((ctypes.c_ubyte * nbytes).from_address(address)).cast("B")


def host_bytes(flat: Any) -> bytes:
    """The bytes of a contiguous uint8 tensor on any device, as a host copy (no numpy: torch does not require it)."""
    host = flat.cpu()
    return ctypes.string_at(host.data_ptr(), host.numel()) if host.numel() else b""


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


def populate_within(address: int, nbytes: int) -> None:
    """Fault in the whole pages inside memory the caller owns (a destination tensor), writable, in the kernel.

    Unlike `populate`, nothing is written where the kernel cannot (no MADV_POPULATE_WRITE, a read-only or
    file mapping it refuses): the pages then fault the ordinary way when the data lands; pages shared with a
    neighbour at either end are left alone.
    """
    start, length = inner_pages(address, nbytes)
    if length:
        _libc.madvise(start, length, MADV_POPULATE_WRITE)


def inner_pages(address: int, nbytes: int) -> tuple[int, int]:
    """The whole pages inside [address, address + nbytes): their start and length (0 when none)."""
    start = round_up(address, PAGE)
    return start, max(0, round_down(address + nbytes, PAGE) - start)


class Prefaulter:
    """Threads that populate destination ranges in order, running ahead of the reads into them: fresh
    mappings of ours (`ranges`: `populate`), then memory the caller owns (`within`: `populate_within`)."""

    STEP = 32 << 20

    def __init__(self, ranges: Iterable[tuple[int, int]], threads: int, within: Iterable[tuple[int, int]] = ()) -> None:
        work = [(populate, a, n) for a, n in ranges] + [(populate_within, *inner_pages(a, n)) for a, n in within]
        self._steps = iter(
            [(f, a + off, min(self.STEP, n - off)) for f, a, n in work for off in range(0, n, self.STEP)]
        )
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._work, name="ckptio-prefault", daemon=True) for _ in range(threads)
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
            fault, address, nbytes = step
            fault(address, nbytes)

    def join(self) -> None:
        """Wait for every step to be populated."""
        for thread in self._threads:
            thread.join()


class Staging:
    """One reusable aligned staging buffer (address cached, mapping kept alive), faulted in once."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.mm = huge_buffer(nbytes)
        self.address = address_of(self.mm)
        populate(self.address, nbytes)  # touch once, here, not on the hot path


class StagingBuffers:
    """Equally sized staging buffers owned by one save, load or Checkpointer, lent to I/O threads one at a
    time. Allocated lazily (first use touches them in the worker that needs one, overlapping other
    workers' I/O) and freed by `close()`, so no memory outlives its owner."""

    def __init__(self, count: int, nbytes: int) -> None:
        self.count = count
        self.nbytes = nbytes
        self._made = 0
        self.peak_bytes = 0  # the most staging memory these buffers ever held at once
        self._lock = threading.Lock()
        self._free: queue.LifoQueue[Staging] = queue.LifoQueue()

    def take(self) -> Staging:
        """Borrow a buffer: a free one, else a new one while fewer than `count` exist, else wait."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            make = self._made < self.count
            self._made += make
            self.peak_bytes = max(self.peak_bytes, self._made * self.nbytes)
        return Staging(self.nbytes) if make else self._free.get()

    def give(self, buf: Staging) -> None:
        """Return a borrowed buffer."""
        self._free.put(buf)

    @contextlib.contextmanager
    def lend(self) -> Iterator[Staging]:
        """Borrow a buffer for a `with` block."""
        buf = self.take()
        try:
            yield buf
        finally:
            self.give(buf)

    def close(self) -> None:
        """Drop every buffer (their mappings are unmapped once no view holds them)."""
        while not self._free.empty():
            with contextlib.suppress(BufferError):  # a tensor still views it: unmapped when that goes
                self._free.get_nowait().mm.close()
        with self._lock:
            self._made = 0

    def __enter__(self) -> StagingBuffers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def staging_slots(budget: int, slot: int) -> int:
    """How many staging buffers of `slot` bytes a `budget` holds: the one rule of every save and load. At least
    one: a file's chunk (fixed at save time) larger than the budget still needs one buffer to pass through."""
    return max(1, budget // slot)


class StagingCache:
    """The staging buffers of one owner (a call, or a Checkpointer across its calls): one set at a time,
    kept while callers ask for the same buffer size, replaced when they ask for another."""

    def __init__(self) -> None:
        self._buffers: StagingBuffers | None = None

    def within(self, budget: int, slot: int) -> StagingBuffers:
        """Buffers of `slot` bytes, as many as fit in `budget` (IOOptions.buffer_bytes), at least one."""
        return self.get(staging_slots(budget, slot), slot)

    def get(self, count: int, nbytes: int) -> StagingBuffers:
        """`count` buffers of `nbytes` (the ones kept, when they match)."""
        if self._buffers is None or (self._buffers.count, self._buffers.nbytes) != (count, nbytes):
            self.close()
            self._buffers = StagingBuffers(count, nbytes)
        return self._buffers

    def close(self) -> None:
        """Free the kept buffers."""
        if self._buffers is not None:
            self._buffers.close()
            self._buffers = None

    def __enter__(self) -> StagingCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
