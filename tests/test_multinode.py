"""Distributed checkpoints across "nodes": two torchrun launchers on this host meet at a c10d rendezvous on
127.0.0.1, as two machines would at node0's address, and run the rank program by hand (docs/multi-host.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from gdsbench.runners.checkpoint.distributed import free_port, launcher

pytestmark = [pytest.mark.needs_torch, pytest.mark.timeout(300)]
ROOT = Path(__file__).resolve().parents[1]


def two_nodes(port: int, job: list[str]) -> list[subprocess.CompletedProcess[str]]:
    """Start the same torchrun command twice (node 0 and node 1, one rank each) and wait for both."""
    run_id = f"gdsbench-test-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, *launcher(1, port, nodes=2), *job]
    argv = [a if not a.startswith("--rdzv-id=") else f"--rdzv-id={run_id}" for a in argv]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as folder:  # output to files: a node blocked on a full pipe would stall both
        logs = [(Path(folder) / f"{n}.out", Path(folder) / f"{n}.err") for n in range(2)]
        nodes = []
        for out, err in logs:
            with out.open("w") as stdout, err.open("w") as stderr:
                nodes.append(subprocess.Popen(argv, cwd=ROOT, env=env, stdout=stdout, stderr=stderr, text=True))
        codes = [node.wait(timeout=240) for node in nodes]
        return [
            subprocess.CompletedProcess(argv, code, out.read_text(), err.read_text())
            for code, (out, err) in zip(codes, logs)
        ]


def test_mlperf_geometry_reads_back_what_the_other_node_wrote(tmp_path: Path) -> None:
    """Two "nodes" of one rank each meet over a loopback rendezvous and save their shards into one checkpoint
    (rank 0 reports every rank; the generated workloads are gone afterwards). The MLPerf Storage rules read it back
    on other nodes than wrote it (DLIO's recovery_rank_shift): two checkpoints, then each rank loads what the rank
    on the other node wrote, through DCP, and checks it against that rank's tensors (its own would not match: every
    rank draws its own). dcp_fast only: dcp's two-node run would test torch's own code (issue 18)."""
    path = tmp_path / "ckpt"
    for pattern in ("save", "load"):
        out = tmp_path / pattern
        case = (f"engine=dcp_fast,pattern={pattern},world_size=2,workload=mlperf-llama3-8b,scale=1/8192,"
                "checkpoints=2,threads=2,cache=cold")  # fmt: skip
        done = two_nodes(free_port(), ["--case", case, "--checkpoint", str(path), "--out", str(out), "--warmup", "0"])
        assert all(p.returncode == 0 for p in done), [p.stderr[-2000:] for p in done]
        ranks = json.loads((out / "ranks.json").read_text())
        assert [r["rank"] for r in ranks] == [0, 1] and not any("error" in r for r in ranks)
        assert all(len(r["durations"]) == 2 and r["own_bytes"] > 0 and r["seconds"] > 0 for r in ranks)
        assert not list(Path("/dev/shm").glob("gdsbench-workload.gdsbench-test-*"))
    assert [(r["rank"], r["source_rank"]) for r in ranks] == [(0, 1), (1, 0)]
    assert ranks[0]["cache_note"].startswith("cold") and ranks[1]["cache_note"].startswith("cold")  # each node's own
    assert all((path / f"checkpoint-{i}" / ".metadata").is_file() for i in range(2))
