"""Where a checkpoint save's time goes: save() against bare O_DIRECT writes of the same bytes.

Interleaved repetitions, each way into a new file (the previous one deleted, untimed), medians and
ratios printed:
  save        ckptio.save() of a Llama-3-8B-like state dict (copy, hash, O_DIRECT, fsync)
  raw write   O_DIRECT pwrite of as many bytes from 4 reused huge-page buffers, 4 threads, no copy:
              what Python can write here at all
  raw copy    the same, each 16 MiB chunk first copied from the tensors: save() minus format and hash
  recycled    Checkpointer(recycle=True).save, overwriting the spare generation written seconds before

    python benchmarks/save_pipeline.py --dir /var/tmp/gdsbench --size 4G --reps 3
"""

from __future__ import annotations

import argparse
import mmap
import os
import queue
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ckptio import Checkpointer, save

from gdsbench import workloads
from gdsbench.units import parse_size

CHUNK = 16 << 20
THREADS = 4


def staging_buffer() -> mmap.mmap:
    """A page-aligned, huge-page-advised buffer of one chunk, touched once."""
    buf = mmap.mmap(-1, CHUNK)
    buf.madvise(mmap.MADV_HUGEPAGE)
    buf.write(bytes(CHUNK))
    return buf


def raw_write(path: str, nbytes: int, buffers: queue.Queue[mmap.mmap], sources: list[Any] | None) -> None:
    """Write `nbytes` into a new file with O_DIRECT from staging buffers (copied from `sources` first)."""
    import torch

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT | os.O_CLOEXEC, 0o644)

    def chunk(k: int) -> None:
        buf = buffers.get()
        try:
            if sources:
                source = sources[k % len(sources)]
                torch.frombuffer(buf, dtype=torch.uint8, count=source.numel()).copy_(source)  # releases the GIL
            os.pwrite(fd, memoryview(buf), k * CHUNK)
        finally:
            buffers.put(buf)

    try:
        os.posix_fallocate(fd, 0, nbytes)
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(chunk, range(nbytes // CHUNK)))
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/var/tmp/gdsbench", help="a directory on the disk under test")
    parser.add_argument("--size", default="4G", help="state-dict size (llama3-8b preset, mixed dtypes)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    state = workloads.get(workloads.WorkloadSpec("llama3-8b", parse_size(args.size), "mixed")).tensors
    import torch

    flat = [t.reshape(-1).view(torch.uint8) for t in state.values()]
    total = sum(f.numel() for f in flat)
    nbytes = max(CHUNK, total // CHUNK * CHUNK)
    sources = [f[offset : offset + CHUNK] for f in flat for offset in range(0, f.numel(), CHUNK)]
    buffers: queue.Queue[mmap.mmap] = queue.Queue()
    for _ in range(THREADS):
        buffers.put(staging_buffer())
    new, raw, recycled = (os.path.join(args.dir, f"save-pipeline.{n}") for n in ("new.pt", "raw.bin", "recycled.pt"))
    recycler = Checkpointer(recycled, recycle=True)
    ways = {
        "save": (lambda: save(state, new), new, total),
        "raw write": (lambda: raw_write(raw, nbytes, buffers, None), raw, nbytes),
        "raw copy": (lambda: raw_write(raw, nbytes, buffers, sources), raw, nbytes),
        "recycled": (lambda: recycler.save(state), None, total),
    }
    speeds: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(2):
            recycler.save(state)  # two generations: from now on a spare exists
        for rep in range(args.reps):
            for name, (fn, fresh, size) in ways.items():
                if fresh and os.path.exists(fresh):
                    os.unlink(fresh)
                os.sync()
                started = time.perf_counter()
                fn()
                speeds[name].append(size / (time.perf_counter() - started))
                print(f"rep {rep + 1} {name:10} {speeds[name][-1] / 1e9:.2f} GB/s", flush=True)
    finally:
        recycler.close()  # removes the spare generation it kept
        for path in (new, raw, recycled):
            if os.path.exists(path):
                os.unlink(path)
    medians = {name: statistics.median(v) for name, v in speeds.items()}
    print("\nmedian GB/s and ratio to the raw write ceiling:")
    for name, bw in medians.items():
        print(f"  {name:10} {bw / 1e9:5.2f}  x{bw / medians['raw write']:.2f}")


if __name__ == "__main__":
    main()
