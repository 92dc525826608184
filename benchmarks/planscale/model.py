"""N ranks modelled in one process. Rank 0 is real: it runs the public `dcp.save`/`dcp.load` with real DTensors
(their mesh coordinates come from torch's fake process group, as rank 0 of N), a real
`DefaultSavePlanner`/`DefaultLoadPlanner` and a real storage writer/reader that writes and reads its own shard
in a real directory. Only DCP's collectives are replaced: `_DistWrapper`, the one object through which
`_save_state_dict`/`_load_state_dict` talk to other ranks, becomes `ModelDist`, whose gather/scatter/broadcast
give rank 0 what N-1 peers would send (`Peers`). Every run checks that rank 0's real plans equal what `Peers`
builds for rank 0, and once per world size that real DTensors at ranks 1, N/2 and N-1 (fake process groups as
those ranks) plan exactly what `Peers` builds for them. So all the coordinator runs is DCP's and the storage
layer's real code, fed what N ranks would feed it. Running `dcp.save` on the fake process group alone was
rejected: its gather/scatter carry no data, so rank 0 would never plan over N ranks' plans.

What it leaves out: the network (the gather of N plans and N WriteResults into rank 0, the scatter, and the
broadcast of the global metadata to every rank after each commit, N times the metadata), rank 0's pickling for
the scatter and the broadcast, waiting for the slowest rank, the peers' own local planning (in parallel with
rank 0's, as costly), the latency of opening N files on a parallel file system (here local and cached), and
the data I/O.

Private torch APIs: `torch.distributed.checkpoint.state_dict_saver._DistWrapper` and
`state_dict_loader._DistWrapper` (patched), `torch.distributed.checkpoint.utils._DistWrapper` (subclassed).
"""

from __future__ import annotations

import contextlib
import shutil
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import state_dict_loader, state_dict_saver
from torch.distributed.checkpoint.utils import _DistWrapper

from .measure import Setup, Timer, sequence, summarize
from .peers import Peers, check_equal, samples
from .state import dtensor_state, fake_group, model_specs


class ModelDist(_DistWrapper):
    """DCP's view of the process group from rank 0 of N: the collectives go through `Peers`."""

    def __init__(self, peers: Peers) -> None:  # no super().__init__: there is no process group to ask
        self.group = None
        self.use_dist = True
        self.coordinator_rank = 0
        self.global_coordinator_rank = 0
        self.rank = 0
        self.is_coordinator = True
        self.peers = peers

    def get_world_size(self) -> int:
        """N."""
        return self.peers.world

    def gather_object(self, object: Any) -> list[Any]:
        """Rank 0 receives every rank's object."""
        return self.peers.gather(object)

    def scatter_object(self, object_list: list[Any] | None) -> Any:
        """Rank 0 sends every rank its object and keeps its own."""
        assert object_list is not None
        return self.peers.scatter(object_list)

    def broadcast_object(self, object: Any) -> Any:
        """Rank 0 sends its object to every rank."""
        return self.peers.broadcast(object)

    def all_gather_object(self, object: Any) -> list[Any]:
        """The load's read step: every rank's (empty) result."""
        return [object] * self.peers.world

    def barrier(self) -> None:
        """Nothing to wait for."""


@contextlib.contextmanager
def modelled(peers: Peers) -> Iterator[None]:
    """DCP's save and load talk to `peers` instead of a process group."""
    make = lambda *args, **kwargs: ModelDist(peers)  # noqa: E731
    saved = state_dict_saver._DistWrapper, state_dict_loader._DistWrapper
    state_dict_saver._DistWrapper = state_dict_loader._DistWrapper = make  # type: ignore[assignment, misc]
    try:
        yield
    finally:
        state_dict_saver._DistWrapper, state_dict_loader._DistWrapper = saved  # type: ignore[misc]


def check_peers(peers: Peers) -> None:
    """Real DTensors at sampled ranks plan exactly the save and load plans `peers` built for them."""
    world = peers.world
    for rank in sorted(samples(world)):
        with fake_group(world, rank) as mesh:
            state = dtensor_state(peers.specs, mesh, world, rank)
            planner = dcp.DefaultSavePlanner()
            planner.set_up_planner(state, None, False)
            check_equal(planner.create_local_plan(), peers.save_plan(rank), f"rank {rank}'s save plan")
            loader = dcp.DefaultLoadPlanner()
            loader.set_up_planner(dict(sorted(state.items())), peers.metadata, False)
            built = peers.load_plan(rank, peers.final[rank])
            check_equal(loader.create_local_plan(), built, f"rank {rank}'s load plan")


def model_rows(world: int, setup: Setup) -> list[dict[str, Any]]:
    """The model at `world` ranks, engines interleaved (a busy spell hits both); then its peers checked."""
    specs = model_specs(setup.layers)
    peers = {engine: Peers(engine, world, specs) for engine in setup.engines}
    runs: dict[str, list[dict[str, dict[str, float]]]] = {engine: [] for engine in setup.engines}
    started = time.perf_counter()
    with fake_group(world) as mesh, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state, timer = dtensor_state(specs, mesh, world, 0), Timer()
        for rep in range(setup.reps):
            if rep and time.perf_counter() - started > setup.budget:
                break
            for engine in setup.engines:
                directory = setup.base / f"model-{engine}-{world}-{rep}"
                with modelled(peers[engine]):
                    runs[engine].append(sequence(engine, state, directory, timer, peers[engine]))
                shutil.rmtree(directory, ignore_errors=True)
    check_peers(peers[setup.engines[0]])
    return [row for engine in setup.engines for row in summarize(runs[engine], world, engine, "model")]
