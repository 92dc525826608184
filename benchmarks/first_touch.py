"""Fresh memory against the disk: why a load into new memory swings in a VM.

Each line: page cache dropped, then `--idle` seconds, then one of
  anon 1 thread / 2 threads  fault in (and zero) a fresh huge-page mapping of the file's size,
                             written by torch with 1 or 2 threads
  anon 4K 2 threads          the same without MADV_HUGEPAGE (4 KiB pages, unless THP is `always`)
  page cache                 read the file through the page cache into one reused 16 MiB buffer
  O_DIRECT                   read the file with O_DIRECT into one reused buffer: the disk alone

    python benchmarks/first_touch.py FILE --idle 0 3 10        # FILE: any multi-GiB file, e.g. a checkpoint
"""

from __future__ import annotations

import argparse
import mmap
import os
import time

from gdsbench.runners import cache

CHUNK = 16 << 20


def anon(size: int, threads: int, huge: bool = True) -> None:
    """Fault in a fresh anonymous mapping of `size` bytes (advised to huge pages unless `huge` is False)
    with `threads` threads."""
    import torch

    mapping = mmap.mmap(-1, size)
    if huge:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.frombuffer(mapping, dtype=torch.uint8).fill_(0)
    finally:
        torch.set_num_threads(before)
    mapping.close()


def page_cache(path: str) -> None:
    buffer = memoryview(bytearray(CHUNK))
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def direct(path: str) -> None:
    staging = mmap.mmap(-1, CHUNK)  # page-aligned, as O_DIRECT wants
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    try:
        offset = 0
        while got := os.preadv(fd, [memoryview(staging)], offset):
            offset += got
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file")
    parser.add_argument("--idle", type=float, nargs="+", default=[0.0, 3.0, 10.0])
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    size = os.path.getsize(args.file)
    ways = {
        "anon 1 thread": lambda: anon(size, 1),
        "anon 2 threads": lambda: anon(size, 2),
        "anon 4K 2 threads": lambda: anon(size, 2, huge=False),
        "page cache": lambda: page_cache(args.file),
        "O_DIRECT": lambda: direct(args.file),
    }
    for _ in range(args.reps):
        for idle in args.idle:
            for name, fn in ways.items():
                if not (cache.is_root() and cache.drop_caches()):
                    cache.evict(args.file)
                time.sleep(idle)
                started = time.perf_counter()
                fn()
                print(
                    f"idle {idle:4.1f} s  {name:17} {size / (time.perf_counter() - started) / 1e9:.2f} GB/s", flush=True
                )


if __name__ == "__main__":
    main()
