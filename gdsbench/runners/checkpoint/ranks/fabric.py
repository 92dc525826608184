"""What torch.distributed moves between this job's ranks, timed on a process group of its own: the ceiling of the
peer tier's rows as fio's is for files. `ring`: each rank sends to the rank with its local index on the next node
and receives from the one on the previous node while it sends (the peer tier's own pattern; on one node, the next
rank), `broadcast`: rank 0 to all, `all_gather`: every rank's part to every rank. Bytes go in messages of
`message` bytes; each op is timed between barriers, its seconds the slowest rank's."""

from __future__ import annotations

import datetime
import os
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

OPS = ("ring", "broadcast", "all_gather")


def neighbours(rank: int, world: int) -> tuple[int, int]:
    """(the rank this one sends to, the one it receives from): one node further on and back (LOCAL_WORLD_SIZE
    ranks a node), the next rank where the job has one node."""
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    stride = per_node if world > per_node and world % per_node == 0 else 1
    return (rank + stride) % world, (rank - stride) % world


def group(timeout_seconds: float) -> dist.ProcessGroup:
    """A gloo group of every rank, the fabric's own (host memory; a peer tier's copies move on gloo too)."""
    made = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_seconds))
    assert made is not None
    return made


def moves(op: str, nbytes: int, message: int, on: dist.ProcessGroup) -> Callable[[], None]:
    """One pass of `op` over `nbytes` per rank (all_gather: each rank's part nbytes / world) in `message`-byte
    messages, its buffers made and touched first; ranks of unequal bytes all move the largest's messages (a rank
    waiting on a message its neighbour never sends would hang)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    most = torch.tensor([max(1, -(-nbytes // message))], dtype=torch.int64)
    dist.all_reduce(most, op=dist.ReduceOp.MAX, group=on)
    count = int(most[0])
    if op == "ring":
        to, source = neighbours(rank, world)
        out, into = torch.ones(message, dtype=torch.uint8), torch.zeros(message, dtype=torch.uint8)

        def ring() -> None:
            for _ in range(count):
                for work in (dist.isend(out, to, group=on), dist.irecv(into, source, group=on)):
                    assert work is not None
                    work.wait()

        return ring
    if op == "broadcast":
        buffer = torch.ones(message, dtype=torch.uint8)

        def broadcast() -> None:
            for _ in range(count):
                dist.broadcast(buffer, 0, group=on)

        return broadcast
    part = max(1, message // world)
    mine, every = torch.ones(part, dtype=torch.uint8), [torch.zeros(part, dtype=torch.uint8) for _ in range(world)]

    def all_gather() -> None:
        for _ in range(count):
            dist.all_gather(every, mine, group=on)

    return all_gather


def timed(one: Callable[[], None], on: dist.ProcessGroup) -> float:
    """The seconds of one pass between barriers: the slowest rank's (every rank gets the same figure)."""
    dist.barrier(group=on)
    started = time.perf_counter()
    one()
    took = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
    dist.all_reduce(took, op=dist.ReduceOp.MAX, group=on)
    return float(took[0])


def received_bytes(op: str, nbytes: int, message: int, rank: int, world: int) -> int:
    """The bytes `rank` receives in one pass of `op` (a broadcast's root: none)."""
    count = max(1, -(-nbytes // message))
    if op == "all_gather":
        return count * max(1, message // world) * (world - 1)
    return 0 if op == "broadcast" and rank == 0 else count * message
