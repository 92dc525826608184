"""Where a checkpoint save's time goes: save() against bare O_DIRECT writes of the same bytes.

Interleaved repetitions, each way into a new file (the previous one deleted, untimed), medians and
ratios printed:
  save        gdsbench.checkpoint.save() of a Llama-3-8B-like state dict (copy, hash, O_DIRECT, fsync)
  raw write   O_DIRECT pwrite of as many bytes from 4 reused huge-page buffers, 4 threads, no copy:
              what Python can write here at all
  raw copy    the same, each 16 MiB chunk first copied from the tensors: save() minus format and hash
  recycled    save(recycle=True), overwriting the spare generation written seconds before

    python benchmarks/save_pipeline.py --dir /var/tmp/gdsbench --size 4G --reps 3
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from gdsbench import workloads
from gdsbench.checkpoint import durable, save
from gdsbench.checkpoint.memory import Staging, copy, queue_of, view
from gdsbench.units import parse_size

CHUNK = 16 << 20
THREADS = 4


def raw_write(path: str, nbytes: int, buffers: queue.Queue[Staging], sources: list[tuple[int, int]] | None) -> None:
    """Write `nbytes` into a new file with O_DIRECT from staging buffers (copied from `sources` first)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT | os.O_CLOEXEC, 0o644)

    def chunk(k: int) -> None:
        buf = buffers.get()
        try:
            if sources:
                address, size = sources[k % len(sources)]
                copy(buf.address, address, size)
            os.pwrite(fd, view(buf.address, CHUNK), k * CHUNK)
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
    storages = [t.untyped_storage() for t in state.values()]
    total = sum(s.nbytes() for s in storages)
    nbytes = max(CHUNK, total // CHUNK * CHUNK)
    sources = [
        (s.data_ptr() + offset, min(CHUNK, s.nbytes() - offset))
        for s in storages
        for offset in range(0, s.nbytes(), CHUNK)
    ]
    buffers = queue_of([Staging(CHUNK) for _ in range(THREADS)])
    new, raw, recycled = (os.path.join(args.dir, f"save-pipeline.{n}") for n in ("new.pt", "raw.bin", "recycled.pt"))
    ways = {
        "save": (lambda: save(state, new), new, total),
        "raw write": (lambda: raw_write(raw, nbytes, buffers, None), raw, nbytes),
        "raw copy": (lambda: raw_write(raw, nbytes, buffers, sources), raw, nbytes),
        "recycled": (lambda: save(state, recycled, recycle=True), None, total),
    }
    speeds: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(2):
            save(state, recycled, recycle=True)  # two generations: from now on a spare exists
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
        for path in (new, raw, recycled, durable.spare_path(recycled)):
            if os.path.exists(path):
                os.unlink(path)
    medians = {name: statistics.median(v) for name, v in speeds.items()}
    print("\nmedian GB/s and ratio to the raw write ceiling:")
    for name, bw in medians.items():
        print(f"  {name:10} {bw / 1e9:5.2f}  x{bw / medians['raw write']:.2f}")


if __name__ == "__main__":
    main()
