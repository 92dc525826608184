"""Where a DCP load's CPU goes, phase by phase: ckptio.Reader under dcp.load, one process, cold cache.

    python benchmarks/load_phases.py --dir /var/tmp/gdsbench --size 1G --reps 5
    python benchmarks/load_phases.py --dir /var/tmp/gdsbench --size 1G --reps 5 --ckptio-src /tmp/old/lib/ckptio/src

Saves the Llama-3-8B-like workload once with ckptio.Writer (removed at the end), then loads it `reps` times in each of four
conditions, interleaved: destinations fresh (new tensors, as a restore makes them) or touched (written
before), checksums verified or not. Each load is split into the phases the Reader runs (metadata: read,
seal and structural checks; planning: DCP's local and global plans and the Reader's pinning of data files;
reads: read, verify, place); the differences between conditions price the checksums and the first touch.
Seconds are medians; CPU is this process's (user + system) and the machine's (/proc/stat busy seconds),
per GiB. `--ckptio-src` runs another ckptio tree (a checkout before a change) in a child process, so two
versions can be measured in one run: pass the folder holding its `ckptio` package.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

from gdsbench.runners.resources import machine_cpu, process_cpu

CONDITIONS = (("fresh", True), ("fresh", False), ("touched", True), ("touched", False))


def clock() -> tuple[float, float, float]:
    """Wall, process CPU and machine CPU seconds now (machine: /proc/stat's busy time, as a sweep's rows count it)."""
    return time.perf_counter(), process_cpu(), machine_cpu() or 0.0


def timed_reader(base: Any, spent: dict[str, list[float]]) -> Any:
    """A subclass of ckptio.Reader that adds each phase's (wall, process CPU, machine CPU) to `spent`."""

    def wrap(method: str, phase: str) -> Any:
        def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return getattr(base, method)(self, *args, **kwargs)
            finally:
                end = clock()
                for i, (a, b) in enumerate(zip(start, end)):
                    spent[phase][i] += b - a

        return timed

    methods = {
        "read_metadata": "metadata",
        "prepare_local_plan": "planning",
        "prepare_global_plan": "planning",
        "read_data": "reads",
    }
    return type("TimedReader", (base,), {m: wrap(m, phase) for m, phase in methods.items()})


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every condition `reps` times, interleaved: per condition and phase, the medians per GiB."""
    import ckptio
    import torch.distributed.checkpoint as dcp

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cpu_profile import state_dict  # type: ignore[import-not-found]

    from gdsbench.units import parse_size

    warnings.simplefilter("ignore")
    state = state_dict(parse_size(args.size))
    gib = sum(t.numel() * t.element_size() for t in state.values()) / 2**30
    path = Path(args.dir) / "load-phases.d"
    shutil.rmtree(path, ignore_errors=True)
    dcp.save(state, storage_writer=ckptio.Writer(path), no_dist=True)
    try:
        medians = _conditions(args.reps, state, path, gib)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    return {"ckptio": ckptio.__file__, "options": repr(ckptio.IOOptions()), "gib": gib, "medians": medians}


def _conditions(reps: int, state: dict[str, Any], path: Path, gib: float) -> dict[str, list[float]]:
    """Load `path` `reps` times in every condition, interleaved: the medians per condition and phase."""
    import ckptio
    import torch
    import torch.distributed.checkpoint as dcp
    from cpu_profile import evict  # type: ignore[import-not-found]

    options = ckptio.IOOptions()
    samples: dict[str, list[list[float]]] = defaultdict(list)
    for _ in range(reps):
        for memory, verify in CONDITIONS:
            dest = {k: torch.empty_like(t) for k, t in state.items()}
            if memory == "touched":
                for t in dest.values():
                    t.zero_()
            evict(path)
            spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
            reader = timed_reader(ckptio.Reader, spent)(path, options=options, verify=verify)
            start = clock()
            dcp.load(dest, storage_reader=reader, no_dist=True)
            spent["total"] = [b - a for a, b in zip(start, clock())]
            for phase, (wall, cpu, machine) in spent.items():
                samples[f"{memory} verify={verify} {phase}"].append([wall, cpu / gib, machine / gib])
    return {key: [statistics.median(column) for column in zip(*rows)] for key, rows in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", required=True, help="a folder on the device under test")
    parser.add_argument("--size", default="1G")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--ckptio-src", help="measure the ckptio package in this folder instead (child process)")
    parser.add_argument("--json", action="store_true", help="print the medians as JSON")
    args = parser.parse_args()
    if args.ckptio_src:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([args.ckptio_src, os.environ.get("PYTHONPATH", "")])}
        child = [sys.executable, __file__, "--dir", args.dir, "--size", args.size, "--reps", str(args.reps)]
        sys.exit(subprocess.run([*child, *(["--json"] if args.json else [])], env=env, check=False).returncode)
    result = measure(args)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{result['ckptio']}: {result['options']}, {result['gib']:.2f} GiB")
    print(f"{'condition and phase':40s} {'seconds':>8s} {'CPU-s/GiB':>10s} {'machine CPU-s/GiB':>18s}")
    for key, (wall, cpu, machine) in result["medians"].items():
        print(f"{key:40s} {wall:8.3f} {cpu:10.3f} {machine:18.3f}")


if __name__ == "__main__":
    main()
