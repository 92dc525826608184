"""The DCP storage layer across real ranks (gloo on 127.0.0.1): round trips, resharding 4 -> 2 -> 1 -> 4,
dedup balance, plan caching and broadcast loads."""

from __future__ import annotations

import importlib.util
import json
import statistics
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ceph_cluster import ceph_cluster  # noqa: F401  (asked for by object_store)
from tests.checkpoint.s3_bucket import own_bucket

from . import dcp_ranks

pytestmark = [pytest.mark.timeout(300)]


def facts(path: Path, name: str) -> dict:
    """A rank's figures, left beside the checkpoint by the rank program."""
    return json.loads((path.parent / f"{path.name}.{name}.json").read_text())


@pytest.fixture(scope="module")
def object_store(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]] | None]:
    """A location in a bucket of the test cluster's radosgw and the environment that reaches it; None where there
    is none (no root, no radosgw, no ckptio[s3]): the object-store steps are then left out, the rest runs."""
    try:
        cluster: Any = request.getfixturevalue("ceph_cluster")
    except pytest.skip.Exception:
        cluster = None
    if cluster is None or not cluster.s3_endpoint or importlib.util.find_spec("awscrt") is None:
        yield None
        return
    with own_bucket(cluster, "ckptio-ranks") as name:
        yield f"s3://{name}/ranks", cluster.env()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory, object_store: tuple[str, dict[str, str]] | None) -> Path:
    """One start-up of 4 processes (torch, DCP, gloo) for every check below; each program asserts what it checks,
    the tests read the figures it left. First a world of 4 ranks, each program on the group of its first N:
    - reshard, per codec: saved by 4 ranks; loaded bit-exact by 2, 1 and 4 ranks; saved by 2, loaded by 4
      (Shard(0) with uneven shards, Replicate(), plain tensors, step counter, RNG state);
    - broadcast: written by 2 ranks, loaded by 4 without, then with broadcast;
    - the plan cache: two saves of an unchanged structure at 4 ranks;
    - dedup: many replicated tensors saved by 4 ranks.
    Then a world of 2 (a fresh default group of the first 2 processes) for the async checks, in turn, as one
    training process meets them: back-to-back async saves on the process executor then a load; a training loop's
    async saves beside its main-thread collectives, each awaited before the next, then overlapping (a hang fails
    the whole start-up at its timeout); where the test cluster has radosgw, two saves to an object store and a
    load."""
    root = tmp_path_factory.mktemp("ranks")
    save, load = dcp_ranks.save_program, dcp_ranks.load_program
    steps: list[dcp_ranks.Step] = []
    for compression in ("none", "blosc"):
        four, two = root / f"four-{compression}", root / f"two-{compression}"
        steps += [
            (save, 4, (str(four), compression, 0)),
            *((load, world_size, (str(four), 0, False)) for world_size in (2, 1, 4)),
            (save, 2, (str(two), compression, 1)),
            (load, 4, (str(two), 1, False)),
        ]
    shared = root / "broadcast"
    steps += [
        (save, 2, (str(shared), "none", 4)),
        (load, 4, (str(shared), 4, False)),
        (dcp_ranks.note_reads, 4, (str(shared),)),
        (load, 4, (str(shared), 4, True)),
    ]
    steps += [
        (dcp_ranks.caching_program, 4, (str(root / "cached"),)),
        (dcp_ranks.replicated_program, 4, (str(root / "replicated"),)),
    ]
    two = [
        (dcp_ranks.async_program, 2, (str(root / "process"), 7, "process")),
        (dcp_ranks.load_program, 2, (str(root / "process"), 7, False)),
        *(
            (dcp_ranks.training_loop_program, 2, (str(root / f"loop-{overlap}"), 5, overlap))
            for overlap in (False, True)
        ),
    ]
    if object_store is not None:
        two.append((dcp_ranks.s3_program, 2, (*object_store, str(root / "s3.json"))))
    dcp_ranks.run_worlds([(4, steps), (2, two)])
    return root


@pytest.mark.parametrize("compression", ["none", "blosc"])
def test_save_at_four_reshard_to_two_and_one_and_back(worlds: Path, compression: str) -> None:
    """Every load of the reshard steps was checked bit-exact on its ranks; every one of 4 ranks wrote its own
    share into a data file of its own."""
    four = worlds / f"four-{compression}"
    written = [facts(four, f"save-r{r}")["stored"] for r in range(4)]
    assert facts(four, "save-r0")["ranks"] == written and all(written)
    assert len([p for p in four.iterdir() if p.suffix == ".data"]) == 4
    assert len([p for p in (worlds / f"two-{compression}").iterdir() if p.suffix == ".data"]) == 2


def test_broadcast_load_reads_shared_items_once(worlds: Path) -> None:
    """A checkpoint written by 2 ranks loads at 4 ranks; with broadcast, an item every rank needs is read from
    storage by one rank: the ranks together read less, and the result is the same."""
    path = worlds / "broadcast"
    each = sum(facts(path, f"reads-r{r}")["read"] for r in range(4))
    shared = sum(facts(path, f"load-r{r}")["read"] for r in range(4))
    assert shared < each


def test_plan_cache_skips_planning_on_the_second_save(worlds: Path) -> None:
    """The coordinator found none of the first save's plans in DCP's plan cache, and every one of the second's."""
    assert facts(worlds / "cached", "plans") == {"first": 0, "cached": 4, "plans": 4}


def test_replicated_tensors_are_written_once_spread_over_ranks(worlds: Path) -> None:
    """No rank writes more than 1.5x the mean of the deduplicated bytes."""
    ranks = facts(worlds / "replicated", "rank-bytes")["ranks"]
    assert len(ranks) == 4 and max(ranks) <= 1.5 * statistics.mean(ranks), ranks


def test_back_to_back_async_saves_on_the_process_executor_keep_the_second(worlds: Path) -> None:
    """DCP's process executor writes from another process, where the Writer cannot see when its staged buffers
    are free: a second save started before the first is awaited must neither fail nor overwrite them (both
    ranks loaded the second state, checked bit-exact)."""
    assert all(facts(worlds / "process", f"load-r{r}")["read"] > 0 for r in range(2))


@pytest.mark.parametrize("overlap", [False, True])
def test_async_saves_beside_main_thread_collectives_do_not_deadlock(worlds: Path, overlap: bool) -> None:
    """dcp.async_save(sd, storage_writer=Writer(d)) then dist.barrier()/all_reduce on the main thread, step
    after step: the Writer's background collectives run on a group of its own, never the caller's (before
    the fix: a hang in 4 of 4 runs). With `overlap` the next save starts before the previous is awaited; the
    last state then loaded whole on both ranks."""
    assert all(facts(worlds / f"loop-{overlap}", f"load-r{r}")["read"] > 0 for r in range(2))


def test_two_ranks_save_to_an_object_store_and_the_next_commit_replaces_the_objects(
    worlds: Path, object_store: tuple[str, dict[str, str]] | None
) -> None:
    """Each rank uploads one data object of its own; the coordinator commits `.metadata` over both (the load at 2
    ranks was checked bit-exact); the second save's commit deleted the first save's objects."""
    if object_store is None:
        pytest.skip("no radosgw in the test cluster here (or no ckptio[s3])")
    first, second = json.loads((worlds / "s3.json").read_text())
    for listed in (first, second):
        assert listed[0] == ".metadata" and sorted(n[-8:] for n in listed[1:]) == ["-r0.data", "-r1.data"]
    assert not set(first[1:]) & set(second[1:])
