"""The memory tier against the memory copy that bounds it (issue 39's target: a RAM-tier save's stall at most 1.2x
a copy of the same bytes): per round, interleaved, a copy of the state's bytes into host memory allocated and touched
beforehand (the reference; ckptio's async staging does that copy), a blocking TieredCheckpointer save into
`memory://` (checksummed, fsynced, renamed: durable in RAM), a save with blocking=False (its stall, and its time
until durable), and a verified load back from the memory tier. Medians
over the rounds, and each ratio to the copy.

    python benchmarks/memory_tier.py --size 1G --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
import uuid

import torch

from gdsbench.units import parse_size


def state(nbytes: int) -> dict[str, torch.Tensor]:
    """A bf16 state dict of `nbytes` in 16 tensors, random."""
    each = nbytes // 16 // 2
    generator = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(each, generator=generator).to(torch.bfloat16) for i in range(16)}


def copy_seconds(tensors: dict[str, torch.Tensor], into: dict[str, torch.Tensor]) -> float:
    """One copy of every tensor into memory allocated and touched beforehand."""
    started = time.perf_counter()
    for name, tensor in tensors.items():
        into[name].copy_(tensor)
    return time.perf_counter() - started


def main() -> None:
    from ckptio import TieredCheckpointer

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256M", help="the state's bytes (default 256M)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tensors = state(parse_size(args.size))
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    into = {name: torch.empty_like(t) for name, t in tensors.items()}
    copy_seconds(tensors, into)  # faulted in, as staging buffers kept between saves are
    times: dict[str, list[float]] = {"copy": [], "save": [], "async stall": [], "async durable": [], "load": []}
    with TieredCheckpointer([f"memory://gdsbench-bench-{uuid.uuid4().hex[:8]}"], keep=1) as ckpt:
        for step in range(args.rounds):
            times["copy"].append(copy_seconds(tensors, into))
            times["save"].append(ckpt.save(tensors, 2 * step).stall_seconds)
            behind = ckpt.save(tensors, 2 * step + 1, blocking=False)
            behind.wait()
            times["async stall"].append(behind.stall_seconds)
            times["async durable"].append(behind.durable_seconds[0])
            started = time.perf_counter()
            ckpt.load()
            times["load"].append(time.perf_counter() - started)
        folder = str(ckpt.tiers[0])
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"state {nbytes / (1 << 20):.0f} MiB, {args.rounds} interleaved rounds, medians; memory tier {folder}")
    for name in times:
        ratio = medians[name] / medians["copy"]
        print(f"{name:13s} {medians[name]:.3f} s  {nbytes / medians[name] / 1e9:.2f} GB/s  {ratio:.2f}x the copy")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
