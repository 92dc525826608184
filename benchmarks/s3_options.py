"""ckptio's object-store knobs (IOOptions.part_bytes x IOOptions.object_connections) for `ckptio.save` and
`ckptio.load` of one state dict to `s3://`, against the s3 engine's client (gdsbench.runners.s3_client: the AWS
CRT, 16 MiB parts, the CRT's own connection count) PUTting and GETting the same bytes in one buffer.

Each round runs the reference PUT and GET, then every cell's save and load, in an order rotated by one cell
per round (the store's speed drifts); every object is deleted once read (radosgw keeps what it replaces until
its garbage collection). Printed: per cell, the median seconds and GB/s over the rounds, and the median of the
per-round ratios of the reference's seconds to the cell's (1.00: as fast as the client's own PUT/GET; the
load's include ckptio's verification of every chunk). The endpoint and keys come from the environment
(AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: `set -a; . <ceph dir>/s3.env; set +a`); the
bucket is made and removed.

    python benchmarks/s3_options.py --size 1G --parts 8,16 --connections 2,4,8,16 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import torch
from ckptio import IOOptions, load, save

from gdsbench import workloads
from gdsbench.runners.s3_client import Bucket
from gdsbench.units import parse_size

MIB = 1 << 20
REFERENCE_PART = 16 * MIB  # the s3 engine's default part_size


def timed(call: Callable[[], Any]) -> float:
    """Seconds one call takes."""
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def reference(bucket: Bucket, body: memoryview, times: dict[str, list[float]]) -> None:
    """The client's PUT then GET of the whole buffer, the object deleted after."""
    key = f"reference-{uuid.uuid4().hex[:8]}"
    into = memoryview(bytearray(len(body)))
    times["put"].append(timed(lambda: bucket.put(key, body)))
    times["get"].append(timed(lambda: bucket.get(key, into)))
    assert into == body, "the reference GET read other bytes than it PUT"
    bucket.delete(key)


def cell(bucket: Bucket, state: dict[str, Any], options: IOOptions, times: dict[str, list[float]]) -> None:
    """ckptio.save then ckptio.load (verified) of the state with these options, the object deleted after."""
    key = f"ckptio-{uuid.uuid4().hex[:8]}.ckpt"
    url = f"s3://{bucket.name}/{key}"
    times["save"].append(timed(lambda: save(state, url, options=options)))
    loaded: dict[str, Any] = {}
    times["load"].append(timed(lambda: loaded.update(load(url, options=options))))
    assert all(torch.equal(loaded[k].view(torch.uint8), t.view(torch.uint8)) for k, t in state.items())
    bucket.delete(key)


def run(bucket: Bucket, state: dict[str, Any], cells: list[tuple[int, int]], rounds: int) -> dict[Any, Any]:
    """Interleaved rounds (reference first, the cells rotated); seconds by cell (None: the reference) and op."""
    body = memoryview(torch.cat([t.view(torch.uint8).flatten() for t in state.values()]).numpy())
    times: dict[Any, dict[str, list[float]]] = {c: {"save": [], "load": []} for c in cells}
    times[None] = {"put": [], "get": []}
    for r in range(rounds):
        reference(bucket, body, times[None])
        for part, connections in cells[r % len(cells) :] + cells[: r % len(cells)]:
            options = IOOptions(part_bytes=part, object_connections=connections)
            cell(bucket, state, options, times[(part, connections)])
        print(f"round {r + 1}/{rounds} done", flush=True)
    return times


def report(times: dict[Any, dict[str, list[float]]], nbytes: int) -> None:
    """Medians, GB/s and the median per-round ratio to the reference's PUT (saves) and GET (loads)."""
    ref = times.pop(None)
    for op, seconds in ref.items():
        print(
            f"reference {op}: {statistics.median(seconds):6.2f} s {nbytes / statistics.median(seconds) / 1e9:5.2f} GB/s"
        )
    print("part_MiB connections  save_s save_GB/s save/put   load_s load_GB/s load/get")
    for (part, connections), cell_times in sorted(times.items()):
        row = [f"{part // MIB:8d} {connections:11d}"]
        for op, ref_op in (("save", "put"), ("load", "get")):
            median = statistics.median(cell_times[op])
            ratio = statistics.median(r / c for r, c in zip(ref[ref_op], cell_times[op]))
            row.append(f"{median:7.2f} {nbytes / median / 1e9:9.2f} {ratio:8.2f}")
        print("  ".join(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="1G", help="state-dict size (llama3-8b preset, bf16)")
    parser.add_argument("--parts", default="8,16,32,64", help="IOOptions.part_bytes values, MiB")
    parser.add_argument("--connections", default="4,8,16,32", help="IOOptions.object_connections values")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    state = dict(workloads.get(workloads.WorkloadSpec("llama3-8b", parse_size(args.size), "bf16")).tensors)
    nbytes = sum(t.nbytes for t in state.values())
    cells = [(int(p) * MIB, int(c)) for p in args.parts.split(",") for c in args.connections.split(",")]
    print(
        f"llama3-8b {args.size} bf16: {len(state)} tensors, {nbytes} bytes; {len(cells)} cells x {args.rounds} rounds"
    )
    bucket = Bucket(os.environ["AWS_ENDPOINT_URL"], f"s3-options-{uuid.uuid4().hex[:8]}", "us-east-1", REFERENCE_PART)
    bucket.create()
    try:
        report(run(bucket, state, cells, args.rounds), nbytes)
    finally:
        for key in bucket.sizes(""):
            bucket.delete(key)
        bucket.remove()
        bucket.close()


if __name__ == "__main__":
    main()
