"""How long `dcp.async_save(state, storage_writer=ckptio.Writer(dir))` blocks its caller, against a host memcpy
of the same bytes (gdsbench's reference, rank.host_copy_seconds: every tensor copied into one reused buffer).

After a warmup save (staging buffers made, DCP's plan cache filled), each round times one async save's call
(the blocking part, split into DCP's work before the Writer's stage(), stage() itself, and DCP's after it),
the reference copy, and torch's copy_ of every tensor into a buffer of its own ("copy_ to own": what any
staging copy moves, into memory no cache holds, unlike the reference's reused buffer); the save's future is
awaited untimed. Each timed call starts after `--idle` seconds of quiet: torch's OpenMP threads spin for a
while after a parallel copy and would slow whatever runs next (gdsbench's ranks time their saves after
barriers, not after the copy). Printed: medians over the rounds, their ratio to the reference's, and the
median of the per-round ratios of blocking to the reference. With `--nested` the state goes to DCP as
{"model": state}, as training loops pass it: DCP's per-key work on the caller's thread (its logging of every
top-level key, "before") then runs once, not per tensor. The save's files are removed at the end.

    python benchmarks/async_blocking.py --dir /var/tmp/gdsbench/async --size 1G --rounds 9
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import warnings
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from ckptio import Writer
from torch.distributed.checkpoint import DefaultSavePlanner

from gdsbench import workloads
from gdsbench.runners.checkpoint.ranks.rank import host_copy_seconds
from gdsbench.units import parse_size


class TimedWriter(Writer):
    """The Writer, noting when its last stage() began and ended."""

    began = ended = 0.0

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        self.began = time.perf_counter()
        staged = super().stage(state_dict)
        self.ended = time.perf_counter()
        return staged


def rounds(state: dict[str, Any], writer: TimedWriter, count: int, idle: float, nested: bool) -> dict[str, list[float]]:
    """Interleaved rounds of (async save's blocking and its parts, host copy), after one warmup save."""
    planner = DefaultSavePlanner(enable_plan_caching=True)

    def save(step: int) -> Any:
        values = {**state, "step": step}
        return dcp.async_save(
            {"model": values} if nested else values, storage_writer=writer, planner=planner, no_dist=True
        )

    save(-1).result()
    own = [torch.empty_like(t) for t in state.values()]
    times: dict[str, list[float]] = {name: [] for name in ("blocking", "before", "stage()", "after", "host copy")}
    times["copy_ to own"] = []
    for step in range(count):
        time.sleep(idle)
        started = time.perf_counter()
        future = save(step)
        returned = time.perf_counter()
        future.result()
        for name, seconds in zip(
            times, (returned - started, writer.began - started, writer.ended - writer.began, returned - writer.ended)
        ):
            times[name].append(seconds)
        time.sleep(idle)
        times["host copy"].append(host_copy_seconds(state))
        time.sleep(idle)
        times["copy_ to own"].append(copy_seconds(own, list(state.values())))
    return times


def copy_seconds(destinations: list[Any], sources: list[Any]) -> float:
    """Seconds to copy_ every source into its destination."""
    started = time.perf_counter()
    for destination, source in zip(destinations, sources):
        destination.copy_(source)
    return time.perf_counter() - started


def report(times: dict[str, list[float]]) -> None:
    """Medians, their ratio to the copy's, and the median per-round ratio of blocking to copy."""
    reference = statistics.median(times["host copy"])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:10s} {median * 1e3:8.1f} ms  x{median / reference:.2f}  ({len(values)} rounds)")
    paired = [b / c for b, c in zip(times["blocking"], times["host copy"])]
    print(f"blocking / host copy: x{statistics.median(paired):.2f} (median of per-round ratios)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default="/var/tmp/gdsbench", help="where the checkpoint is written (then removed)")
    parser.add_argument("--size", default="1G", help="state-dict size (llama3-8b preset)")
    parser.add_argument("--dtype", default="mixed", help="the preset's dtype mix: mixed, bf16, fp32")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--idle", type=float, default=0.2, help="seconds of quiet before each timed call")
    parser.add_argument("--nested", action="store_true", help='save {"model": state}, not the flat state')
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # DCP's no_dist notice
    state = dict(workloads.get(workloads.WorkloadSpec("llama3-8b", parse_size(args.size), args.dtype)).tensors)
    print(f"llama3-8b {args.size} {args.dtype}: {len(state)} tensors, {sum(t.nbytes for t in state.values())} bytes")
    directory = tempfile.mkdtemp(prefix="async-blocking.", dir=args.dir)
    writer = TimedWriter(directory)
    try:
        report(rounds(state, writer, args.rounds, args.idle, args.nested))
    finally:
        writer.close()
        shutil.rmtree(directory)


if __name__ == "__main__":
    main()
