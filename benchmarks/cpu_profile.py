"""Where a checkpoint engine's CPU goes: run one engine's save or load in a loop under a sampling profiler,
then rank what the samples were doing.

    py-spy record --native --rate 250 --format raw -o /tmp/save.txt -- \
        python benchmarks/cpu_profile.py run save --engine fastpersist --dir /var/tmp/gdsbench --size 1G --reps 4
    python benchmarks/cpu_profile.py top /tmp/save.txt

`run` saves (or loads, after one unmeasured save) a Llama-3-8B-like state dict `reps` times through the
engine's public API (fastpersist: ckptio.save/load; dcp_fast: dcp.save/load with ckptio.Writer/Reader, one
process; torch_save: torch.save + fsync / torch.load; dcp: DCP's FileSystemWriter/Reader) and prints each
repetition's seconds and CPU. `top` reads py-spy's raw output (one `frame;frame;...;leaf count` line per
stack) and prints the busiest leaf functions and the share of every category below (copy, checksum, write,
read, page faults and zeroing, pickling, waiting on threads), as percentages of the samples of busy threads.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

#: Leaf-frame patterns by category, first match wins (py-spy --native names C functions as they are).
CATEGORIES = (
    ("checksum (xxh3, crc32c)", r"xxh|XXH|crc32"),
    ("copy (memcpy, tensor copy)", r"memcpy|memmove|copy_|_copy|Copy|clone"),
    ("write syscalls", r"pwrite|^write$|libc_write|writev|fsync|fdatasync"),
    ("read syscalls", r"pread|^read$|libc_read|readv|readinto"),
    ("page faults, zeroing (memset, fresh memory)", r"memset|populate|fault|_prefault|zero"),
    ("libc, unsymbolized (its memcpy and memset)", r"^0x[0-9a-f]+$"),
    ("pickle and torch serialization", r"pickle|Pickler|_save|persistent_id|serializ|_load\b"),
    ("waiting on threads and locks", r"wait|acquire|futex|sleep|select|poll|join"),
)


def state_dict(size: int) -> dict[str, Any]:
    """The benchmark's Llama-3-8B-like workload at `size` bytes (fresh tensors, as a training step has them)."""
    from gdsbench import workloads

    return dict(workloads.get(workloads.WorkloadSpec("llama3-8b", size, "mixed")).tensors)


def save_with(engine: str, state: dict[str, Any], path: Path) -> None:
    """One durable save through the engine's public API."""
    import torch

    if engine == "fastpersist":
        import ckptio

        ckptio.save(state, path)
    elif engine == "torch_save":
        torch.save(state, path)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())
    else:
        import ckptio
        import torch.distributed.checkpoint as dcp

        writer = ckptio.Writer(path) if engine == "dcp_fast" else dcp.FileSystemWriter(path, sync_files=True)
        dcp.save(state, storage_writer=writer, no_dist=True)


def load_with(engine: str, state: dict[str, Any], path: Path) -> None:
    """One load of everything the save wrote."""
    import torch

    if engine == "fastpersist":
        import ckptio

        ckptio.load(path)
    elif engine == "torch_save":
        torch.load(path, weights_only=True)
    else:
        import ckptio
        import torch.distributed.checkpoint as dcp

        target = {name: torch.empty_like(t) for name, t in state.items()}
        reader = ckptio.Reader(path) if engine == "dcp_fast" else dcp.FileSystemReader(path)
        dcp.load(target, storage_reader=reader, no_dist=True)


def evict(path: Path) -> None:
    """Drop the checkpoint's pages from the page cache (every file of it, posix_fadvise DONTNEED)."""
    from gdsbench.runners import cache

    for file in [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]:
        cache.evict(file)


def remove(path: Path) -> None:
    """Remove this script's checkpoint (a file or a DCP folder)."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> None:
    """Save or load `reps` times, printing each repetition's wall and CPU seconds."""
    from gdsbench.units import parse_size

    state = state_dict(parse_size(args.size))
    path = Path(args.dir) / f"cpu-profile.{args.engine}{'' if args.engine in ('fastpersist', 'torch_save') else '.d'}"
    remove(path)
    if args.pattern == "load":  # written by a child process: a profiler of this one sees the loads only
        child = [
            sys.executable,
            __file__,
            "run",
            "save",
            "--engine",
            args.engine,
            "--dir",
            args.dir,
            "--size",
            args.size,
            "--reps",
            "1",
            "--keep",
        ]
        subprocess.run(child, check=True, stdout=subprocess.DEVNULL)
    try:
        for rep in range(1, args.reps + 1):
            if args.pattern == "save":
                remove(path)
            else:
                evict(path)
            cpu, wall = os.times(), time.perf_counter()
            (save_with if args.pattern == "save" else load_with)(args.engine, state, path)
            seconds, after = time.perf_counter() - wall, os.times()
            used = after.user + after.system - cpu.user - cpu.system
            print(f"{args.engine} {args.pattern} rep {rep}: {seconds:.3f} s, {used:.3f} CPU-s")
    finally:
        if not args.keep:
            remove(path)


def top(args: argparse.Namespace) -> None:
    """Rank py-spy's raw samples by leaf function and by category."""
    leaves: Counter[str] = Counter()
    callers: Counter[str] = Counter()
    for line in Path(args.profile).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit() and re.search(args.within, stack):
            frames = stack.split(";")
            leaves[frames[-1]] += int(count)
            python = [f for f in frames if ".py:" in f]
            callers[f"{frames[-1].split(' (')[0]} <- {python[-1] if python else '?'}"] += int(count)
    total = sum(leaves.values()) or 1
    print(f"{total} samples of busy threads inside {args.within}")
    for leaf, count in leaves.most_common(args.most):
        print(f"{100 * count / total:5.1f}%  {leaf}")
    print("by leaf and the Python frame that called it:")
    for pair, count in callers.most_common(args.most):
        print(f"{100 * count / total:5.1f}%  {pair}")
    shares: Counter[str] = Counter()
    for leaf, count in leaves.items():
        function = leaf.split(" (")[0]  # py-spy's leaf: `function (file:line)`
        shares[next((name for name, pattern in CATEGORIES if re.search(pattern, function)), "other")] += count
    print("by category:")
    for name, count in shares.most_common():
        print(f"{100 * count / total:5.1f}%  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    runner = commands.add_parser("run", help="save or load in a loop, for the profiler")
    runner.add_argument("pattern", choices=("save", "load"))
    runner.add_argument("--engine", choices=("fastpersist", "dcp_fast", "torch_save", "dcp"), required=True)
    runner.add_argument("--dir", required=True, help="a folder on the device under test")
    runner.add_argument("--size", default="1G")
    runner.add_argument("--reps", type=int, default=4)
    runner.add_argument("--keep", action="store_true", help="leave the last checkpoint (for a later load)")
    ranking = commands.add_parser("top", help="rank a py-spy raw profile")
    ranking.add_argument("profile")
    ranking.add_argument("--most", type=int, default=15)
    ranking.add_argument(
        "--within",
        default=r"save_with|load_with|_bootstrap_inner",
        help="count only stacks with a frame matching this (default: the measured calls and the "
        "threads they start, not the workload's generation)",
    )
    args = parser.parse_args()
    (run if args.command == "run" else top)(args)


if __name__ == "__main__":
    main()
