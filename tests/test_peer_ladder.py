"""The memory-first ladder on ranks (issue 39, part 3), for real: two "nodes" of this host (torchrun, --nnodes=2,
gloo), the collective engine's fabric ceiling, and tiered_ranks' training loop through ckptio's [memory, peer] and
[memory, peer, local] with a node lost after it; its rows carry the same-run references, and the report's ladder
restores a lost node from the peer."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from gdsbench import results
from gdsbench.cli import cli
from gdsbench.report import ladder as model
from gdsbench.runners import get
from gdsbench.runners.s3_client import Bucket
from tests.ceph_cluster import ceph_cluster, radosgw  # noqa: F401

pytest.importorskip("torch", reason="the ranks run torch.distributed")
pytest.importorskip("ckptio", reason="tiered_ranks saves with ckptio")
from gdsbench.runners.checkpoint.ranks import fabric  # (imports torch)

pytestmark = pytest.mark.timeout(600)
#: What both tiered_ranks blocks share: 8 MiB of llama3-8b on 2 ranks, a checkpoint every 5 steps of 20 ms.
LADDER = {
    "engine": ["tiered_ranks"],
    "pattern": ["train"],
    "transfer": ["CPU_CACHED"],
    "world_size": [2],
    "checkpoint_size": ["8M"],
    "memory": ["as-is"],
    "step_time": ["20ms"],
    "interval": [5],
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    """One sweep: the collective ring and broadcast (32 MiB per rank), then both peer ladders (8 MiB of llama3-8b,
    10 steps of 20 ms, a checkpoint every 5), on two local nodes of one rank each."""
    folder = tmp_path_factory.mktemp("peers")
    document = {
        "name": "peers",
        "directory": str(folder / "target"),
        "allow_root_filesystem": True,
        "repetitions": 1,
        "launcher": {"name": "torchrun", "nodes": 2},
        "matrix": [
            {
                "engine": ["collective"],
                "pattern": ["exchange"],
                "transfer": ["CPU_CACHED"],
                "world_size": [2],
                "checkpoint_size": ["32M"],
                "io_size": ["4M"],
                "op": ["ring", "broadcast"],
                "passes": [3],
            },
            {
                **LADDER,
                "steps": [10],
                "tiers": [["memory"], ["memory", "peer"], ["memory", "peer", "local"]],
                "async": [True],
            },
            {**LADDER, "steps": [5], "tiers": [["memory", "peer", "local"]], "peer_fault": ["corrupt_peer"]},
            # 64 MiB a rank, in 4 messages: the holder is killed while one lands; the ranks' bytes differ (the ring
            # reference moves the largest's messages on every rank)
            {
                **LADDER,
                "checkpoint_size": ["128M"],
                "steps": [5],
                "tiers": [["memory", "peer"]],
                "peer_fault": ["kill_replicating"],
            },
        ],
    }
    config = folder / "peers.yaml"
    config.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(cli, ["sweep", str(config), "-o", str(folder / "out")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [csv] = (folder / "out").glob("peers-*.csv")
    return results.load([csv])


def test_the_collective_engine_measures_the_fabric_it_says(rows: pd.DataFrame) -> None:
    found = rows[rows["engine"] == "collective"].set_index("op")
    assert list(found["status"]) == ["ok", "ok"] and set(found["nodes"]) == {2}
    ring, broadcast = found.loc["ring"], found.loc["broadcast"]
    assert ring["bytes"] == 2 * (32 << 20)  # both ranks receive their neighbour's 32 MiB
    assert broadcast["bytes"] == 32 << 20  # the root receives nothing
    assert ring["bw_bytes"] == pytest.approx(ring["bytes"] / ring["seconds"])
    assert ring["rank_bw_bytes"] == pytest.approx((32 << 20) / ring["seconds"])
    assert ring["cpu_seconds"] > 0 and ring["passes_spread"] >= 1
    assert "median of 3 passes" in ring["note"]


def test_a_peer_ladder_restores_a_lost_node_from_its_peer_beside_its_references(rows: pd.DataFrame) -> None:
    plain = rows[(rows["engine"] == "tiered_ranks") & (rows["peer_fault"] == "none") & (rows["tiers"] != "memory")]
    found = plain.set_index("tiers")
    assert list(found["status"]) == ["ok", "ok"], found["error"].tolist()
    for _, row in found.iterrows():
        assert row["durable_local_seconds"] < row["durable_peer_seconds"]  # the RAM copy first, then the peer's
        assert row["replicate_seconds"] > 0 and row["ring_seconds"] > 0 and row["host_copy_seconds"] > 0
        assert row["replicate_vs_ring"] == pytest.approx(row["replicate_seconds"] / row["ring_seconds"])
        assert row["replicate_idle_seconds"] > 0 and row["replicate_idle_vs_ring"] > 0  # the same, nothing else running
        assert row["restore_peer_seconds"] > 0 and row["restore_local_seconds"] > 0
        assert "node 1 lost" in row["note"] and "restored from their peers" in row["note"]
        assert pd.isna(row["tier_errors"]) and row["restored_tier"] == "rank 0: tier 0, rank 1: tier 1"
    assert pd.isna(found.loc["memory+peer", "durable_disk_seconds"])
    assert pd.isna(found.loc["memory+peer", "restore_disk_seconds"])
    disk = found.loc["memory+peer+local"]
    assert (
        disk["durable_disk_seconds"] >= disk["durable_peer_seconds"] and disk["seconds"] == disk["durable_disk_seconds"]
    )
    assert disk["restore_disk_seconds"] > 0  # every node's RAM lost: every rank read its folder, exactly
    assert "then every node's RAM lost, every rank restored from local" in disk["note"]


def test_ram_alone_on_the_same_ranks_is_the_peer_ladders_reference(rows: pd.DataFrame) -> None:
    [alone] = rows[(rows["engine"] == "tiered_ranks") & (rows["tiers"] == "memory")].to_dict("records")
    assert alone["status"] == "ok", alone["error"]
    assert alone["restored_tier"] == "rank 0: tier 0, rank 1: tier 0" and "from its own RAM" in alone["note"]
    assert pd.isna(alone["durable_peer_seconds"]) and pd.isna(alone["restore_peer_seconds"])
    assert alone["loop_seconds"] > 0 and alone["ring_seconds"] > 0  # the same references as the peer rows
    table = model.ladders(rows).drop_duplicates("engine")
    table = table[~table["engine"].str.contains("corrupt_peer|kill_replicating")].set_index("tiers")
    peers = table.loc["memory+peer"]
    assert peers["loop_vs_memory"] == pytest.approx(peers["loop_seconds"] / table.loc["memory", "loop_seconds"])
    assert table.loc["memory", "loop_vs_memory"] == 1.0
    assert math.isnan(table.loc["memory", "goodput"])  # RAM alone outlives no node loss
    killed = model.ladders(rows)
    killed = killed[killed["engine"].str.contains("kill_replicating")]
    assert killed["loop_vs_memory"].isna().all()  # 128M a checkpoint: no [memory] row of that loop in the run


def test_a_damaged_peer_copy_is_skipped_by_its_checksum_and_the_disk_read(rows: pd.DataFrame) -> None:
    [row] = rows[rows["peer_fault"] == "corrupt_peer"].to_dict("records")
    assert row["status"] == "ok", row["error"]
    assert row["restored_tier"] == "rank 0: tier 0, rank 1: tier 2"
    assert "rank 1 tier 1 step 5" in row["skipped_reason"] and "checksum mismatch" in row["skipped_reason"]
    assert row["fault_expected"].startswith("the lost node's ranks skip their peers' damaged copies")


def test_a_rank_killed_while_a_copy_lands_keeps_no_torn_copy_and_every_rank_restores_one_step(
    rows: pd.DataFrame,
) -> None:
    """The holder of rank 1's copies SIGKILLed once bytes of the newest copy landed, then node 1 lost: the torn copy
    never used, both ranks restore the step before (rank 1 from its peer's verified copy), exactly."""
    [row] = rows[rows["peer_fault"] == "kill_replicating"].to_dict("records")
    assert row["status"] == "ok", row["error"]
    assert (row["kills_made"], row["torn_seen"], row["state_exact"]) == (1, 0, "yes")
    assert row["restored_tier"] == "rank 0: tier 0, rank 1: tier 1"
    assert "rank 0 SIGKILLed receiving rank 1's step 15" in row["note"]
    assert "every rank restored step 10" in row["note"] and "2 copies its peers kept verified" in row["note"]
    assert row["restore_peer_seconds"] > 0 and row["ring_seconds"] > 0  # the loop's references kept beside it
    assert row["fault_expected"].startswith("the rank killed while it received")


def test_the_report_s_fault_table_holds_the_peer_fault(rows: pd.DataFrame) -> None:
    from gdsbench.report import summary

    table = summary.build(rows, ["engine", "pattern"]).table("faults")
    assert table is not None
    cells = {c["fault"]: c for c in (dict(zip(table.header, r)) for r in table.rows)}
    assert sorted(cells) == ["corrupt_peer", "kill_replicating"]
    assert all((c["engine"], c["held"], c["exact"]) == ("tiered_ranks", "ok", "yes") for c in cells.values())
    assert "checksum mismatch" in cells["corrupt_peer"]["found"]


def test_the_report_models_a_lost_node_restored_from_the_peer(rows: pd.DataFrame) -> None:
    table = model.ladders(rows)
    faulted = table["engine"].str.contains("corrupt_peer|kill_replicating")
    peers = table[table["engine"].str.startswith("tiered_ranks") & ~faulted]
    with_peer = peers[peers["tiers"] != "memory"]
    assert sorted(with_peer["tiers"]) == ["memory+peer", "memory+peer+local"]
    assert with_peer["goodput"].between(0, 1).all()
    header, cells = model.ladder_rows(table)
    assert {"durable peer s", "restore peer s", "durable disk s", "restore disk s"} <= set(header)
    shown = [dict(zip(header, row)) for row in cells if row[header.index("engine")].startswith("tiered_ranks")]
    assert {row["tiers"] for row in shown} == {"memory", "memory+peer", "memory+peer+local"}
    assert all(row["restore peer s"] != "-" for row in shown if "peer" in row["tiers"])
    plain = [row for row in shown if not any(f in row["engine"] for f in ("corrupt_peer", "kill_replicating"))]
    assert all(row["loop vs memory"] != "-" for row in plain)  # the fault rows run loops of their own: none
    several = model.ladders(rows, [(86400.0, 604800.0, 90 * 86400.0)])  # several nodes lost: no RAM copy outlives them
    assert several[several["engine"].str.startswith("tiered_ranks")]["goodput"].isna().all()


@pytest.mark.slow
def test_memory_peer_s3_restores_a_lost_node_from_its_peer_and_every_node_from_s3(
    radosgw: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """[memory, peer, s3] on two nodes: a lost node from its peer, then every node's RAM lost and every rank's state
    read back from S3, exactly; the run's prefix gone after it; the report models three failure levels."""
    bucket = "gdsbench-peers-s3"
    document = {
        "name": "peers-s3",
        "directory": str(tmp_path / "target"),
        "allow_root_filesystem": True,
        "repetitions": 1,
        "bucket": bucket,
        "launcher": {"name": "torchrun", "nodes": 2},
        "matrix": [{**LADDER, "steps": [10], "tiers": [["memory", "peer", "s3"]], "async": [True]}],
    }
    config = tmp_path / "peers-s3.yaml"
    config.write_text(yaml.safe_dump(document))
    result = CliRunner().invoke(cli, ["sweep", str(config), "-o", str(tmp_path / "out")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    [row] = results.load(list((tmp_path / "out").glob("peers-s3-*.csv"))).to_dict("records")
    assert row["status"] == "ok", row["error"]
    assert row["restored_tier"] == "rank 0: tier 0, rank 1: tier 1"
    assert row["durable_object_seconds"] >= row["durable_peer_seconds"] > row["durable_local_seconds"]
    assert row["restore_object_seconds"] > 0 and "every rank restored from s3" in row["note"]
    assert row["work_at_risk_steps"] >= 0  # steps since the newest one in S3, at each checkpoint
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]  # the ranks had it in their environment: no file of the run holds it
    assert not [f for f in (tmp_path / "out").rglob("*") if f.is_file() and secret in f.read_text(errors="replace")]
    assert not list(Path("/dev/shm").glob("tiered_ranks.*"))  # the RAM folders were in the run's private one
    store = Bucket(os.environ["AWS_ENDPOINT_URL"], bucket, "us-east-1", 16 << 20)
    assert not store.exists() or store.sizes("gdsbench/") == {}  # the run's prefix (and the bucket it made) removed
    frame = pd.DataFrame([row])
    table = model.ladders(frame, [(86400.0, 604800.0, 90 * 86400.0)])
    assert list(table["tiers"]) == ["memory+peer+s3"] and table["goodput"].between(0, 1).all()


def test_a_ladder_without_a_peer_or_one_node_is_refused_with_why(tmp_path: Path) -> None:
    from gdsbench import config as configs
    from gdsbench.launchers import Launch
    from gdsbench.runners.base import RunContext

    matrix = {"engine": ["tiered_ranks"], "pattern": ["train"], "transfer": ["CPU_CACHED"], "world_size": [2]}
    one, peer = (
        configs.from_dict({"matrix": {**matrix, "tiers": [tiers]}}, "t.yaml").cases[0]
        for tiers in (["memory", "s3"], ["memory", "peer"])
    )
    ctx = RunContext(directory=tmp_path, file_size=1 << 20, launch=Launch("torchrun", 1))
    assert "ladders with a peer tier" in str(get("tiered_ranks").cannot_run(one, ctx))
    assert "two nodes or more" in str(get("tiered_ranks").cannot_run(peer, ctx))
    assert "engine tiered_ranks" in str(get("tiered").cannot_run(peer, ctx))


def test_the_fabric_counts_what_each_rank_receives() -> None:
    assert fabric.received_bytes("ring", 10 << 20, 4 << 20, 0, 2) == 12 << 20  # three whole messages
    assert fabric.received_bytes("broadcast", 8 << 20, 4 << 20, 0, 4) == 0
    assert fabric.received_bytes("broadcast", 8 << 20, 4 << 20, 3, 4) == 8 << 20
    assert fabric.received_bytes("all_gather", 8 << 20, 4 << 20, 1, 4) == 2 * (1 << 20) * 3
    assert json.dumps(fabric.OPS) == '["ring", "broadcast", "all_gather"]'


def test_the_ring_reference_moves_the_peer_tier_s_own_messages() -> None:
    from ckptio import peers

    from gdsbench.runners.checkpoint.ranks import peer_ladder

    assert peer_ladder.MESSAGE == peers.CHUNK_BYTES
