"""The peer tier (`peer://`, issue 39): each rank's checkpoint also held in the RAM of the same local rank on the
next node, moved by torch.distributed (gloo). Real ranks: two torchrun agents (--nnodes=2, a static rendezvous on
127.0.0.1) make two "nodes" of this host, each with its RAM folder in a tmpfs of its own (peer_ranks.py); a node is
lost by SIGKILLing its rank and removing its folder. Every restore is checked exactly, and the ranks must agree on
one step."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ckptio
import pytest
from ckptio import TieredCheckpointer, peers
from ckptio.errors import InvalidLocation, OptionError, UnsupportedLocation
from ckptio.places import peer, place
from ckptio.verify import verify_file

from gdsbench.hosts import free_port

pytestmark = pytest.mark.timeout(300)
REPO = Path(__file__).resolve().parents[2]
LAUNCH_SECONDS = 120


def agents(phase: str, root: Path, *args: str) -> list[subprocess.Popen[str]]:
    """Two torchrun agents (one per "node", a rank each) running peer_ranks PHASE ROOT ARGS."""
    port, made = free_port(), []
    for node in (0, 1):
        argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1"]
        argv += ["--rdzv-backend=static", f"--rdzv-endpoint=127.0.0.1:{port}", f"--node-rank={node}"]
        argv += ["--max-restarts=0", "-m", "tests.checkpoint.peer_ranks", phase, str(root), *args]
        made.append(
            subprocess.Popen(
                argv, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
    return made


def ended(agent: subprocess.Popen[str]) -> str:
    """An agent and its ranks (its session) stopped: SIGTERM, then SIGKILL if they linger; what it printed."""
    os.killpg(agent.pid, signal.SIGTERM)
    try:
        return agent.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        os.killpg(agent.pid, signal.SIGKILL)
        return agent.communicate()[0]


def job(phase: str, root: Path, *args: str) -> list[dict[str, Any]]:
    """Run a phase on both nodes to the end; each rank's result (the phase must succeed)."""
    started = agents(phase, root, *args)
    outputs = [agent.communicate(timeout=LAUNCH_SECONDS)[0] for agent in started]
    assert all(agent.returncode == 0 for agent in started), "\n".join(outputs)[-4000:]
    return [json.loads((root / f"result-{phase}-{rank}.json").read_text()) for rank in (0, 1)]


@pytest.fixture
def ram() -> Iterator[Path]:
    """A folder of this test's own in /dev/shm (a tmpfs), its two nodes' RAM inside."""
    made = Path(tempfile.mkdtemp(prefix="ckptio-test-peer-", dir="/dev/shm"))
    yield made
    shutil.rmtree(made, ignore_errors=True)


def flip(path: Path) -> None:
    """One bit of a file's middle flipped."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def held(root: Path, holder_node: int, holder: int, source: int) -> Path:
    """The folder in which `holder` keeps `source`'s copies."""
    return root / f"node{holder_node}" / f"rank-{holder}" / f"of-rank-{source}"


def test_a_lost_node_restores_from_its_peer_and_every_rank_agrees_on_one_step(ram: Path) -> None:
    saves = job("save", ram, "5,10,15")
    for said in saves:  # durable in memory, with the peer and on disk, each save
        assert [(s["step"], s["durable"], s["errors"]) for s in said["saves"]] == [
            (step, [0, 1, 2], {}) for step in (5, 10, 15)
        ]
    assert sorted(p.name for p in held(ram, 0, 0, 1).iterdir()) == [  # the holder keeps `keep` (2) newest
        "step-000000000010.ckpt",
        "step-000000000015.ckpt",
    ]
    plain = job("restore", ram)
    assert [(r["step"], r["tier"], r["exact"]) for r in plain] == [(15, 0, True), (15, 0, True)]

    shutil.rmtree(ram / "node1")  # node 1 lost: its RAM (its own copies and those it held) gone
    lost = job("restore", ram)
    assert [(r["step"], r["tier"], r["exact"]) for r in lost] == [(15, 0, True), (15, 1, True)]

    flip(held(ram, 0, 0, 1) / "step-000000000015.ckpt")  # the peer's copy damaged: skipped, the disk read
    damaged = job("restore", ram)
    assert [(r["step"], r["tier"], r["exact"]) for r in damaged] == [(15, 0, True), (15, 2, True)]
    assert "checksum mismatch" in damaged[1]["skipped"][-1][2] and damaged[1]["skipped"][-1][:2] == [1, 15]

    (ram / "durable" / "rank1" / "step-000000000015.ckpt").unlink()  # rank 1 can get 15 nowhere: all take 10
    agreed = job("restore", ram)
    assert [(r["step"], r["tier"], r["exact"]) for r in agreed] == [(10, 0, True), (10, 1, True)]


def test_a_restore_beside_a_running_drain_waits_for_it_and_reads_the_newest_step(ram: Path) -> None:
    busy = job("busy", ram)
    assert [(r["draining"], r["step"], r["tier"], r["exact"]) for r in busy] == [(True, 2, 0, True)] * 2
    assert [(r["durable"], r["errors"]) for r in busy] == [([0, 1, 2], {})] * 2  # the drains it met all finished


@pytest.mark.timeout(600)
def test_a_rank_killed_while_replicating_leaves_no_torn_copy_and_its_node_restores(ram: Path) -> None:
    """Rank 1 is SIGKILLed amid saves of 8 MiB each, once its peer holds two (its node then lost); what rank 0
    holds of it all verifies, and the restarted job restores one step both ranks have, rank 1's from its peer."""
    numel, saves = str(2 << 20), 20
    started = agents("loop", ram, str(saves), numel)
    stdout = started[1].stdout
    assert stdout is not None
    pid = None
    deadline = time.monotonic() + LAUNCH_SECONDS
    while pid is None and time.monotonic() < deadline:
        line = stdout.readline()
        if " held " in line and int(line.split(" held ")[1]) >= 2:
            pid = int(line.split(" pid ")[1].split()[0])
    assert pid is not None, "rank 1's peer never held two of its saves"
    os.kill(pid, signal.SIGKILL)
    os.killpg(started[1].pid, signal.SIGKILL)  # its node gone with it: the agent too
    assert started[1].wait(LAUNCH_SECONDS) != 0
    # rank 0 saves on, its exchanges failing: the one in flight when its peer died at most a message's limit (gloo
    # does not end a send whose peer died midway), the later ones at once
    result, killed = ram / "result-loop-0.json", time.monotonic()
    while not result.exists() and time.monotonic() < killed + peers.CHUNK_SECONDS + LAUNCH_SECONDS:
        time.sleep(0.2)
    said = ended(started[0])  # its agent would wait out torchrun's exit barrier for the agent that is gone
    assert result.exists(), f"rank 0 did not finish within {LAUNCH_SECONDS} s of the kill: {said[-3000:]}"
    survivor = json.loads((ram / "result-loop-0.json").read_text())["saves"]
    assert len(survivor) == saves and all(0 in s["durable"] for s in survivor)  # its RAM copies, every one
    lost = [s for s in survivor if 1 not in s["durable"]]  # the peer's copies after the kill: failed, named
    assert lost and all("peer rank 1" in s["errors"]["1"] for s in lost), lost[:2]
    copies = sorted(held(ram, 0, 0, 1).glob("step-*.ckpt"))
    assert copies, "rank 0 held no copy of rank 1's"
    for copy in copies:  # never a torn copy under a checkpoint's name
        verify_file(str(copy))
    shutil.rmtree(ram / "node1")
    restored = job("restore", ram, "no", numel)
    assert all("step" in r for r in restored), restored
    steps = {r["step"] for r in restored}
    assert len(steps) == 1 and [(r["tier"], r["exact"]) for r in restored] == [(0, True), (1, True)]
    assert steps <= {int(c.name[5:17]) for c in copies}


def test_a_peer_location_is_parsed_once_and_is_a_tier_only(ram: Path) -> None:
    where = place(f"peer://{ram}/n0?replicas=2")
    assert isinstance(where, peer.Peer) and (where.path, where.replicas) == (f"{ram}/n0", 2)
    assert where.traits.collective and where.traits.survives == "node" and not where.traits.from_memory
    assert place("peer://run1").path.endswith(f"ckptio-{os.geteuid()}/run1")
    for bad in ("peer://run1?replicas=0", "peer://run1?copies=2", "peer://../x", "peer:///var/tmp/x"):
        with pytest.raises(InvalidLocation):
            place(bad)
    with pytest.raises(UnsupportedLocation, match="a tier of a TieredCheckpointer only"):
        ckptio.save({"x": 1}, f"peer://{ram}/n0")
    with pytest.raises(UnsupportedLocation, match="a tier of a TieredCheckpointer only"):
        ckptio.load(f"peer://{ram}/n0")


def test_a_peer_tier_needs_a_process_group_and_is_never_tier_0(ram: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match=r"torch\.distributed initialised"):
        TieredCheckpointer([str(tmp_path / "a"), f"peer://{ram}/n0"])
    with pytest.raises(OptionError, match="tier 0 must be"):
        TieredCheckpointer([f"peer://{ram}/n0", str(tmp_path / "a")])
