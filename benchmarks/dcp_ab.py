"""A/B of the DCP storage layer between two checkouts of gdsbench: interleaved pairs of one timed
`dcp.save` (durable) and one cold `dcp.load` through Writer/Reader, each in a fresh process importing its
own checkout, the median of each side and the ratio new / old.

    git worktree add /tmp/old <rev>
    python benchmarks/dcp_ab.py --old /tmp/old --new . --dir /var/tmp/gdsbench --size 2G --pairs 6
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
from pathlib import Path

ONE = """
import json, sys, time
import torch, torch.distributed.checkpoint as dcp
from ckptio import Reader, Writer
path, size, cold = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
g = torch.Generator().manual_seed(0)
layers = 32
sd = {f"layer{i}.w": torch.randn(size // 2 // layers, generator=g).bfloat16() for i in range(layers)}
sd["step"] = 7
t = time.perf_counter(); dcp.save(sd, storage_writer=Writer(path), no_dist=True); save_s = time.perf_counter() - t
if cold:
    import subprocess
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
out = {k: torch.empty_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in sd.items()}
t = time.perf_counter(); dcp.load(out, storage_reader=Reader(path), no_dist=True); load_s = time.perf_counter() - t
assert all(torch.equal(out[k], sd[k]) for k in sd if k != "step") and out["step"] == 7
n = sum(v.nbytes for v in sd.values() if isinstance(v, torch.Tensor))
print(json.dumps({"save": n / save_s, "load": n / load_s}))
"""


def parse_size(text: str) -> int:
    """`2G`, `512M`, `96M` (powers of 2) or bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def one(checkout: Path, directory: Path, size: int) -> dict[str, float]:
    """One save + load importing `checkout`'s gdsbench; bytes/s of each."""
    path = directory / f"dcp-ab-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": str(checkout.resolve()), "PYTHONWARNINGS": "ignore"}
    cold = "1" if os.geteuid() == 0 else "0"
    try:
        done = subprocess.run(
            [sys.executable, "-c", ONE, str(path), str(size), cold], env=env, capture_output=True, text=True, check=True
        )
    finally:
        shutil.rmtree(path, ignore_errors=True)
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    """Interleaved pairs, then medians, ranges and ratios."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True)
    ap.add_argument("--new", type=Path, required=True)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--size", default="2G")
    ap.add_argument("--pairs", type=int, default=6)
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    started = time.time()
    for pair in range(args.pairs):
        order = ("old", "new") if pair % 2 == 0 else ("new", "old")
        for side in order:
            runs[side].append(one(getattr(args, side), args.dir, parse_size(args.size)))
    print(f"{args.pairs} interleaved pairs of {args.size}, {time.time() - started:.0f} s (GB/s: median, min-max)")
    for what in ("save", "load"):
        old, new = ([r[what] / 1e9 for r in runs[s]] for s in ("old", "new"))
        ratio = statistics.median(new) / statistics.median(old)
        print(
            f"  {what}  old {statistics.median(old):.3f} ({min(old):.2f}-{max(old):.2f})  "
            f"new {statistics.median(new):.3f} ({min(new):.2f}-{max(new):.2f})  new/old x{ratio:.2f}"
        )


if __name__ == "__main__":
    main()
