"""Where a checkpoint save's time goes: save() into a new file and recycled, against bare O_DIRECT writes.

Interleaved repetitions of four ways to put the same state dict on disk, medians and ratios printed:
  new file   save() after the previous checkpoint was deleted (untimed), as configs/checkpoint.yaml does
  recycled   save(recycle=True) in its steady state (the spare of an earlier generation overwritten)
  raw write  O_DIRECT pwrite of the same byte count from reused huge-page buffers into an allocated,
             written file, 4 threads, no copy: what Python can write here at all
  raw copy   the same, each chunk first copied from the tensors: the save pipeline minus format and hash

    python benchmarks/save_pipeline.py --dir /var/tmp/gdsbench --size 4G --reps 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gdsbench import workloads
from gdsbench.checkpoint import durable, save
from gdsbench.checkpoint.memory import Staging, copy, view
from gdsbench.units import parse_size

CHUNK = 16 << 20
THREADS = 4


def raw_writer(path: str, nbytes: int, sources: list[tuple[int, int]]):
    """A function writing `nbytes` with O_DIRECT from staging buffers (optionally copied from `sources`)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT | os.O_CLOEXEC, 0o644)
    os.posix_fallocate(fd, 0, nbytes)
    buffers = [Staging(CHUNK) for _ in range(THREADS)]
    local = threading.local()
    free = list(buffers)
    lock = threading.Lock()

    def buffer() -> Staging:
        if not hasattr(local, "buf"):
            with lock:
                local.buf = free.pop()
        return local.buf

    def chunk(k: int, with_copy: bool) -> None:
        buf = buffer()
        if with_copy:
            address, size = sources[k % len(sources)]
            copy(buf.address, address, size)
        os.pwrite(fd, view(buf.address, CHUNK), k * CHUNK)

    def write(with_copy: bool) -> None:
        nonlocal local, free
        local, free = threading.local(), list(buffers)
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(lambda k: chunk(k, with_copy), range(nbytes // CHUNK)))
        os.fsync(fd)

    return write, lambda: os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/var/tmp/gdsbench", help="a directory on the disk under test")
    parser.add_argument("--size", default="4G", help="state-dict size (llama3-8b preset, mixed dtypes)")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    state = workloads.get(workloads.WorkloadSpec("llama3-8b", parse_size(args.size), "mixed")).tensors
    nbytes = sum(t.untyped_storage().nbytes() for t in state.values()) // CHUNK * CHUNK
    sources = [(t.untyped_storage().data_ptr() + offset, min(CHUNK, t.untyped_storage().nbytes() - offset))
               for t in state.values() for offset in range(0, t.untyped_storage().nbytes(), CHUNK)]
    new, recycled, raw = (os.path.join(args.dir, f"save-pipeline.{n}") for n in ("new.pt", "recycled.pt", "raw.bin"))
    write_raw, close_raw = raw_writer(raw, nbytes, sources)
    write_raw(False)  # allocate and write every block once: later passes overwrite
    for _ in range(2):
        save(state, recycled, recycle=True)  # two generations: from now on a spare exists

    ways = {"new file": (lambda: save(state, new), lambda: os.path.exists(new) and os.unlink(new)),
            "recycled": (lambda: save(state, recycled, recycle=True), None),
            "raw write": (lambda: write_raw(False), None), "raw copy": (lambda: write_raw(True), None)}
    speeds: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for rep in range(args.reps):
            for name, (fn, before) in ways.items():
                if before:
                    before()
                os.sync()
                started = time.perf_counter()
                fn()
                speeds[name].append((nbytes if name.startswith("raw") else _bytes(state)) / (time.perf_counter() - started))
                print(f"rep {rep + 1} {name:10} {speeds[name][-1] / 1e9:.2f} GB/s", flush=True)
    finally:
        close_raw()
        for path in (new, recycled, raw, durable.spare_path(recycled)):
            if os.path.exists(path):
                os.unlink(path)
    medians = {name: statistics.median(v) for name, v in speeds.items()}
    print("\nmedian GB/s and ratio to the raw write ceiling:")
    for name, bw in medians.items():
        print(f"  {name:10} {bw / 1e9:5.2f}  x{bw / medians['raw write']:.2f}")


def _bytes(state: dict) -> int:
    return sum(t.untyped_storage().nbytes() for t in state.values())


if __name__ == "__main__":
    main()
