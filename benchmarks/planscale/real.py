"""Real gloo runs on this host, for `--validate`: `world` forked ranks (MASTER_ADDR 127.0.0.1,
GLOO_SOCKET_IFNAME=lo) run the same sequences with the same instruments on rank 0 as the model."""

from __future__ import annotations

import os
import pickle
import socket
import sys
import warnings
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh

from .measure import Setup, Timer, freeze_heap, sequence, summarize
from .state import dtensor_state, model_specs


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def real_rank(rank: int, world: int, port: int, setup: Setup, capture: bool) -> None:
    """One rank of a real gloo run: every engine's sequences; rank 0 pickles its figures into setup.base."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        state = dtensor_state(model_specs(setup.layers), mesh, world, rank)
        timers = {engine: Timer() for engine in setup.engines} if rank == 0 else {}
        freeze_heap()
        runs: dict[str, list[Any]] = {engine: [] for engine in setup.engines}
        for rep in range(-1, setup.reps):  # rep -1 warms up (imports, first calls) and is not counted
            for engine in setup.engines:  # interleaved, as in the model
                timer = timers.get(engine)
                if timer is not None:
                    timer.capture = capture and rep == 0
                figures = sequence(engine, state, setup.base / f"real-{engine}-{rep}", timer)
                runs[engine] += [figures] if rep >= 0 else []
                dist.barrier()
        out = {e: {"runs": runs[e], "captured": timers[e].captured if timers else {}} for e in setup.engines}
        if rank == 0:
            (setup.base / "real.pickle").write_bytes(pickle.dumps(out))
    finally:
        dist.destroy_process_group()


def real_run(world: int, setup: Setup, capture: bool = False) -> dict[str, Any]:
    """`world` gloo ranks on this host (loopback only), forked; rank 0's figures (and captures) by engine."""
    setup.base.mkdir(parents=True, exist_ok=True)
    method = "fork" if sys.platform == "linux" else "spawn"
    mp.start_processes(real_rank, args=(world, free_port(), setup, capture), nprocs=world, start_method=method)
    out: dict[str, Any] = pickle.loads((setup.base / "real.pickle").read_bytes())
    return out


def real_rows(world: int, setup: Setup) -> list[dict[str, Any]]:
    """Rows of a real gloo run, as model_rows'."""
    out = real_run(world, replace(setup, base=setup.base / f"real-{world}"))
    return [row for engine in setup.engines for row in summarize(out[engine]["runs"], world, engine, "real")]
