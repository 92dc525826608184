"""Why IOOptions.fresh_pages="auto" is not a timed probe: first touch of new memory with huge and small pages,
three tries per size, interleaved. The first try of each size meets memory the host may have taken back (a
virtio balloon's free page reporting); later tries reuse what the earlier ones freed, still backed.

    python benchmarks/fresh_pages.py            # GB/s per try: huge [first, second, third], small [...]
    python benchmarks/fresh_pages.py --sizes 8M 1G
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import time

from gdsbench.units import parse_size

MADV_POPULATE_WRITE = 23  # Linux >= 5.14: fault pages in writable, in the kernel (as ckptio's prefault threads do)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def first_touch_seconds(nbytes: int, huge: bool) -> float:
    """Seconds to fault in a new anonymous mapping of `nbytes` advised to huge or to small pages (memset where the
    kernel lacks MADV_POPULATE_WRITE)."""
    mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    mm.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE)
    holder = ctypes.c_char.from_buffer(mm)
    try:
        started = time.perf_counter()
        if _libc.madvise(ctypes.addressof(holder), nbytes, MADV_POPULATE_WRITE) != 0:
            ctypes.memset(ctypes.addressof(holder), 0, nbytes)
        return time.perf_counter() - started
    finally:
        del holder
        mm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["8M", "32M", "128M", "512M"])
    for nbytes in (parse_size(size) for size in parser.parse_args().sizes):
        tries: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(3):
            for huge in (True, False):
                tries[huge].append(nbytes / first_touch_seconds(nbytes, huge) / 1e9)
        rates = {name: [round(x, 1) for x in tries[huge]] for name, huge in (("huge", True), ("small", False))}
        print(f"{nbytes >> 20} MiB: GB/s huge {rates['huge']} small {rates['small']}")


if __name__ == "__main__":
    main()
