"""Measure gdsbench.checkpoint against fio and torch/safetensors baselines on this machine.

Runs every contender in each round (interleaved), cold cache for every read, and prints bandwidths,
ratios to fio of the same round, and medians. Standalone: python bench/checkpoint_probe.py --help
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import psutil
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gdsbench.checkpoint import load, save  # noqa: E402


def make_state(total_bytes: int) -> dict[str, torch.Tensor]:
    """Mixed bf16/fp32 layers of random values (never zeros) summing to about total_bytes."""
    torch.manual_seed(0)
    sd, used, i = {}, 0, 0
    while used < total_bytes:
        sd[f"layers.{i}.attn.wq"] = (torch.randn(4096, 4096) * 0.02).to(torch.bfloat16)
        sd[f"layers.{i}.mlp.w1"] = torch.randn(2048, 4096) * 0.02
        sd[f"layers.{i}.norm"] = torch.randn(4096)
        used += sum(t.nbytes for k, t in sd.items() if k.startswith(f"layers.{i}."))
        i += 1
    return sd


def drop_caches() -> None:
    """Flush dirty pages and drop the page cache (cold reads)."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fio(path: str, rw: str, size: int) -> float:
    """fio sequential bandwidth (bytes/s) with the options the targets name."""
    out = subprocess.run(["fio", "--name=probe", f"--filename={path}", f"--rw={rw}", "--bs=16M", "--direct=1",
                          "--ioengine=libaio", "--iodepth=8", f"--size={size}", "--output-format=json"],
                         check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["jobs"][0]
    return float(job["write" if rw == "write" else "read"]["bw_bytes"])


def timed(fn: Callable[[], object]) -> float:
    """Wall seconds of fn()."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def touch_all(obj: dict[str, torch.Tensor]) -> None:
    """Read one byte of every page of every tensor (forces mmap'd data in)."""
    for t in obj.values():
        t.view(-1).view(torch.uint8)[::4096].sum()


def torch_save_fsync(sd: dict, path: str) -> None:
    """torch.save then fsync: the durable baseline."""
    with open(path, "wb") as f:
        torch.save(sd, f)
        f.flush()
        os.fsync(f.fileno())


def peak_rss_during(fn: Callable[[], object]) -> int:
    """Peak RSS growth (bytes) over the RSS before fn, sampled every 5 ms."""
    proc = psutil.Process()
    base, peak, stop = proc.memory_info().rss, [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.005)

    th = threading.Thread(target=sample)
    th.start()
    try:
        fn()
    finally:
        stop.set()
        th.join()
    return max(0, peak[0] - base)


def cold(fn: Callable[[], object]) -> float:
    """Drop caches, then time fn."""
    drop_caches()
    return timed(fn)


def one_round(d: str, sd: dict, nbytes: int, fio_size: int, baselines: bool) -> dict[str, float]:
    """Bandwidths (bytes/s) of every contender in one round."""
    ours, fio_file, ref, st = (os.path.join(d, n) for n in ("ours.pt", "fio.dat", "torch.pt", "st.safetensors"))
    r = {"fio_write": fio(fio_file, "write", fio_size)}
    drop_caches()
    r["fio_read"] = fio(fio_file, "read", fio_size)
    drop_caches()
    r["save"] = nbytes / timed(lambda: save(sd, ours))
    r["load"] = nbytes / cold(lambda: load(ours))
    if baselines:
        r["torch_save_fsync"] = nbytes / timed(lambda: torch_save_fsync(sd, ref))
        r["torch_load_mmap_touch"] = nbytes / cold(lambda: touch_all(torch.load(ref, mmap=True, weights_only=True)))
        import safetensors.torch
        r["safetensors_load"] = nbytes / cold(lambda: safetensors.torch.load_file(st))
    return r


def main() -> None:
    """Parse args, run rounds, print per-round and median ratios, clean up."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gib", type=float, default=4.0)
    ap.add_argument("--dir", default="/var/tmp/gdsbench-probe")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-baselines", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    try:
        sd = make_state(int(a.gib * (1 << 30)))
        nbytes = sum(t.nbytes for t in sd.values())
        print(f"state dict: {len(sd)} tensors, {nbytes / 2**30:.2f} GiB")
        if not a.no_baselines:
            import safetensors.torch
            safetensors.torch.save_file(sd, os.path.join(a.dir, "st.safetensors"))
        extra = peak_rss_during(lambda: save(sd, os.path.join(a.dir, "ours.pt")))
        print(f"peak extra RSS during first save (incl. pool allocation): {extra / 2**20:.0f} MiB")
        extra = peak_rss_during(lambda: save(sd, os.path.join(a.dir, "ours.pt")))
        print(f"peak extra RSS during a later save: {extra / 2**20:.0f} MiB (buffers 64 MiB)")
        rounds = []
        for i in range(a.rounds):
            r = one_round(a.dir, sd, nbytes, nbytes, not a.no_baselines)
            rounds.append(r)
            print(f"round {i}: " + ", ".join(f"{k}={v / 1e9:.2f}GB/s" for k, v in r.items()), flush=True)
        med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        ratio = {k: statistics.median(r[k] / r["fio_write" if "save" in k else "fio_read"] for r in rounds)
                 for k in rounds[0] if not k.startswith("fio")}
        print("median GB/s: " + ", ".join(f"{k}={v / 1e9:.2f}" for k, v in med.items()))
        print("median ratio to fio of the same round: " + ", ".join(f"{k}={v:.2f}x" for k, v in ratio.items()))
        if "torch_save_fsync" in ratio:
            print(f"save / torch.save+fsync: {statistics.median(r['save'] / r['torch_save_fsync'] for r in rounds):.1f}x; "
                  f"load / torch.load(mmap)+touch: {statistics.median(r['load'] / r['torch_load_mmap_touch'] for r in rounds):.2f}x; "
                  f"load / safetensors: {statistics.median(r['load'] / r['safetensors_load'] for r in rounds):.2f}x")
    finally:
        shutil.rmtree(a.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
