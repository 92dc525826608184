"""Fresh memory against the disk: why a load into new memory swings in a VM.

Each line: page cache dropped, then `--idle` seconds, then one of
  anon 1 thread / 2 threads  fault in (and zero) a fresh huge-page mapping of the file's size
                             with MADV_POPULATE_WRITE, as load()'s prefaulter does
  page cache                 read the file through the page cache into one reused 16 MiB buffer
  O_DIRECT                   read the file with O_DIRECT into one reused buffer: the disk alone

    python benchmarks/first_touch.py FILE --idle 0 3 10        # FILE: any multi-GiB file, e.g. a checkpoint
"""

from __future__ import annotations

import argparse
import os
import time

from gdsbench.checkpoint.memory import Prefaulter, Staging, address_of, huge_buffer, view
from gdsbench.runners import cache as cache_control

CHUNK = 16 << 20


def anon(size: int, threads: int) -> None:
    mapping = huge_buffer(size)
    Prefaulter([(address_of(mapping), size)], threads).join()
    mapping.close()


def page_cache(path: str) -> None:
    buffer = memoryview(bytearray(CHUNK))
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def direct(path: str) -> None:
    staging = Staging(CHUNK)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    try:
        offset = 0
        while got := os.preadv(fd, [view(staging.address, CHUNK)], offset):
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
        "page cache": lambda: page_cache(args.file),
        "O_DIRECT": lambda: direct(args.file),
    }
    for _ in range(args.reps):
        for idle in args.idle:
            for name, fn in ways.items():
                if not (cache_control.is_root() and cache_control.drop_caches()):
                    cache_control.evict(args.file)
                time.sleep(idle)
                started = time.perf_counter()
                fn()
                print(
                    f"idle {idle:4.1f} s  {name:15} {size / (time.perf_counter() - started) / 1e9:.2f} GB/s", flush=True
                )


if __name__ == "__main__":
    main()
