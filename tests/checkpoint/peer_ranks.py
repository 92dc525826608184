"""A rank of the peer-tier tests, run by torchrun on two "nodes" of this host (two agents, --nnodes=2, gloo on
127.0.0.1): `python -m tests.checkpoint.peer_ranks PHASE ROOT [ARGS]`. Each node's RAM is its own folder of a
tmpfs (ROOT/node<N>), so a test "kills a node" by removing that folder. Every rank leaves what it saw in
ROOT/result-<phase>-<rank>.json; a failed check raises (torchrun then exits non-zero)."""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from ckptio import IOOptions, TieredCheckpointer
from ckptio.errors import NoCheckpoint
from ckptio.records import Restored

OPTIONS = IOOptions(backend="buffered", chunk_bytes=64 << 10, buffer_bytes=1 << 20, threads=2)


def state(rank: int, step: int, numel: int = 50_000) -> dict[str, Any]:
    """A state of its own for each rank and step: odd sizes, two dtypes."""
    g = torch.Generator().manual_seed(rank * 1000 + step)
    return {
        "w": torch.randn(numel, generator=g),
        "b": torch.randint(0, 1 << 30, (333,), generator=g),
        "step": step,
    }


def tiers(root: Path, rank: int, node: int, durable: bool) -> list[str]:
    """memory (this rank's folder in its node's RAM), peer (the node's RAM), and a durable folder."""
    found = [f"memory://{root}/node{node}/own{rank}", f"peer://{root}/node{node}"]
    return [*found, str(root / "durable" / f"rank{rank}")] if durable else found


def main(phase: str, root: Path, *args: str) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # a test that finds a rank stuck asks where
    dist.init_process_group("gloo")
    rank, node = dist.get_rank(), int(os.environ["GROUP_RANK"])
    said: dict[str, Any] = {"node": node}
    try:
        said.update(PHASES[phase](root, rank, node, *args))
    finally:
        (root / f"result-{phase}-{rank}.json").write_text(json.dumps(said))
        if phase != "loop":  # a loop's peer may have been killed: nobody to meet
            dist.barrier()
        dist.destroy_process_group()


def save(root: Path, rank: int, node: int, steps: str, numel: str = "50000") -> dict[str, Any]:
    """Saves of `steps` (comma-separated), async, through memory, peer and durable; each save's record."""
    records = []
    with TieredCheckpointer(tiers(root, rank, node, True), options=OPTIONS) as ckpt:
        for step in map(int, steps.split(",")):
            records.append(ckpt.save(state(rank, step, int(numel)), step, blocking=False))
            if len(records) > 1:  # the peer's copies keep pace (a loaded machine's drains would lag behind)
                records[-2].wait(tier=1)
        ckpt.wait_drained()
    return {"saves": [{"step": r.step, "durable": sorted(r.durable_seconds), "errors": r.errors} for r in records]}


def restore(root: Path, rank: int, node: int, durable: str = "yes", numel: str = "50000") -> dict[str, Any]:
    """A restarted job's restore: the step and tier each rank got, its state checked exactly (durable "no": the
    loop's tiers, every step kept)."""
    where = tiers(root, rank, node, durable == "yes")
    with TieredCheckpointer(
        where, options=OPTIONS, require_durable=False, keep=2 if durable == "yes" else 10**6
    ) as ckpt:
        try:
            got = ckpt.load()
        except NoCheckpoint as error:
            return {"error": type(error).__name__, "skipped": [s.reason for s in error.skipped]}
        found = ckpt.last
        assert isinstance(found, Restored)
        want = state(rank, found.step, int(numel))
        exact = all(torch.equal(got[k], want[k]) for k in ("w", "b")) and got["step"] == found.step
        skipped = [[s.tier, s.step, s.reason] for s in found.skipped]
        return {"step": found.step, "tier": found.tier, "exact": exact, "skipped": skipped}


def loop(root: Path, rank: int, node: int, saves: str, numel: str) -> dict[str, Any]:
    """Many async saves of a larger state through memory and peer, each kept (a test kills a rank meanwhile)."""
    records = []
    with TieredCheckpointer(
        tiers(root, rank, node, False), options=OPTIONS, require_durable=False, keep=int(saves)
    ) as ckpt:
        for step in range(1, int(saves) + 1):
            records.append(ckpt.save(state(rank, step, int(numel)), step, blocking=False))
            if len(records) > 1:  # the peer's copies keep pace (a loaded machine's drains would lag behind)
                records[-2].wait(tier=1)
            held = [r.step for r in records if 1 in r.durable_seconds]
            print(f"rank {rank} pid {os.getpid()} saved {step} held {max(held, default=0)}", flush=True)
    return {"saves": [{"step": r.step, "durable": sorted(r.durable_seconds), "errors": r.errors} for r in records]}


def busy(root: Path, rank: int, node: int, numel: str = "4000000") -> dict[str, Any]:
    """A restore in the same job right after an async save, while that save is still on its way to RAM, the peer and
    disk: the restore waits for the drains (never while holding what they need at their end) and reads the newest
    step, exactly."""
    with TieredCheckpointer(tiers(root, rank, node, True), options=OPTIONS) as ckpt:
        ckpt.save(state(rank, 1, int(numel)), 1)
        record = ckpt.save(state(rank, 2, int(numel)), 2, blocking=False)
        draining = 1 not in record.durable_seconds
        got = ckpt.load()
        found = ckpt.last
        assert isinstance(found, Restored)
        want = state(rank, found.step, int(numel))
        exact = all(torch.equal(got[k], want[k]) for k in ("w", "b"))
    said = {"step": found.step, "tier": found.tier, "exact": exact, "draining": draining}
    return {**said, "durable": sorted(record.durable_seconds), "errors": record.errors}


PHASES = {"save": save, "restore": restore, "loop": loop, "busy": busy}

if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), *sys.argv[3:])
