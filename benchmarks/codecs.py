"""Checkpoint codecs on checkpoint-like data: bytes saved, compress and decompress speed, bit-exactness.

Each data kind is `--size` bytes, cut into `--chunk` chunks as a storage layer would (a tensor smaller than a
chunk is one chunk), and every chunk is encoded and decoded on its own by `--threads` Python threads sharing
one codec (each call single-threaded: the C libraries release the GIL), or with `--mode codec` one chunk at a
time by the library's own threads. Throughput = raw bytes / wall time; median of `--reps`, after a warm-up.
`comp GB/cpu-s` divides by the CPU time of all the process's threads instead: on a machine shared with other
work, it times `--threads` is what compression would reach on that many idle cores (if it scales).

  bf16        weights: N(0, 0.02) drawn in fp32, rounded to bf16
  fp32        fp32 master weights N(0, 0.02)
  exp_avg     Adam's first moment, N(0, 1e-3) in fp32
  exp_avg_sq  its square (the second moment)
  mixed       a Llama-3-8B-like state dict: bf16 matrices, fp32 embeddings and norms (gdsbench.workloads)
  train       computed, not run: bf16 weights + fp32 master + both moments (bytes 1:2:2:2), a mixed-precision
              training checkpoint

`--save DIR` compares each codec with a save of the same tensors instead: the codec alone (every chunk encoded
by `--threads` threads, as above) and `dcp.save` through ckptio's Writer with that compression (one process,
O_DIRECT, durable, `--save-threads` I/O threads, each into a new checkpoint in a private folder under DIR, the
one before removed, untimed), interleaved, medians of `--reps`; `save/codec` is the save's rate over the
codec's, `per CPU` the codec's CPU seconds over the save's (what the save would reach on idle cores).

    python benchmarks/codecs.py --size 256M --threads 2 --disk-bw 706M
    python benchmarks/codecs.py --size 512M --kinds mixed --codecs blosc --save /var/tmp/gdsbench --reps 5
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import torch
from ckptio import IOOptions, Writer, codec

from gdsbench import workloads
from gdsbench.units import parse_size

TRAIN_MIX = {"bf16": 1, "fp32": 2, "exp_avg": 2, "exp_avg_sq": 2}
ORDER = ("none", "zstd", "blosc", "blosc-fast", "zipnn")  # table order; others registered come after


@dataclass
class Row:
    """One codec on one data kind."""

    codec: str
    data: str
    nbytes: int
    encoded: int
    compress_s: float
    decompress_s: float
    compress_cpu_s: float  # CPU seconds of the whole process (all threads) while compressing
    exact: bool

    @property
    def saved(self) -> float:
        """Fraction of the raw bytes the codec saves."""
        return 1 - self.encoded / self.nbytes

    def speed(self, seconds: float) -> float:
        """Raw bytes per second over `seconds`, in GB/s."""
        return self.nbytes / seconds / 1e9


def normal(nbytes: int, std: float, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """N(0, std) values drawn in fp32, then rounded to `dtype`, filling `nbytes`."""
    count = nbytes // torch.empty(0, dtype=dtype).element_size()
    values = torch.randn(count, generator=torch.Generator().manual_seed(seed)) * std
    return values if dtype == torch.float32 else values.to(dtype)


def kinds(size: int) -> dict[str, Callable[[], list[torch.Tensor]]]:
    """Builders of each data kind's tensors (built one kind at a time, to keep memory bounded)."""
    mixed = workloads.WorkloadSpec("llama3-8b", size, "mixed")
    return {
        "bf16": lambda: [normal(size, 0.02, torch.bfloat16, 1)],
        "fp32": lambda: [normal(size, 0.02, torch.float32, 2)],
        "exp_avg": lambda: [normal(size, 1e-3, torch.float32, 3)],
        "exp_avg_sq": lambda: [normal(size, 1e-3, torch.float32, 3).square_()],
        "mixed": lambda: list(workloads.generate(mixed).tensors.values()),
    }


def chunks(tensors: list[torch.Tensor], chunk: int) -> Iterator[tuple[memoryview, int]]:
    """(raw bytes, element size) of every chunk of every tensor, in order."""
    for t in tensors:
        data = t.reshape(-1).view(torch.uint8).numpy().data
        step = max(t.element_size(), chunk // t.element_size() * t.element_size())
        for at in range(0, data.nbytes, step):
            yield data[at : at + step], t.element_size()


def composition(kind: str, tensors: list[torch.Tensor]) -> str:
    """What a data kind holds: tensor count, bytes and each dtype's share of them."""
    by_dtype: dict[str, int] = {}
    for t in tensors:
        key = str(t.dtype).removeprefix("torch.")
        by_dtype[key] = by_dtype.get(key, 0) + t.numel() * t.element_size()
    total = sum(by_dtype.values())
    shares = ", ".join(f"{dtype} {100 * n / total:.0f}%" for dtype, n in sorted(by_dtype.items()))
    return f"{kind}: {len(tensors)} tensors, {total / 2**20:.1f} MiB ({shares})"


def interleaved(
    runs: dict[str, Callable[[], object]], reps: int, after: Callable[[], object] = lambda: None
) -> dict[str, tuple[float, float]]:
    """Median wall and CPU seconds of each run over `reps` rounds in which the runs take turns, after one untimed
    warm-up round; `after` runs untimed after every call (cleanup).

    CPU seconds (every thread of this process) are what a shared machine's neighbours cannot inflate much:
    bytes per CPU-second times the threads is what the codec would reach on that many idle cores.
    """
    samples: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in runs}
    for rep in range(reps + 1):
        for name, run in runs.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
            after()
            if rep:
                samples[name][0].append(wall)
                samples[name][1].append(cpu)
    return {name: (statistics.median(walls), statistics.median(cpus)) for name, (walls, cpus) in samples.items()}


def timed(run: Callable[[], object], reps: int) -> tuple[float, float]:
    """Median wall and CPU seconds of `run` over `reps`, after one untimed warm-up."""
    return interleaved({"run": run}, reps)["run"]


def save_line(
    name: str, tensors: list[torch.Tensor], parts: list[tuple[memoryview, int]], args: argparse.Namespace
) -> str:
    """The codec alone and a DCP save through ckptio's Writer with it, on the same chunks, interleaved: one line."""
    import torch.distributed.checkpoint as dcp

    c = codec.get(name, threads=1)
    state = {f"t{i}": t for i, t in enumerate(tensors)}
    options = IOOptions(threads=args.save_threads, chunk_bytes=args.chunk, backend="direct")
    folder = tempfile.mkdtemp(prefix="codecs-save-", dir=args.save)
    writer = Writer(os.path.join(folder, "ckpt"), options=options, compression=name)
    saved: list[str] = []

    def encode_all() -> None:
        """Every chunk encoded on --threads threads, as measure() does."""
        with ThreadPoolExecutor(args.threads) as pool:
            list(pool.map(lambda part: c.encode(*part), parts))

    def save() -> None:
        """A new checkpoint directory each time, as a training loop's saves."""
        saved.append(os.path.join(folder, f"ckpt{len(saved)}"))
        dcp.save(state, storage_writer=writer, checkpoint_id=saved[-1])

    def remove_older() -> None:
        """Delete all but the last checkpoint, untimed (the Writer holds the last one's file until the next save:
        deleting that would make the next save pay for freeing its blocks when it lets go of it)."""
        for path in saved[:-1]:
            shutil.rmtree(path, ignore_errors=True)

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
            times = interleaved({"codec": encode_all, "save": save}, args.reps, remove_older)
    finally:
        writer.close()
        shutil.rmtree(folder, ignore_errors=True)
    gib = sum(raw.nbytes for raw, _ in parts) / 2**30
    (codec_s, codec_cpu), (save_s, save_cpu) = times["codec"], times["save"]
    rates = [gib * 2**30 / 1e9 / s for s in (codec_s, save_s)]
    text = f"{name:<11} {rates[0]:9.2f} {codec_cpu / gib:11.2f} {rates[1]:9.2f} {save_cpu / gib:11.2f}"
    per_cpu = codec_cpu / save_cpu if save_cpu else float("nan")
    return text + f" {rates[1] / rates[0]:10.2f} {per_cpu:7.2f} {1 - writer.stats.stored_bytes / (gib * 2**30):7.1%}"


def measure(name: str, data: str, parts: list[tuple[memoryview, int]], args: argparse.Namespace) -> Row:
    """Encode and decode every chunk (a thread pool, or the library's threads), check the bytes came back."""
    pooled = args.mode == "pool"
    c = codec.get(name, threads=1 if pooled else args.threads)
    outs = [np.empty(raw.nbytes, dtype=np.uint8).data for raw, _ in parts]
    blobs: list[codec.Buffer] = []

    def encode_all() -> None:
        """Every chunk encoded; the blobs kept for decoding."""
        with ThreadPoolExecutor(args.threads if pooled else 1) as pool:
            blobs[:] = pool.map(lambda part: c.encode(*part), parts)

    def decode_all() -> None:
        """Every chunk decoded into its preallocated output."""
        with ThreadPoolExecutor(args.threads if pooled else 1) as pool:
            list(pool.map(lambda i: c.decode_into(blobs[i], outs[i], parts[i][1]), range(len(parts))))

    compress_s, compress_cpu_s = timed(encode_all, args.reps)
    decompress_s, _ = timed(decode_all, args.reps)
    exact = all(
        np.array_equal(np.frombuffer(out, np.uint8), np.frombuffer(raw, np.uint8)) for out, (raw, _) in zip(outs, parts)
    )
    encoded = sum(memoryview(blob).nbytes for blob in blobs)
    nbytes = sum(raw.nbytes for raw, _ in parts)
    return Row(name, data, nbytes, encoded, compress_s, decompress_s, compress_cpu_s, exact)


def train_row(rows: list[Row], name: str) -> Row | None:
    """The computed training-checkpoint row of a codec: its kinds weighted by TRAIN_MIX's byte shares."""
    mine = {row.data: row for row in rows if row.codec == name}
    if not set(TRAIN_MIX) <= set(mine):
        return None
    scale = {kind: (weight << 30) / mine[kind].nbytes for kind, weight in TRAIN_MIX.items()}  # GiB per unit
    total = sum(TRAIN_MIX.values()) << 30
    return Row(
        name,
        "train",
        total,
        round(sum(mine[k].encoded * s for k, s in scale.items())),
        sum(mine[k].compress_s * s for k, s in scale.items()),
        sum(mine[k].decompress_s * s for k, s in scale.items()),
        sum(mine[k].compress_cpu_s * s for k, s in scale.items()),
        all(mine[k].exact for k in TRAIN_MIX),
    )


def line(row: Row, disk_bw: float | None) -> str:
    """One table line; with a disk bandwidth, whether compression keeps up with it."""
    comp = row.speed(row.compress_s)
    text = f"{row.codec:<11} {row.data:<11} {100 * row.saved:7.1f} {comp:9.2f} {row.speed(row.decompress_s):9.2f}"
    text += f" {row.speed(row.compress_cpu_s):11.2f}"
    text += f" {'yes' if row.exact else 'NO':>5}"
    if disk_bw:
        keeps = "yes" if comp * 1e9 >= disk_bw else "no"
        text += f"  {keeps:>3} x{comp * 1e9 / disk_bw:.2f}"
    return text


def header(args: argparse.Namespace) -> str:
    """What ran: sizes, threads, mode, machine and library versions (timings depend on all of them)."""
    versions = []
    for package in ("zstandard", "blosc2", "zipnn", "torch"):
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            continue
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"size {args.size >> 20} MiB per kind, chunk {args.chunk >> 20} MiB, threads {args.threads} "
        f"({args.mode}), median of {args.reps}; {os.cpu_count()} CPUs, load average {load}\n" + "; ".join(versions)
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=parse_size("256M"), help="bytes per data kind (256M)")
    p.add_argument("--chunk", type=parse_size, default=parse_size("16M"), help="bytes per encoded chunk (16M)")
    p.add_argument("--threads", type=int, default=2, help="threads encoding/decoding (2)")
    p.add_argument("--mode", choices=("pool", "codec"), default="pool", help="pool: chunks in parallel (default)")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions; the median is reported (3)")
    installed = sorted(codec.names(), key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    p.add_argument("--codecs", default=",".join(installed), help="comma-separated (all installed)")
    p.add_argument("--kinds", default="bf16,fp32,exp_avg,exp_avg_sq,mixed", help="comma-separated data kinds")
    p.add_argument("--disk-bw", type=parse_size, help="disk write bandwidth in bytes/s (fio), e.g. 706M")
    p.add_argument("--json", help="also write the rows to this file")
    p.add_argument("--save", metavar="DIR", help="compare each codec with a DCP save into a new folder under DIR")
    p.add_argument("--save-threads", type=int, help="the save's I/O threads (ckptio's default)")
    return p.parse_args(argv)


def compare_saves(args: argparse.Namespace) -> int:
    """--save: each codec alone against a DCP save with it, on each data kind."""
    args.save_threads = args.save_threads or IOOptions().threads
    print(header(args) + f"; save: ckptio Writer, {args.save_threads} I/O threads, O_DIRECT, durable")
    for kind in args.kinds.split(","):
        tensors = kinds(args.size)[kind]()
        parts = list(chunks(tensors, args.chunk))
        print(composition(kind, tensors))
        print(
            f"{'codec':<11} {'codec GB/s':>9} {'CPU-s/GiB':>11} {'save GB/s':>9} {'CPU-s/GiB':>11} {'save/codec':>10} {'per CPU':>7} {'saved':>7}"
        )
        for name in args.codecs.split(","):
            print(save_line(name, tensors, parts, args), flush=True)
        del tensors, parts
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Measure every codec on every kind, print the table (and the computed training checkpoint)."""
    args = parse(argv)
    if args.save:
        return compare_saves(args)
    names = args.codecs.split(",")
    builders = kinds(args.size)
    print(header(args))
    print(
        f"{'codec':<11} {'data':<11} {'saved%':>7} {'comp GB/s':>9} {'dec GB/s':>9} {'comp GB/cpu-s':>11} {'exact':>5}",
        end="",
    )
    print("  keeps up with disk" if args.disk_bw else "", flush=True)
    rows: list[Row] = []
    notes = []
    for kind in args.kinds.split(","):
        tensors = builders[kind]()
        notes.append(composition(kind, tensors))
        parts = list(chunks(tensors, args.chunk))
        for name in names:
            rows.append(measure(name, kind, parts, args))
            print(line(rows[-1], args.disk_bw), flush=True)
        del tensors, parts
    computed = [row for name in names if (row := train_row(rows, name))]
    for row in computed:
        print(line(row, args.disk_bw))
    print("\n".join(notes))
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(row) for row in rows + computed], f, indent=1)
    return 0 if all(row.exact for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
