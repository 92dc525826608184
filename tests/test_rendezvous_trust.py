"""A local user who binds a distributed sweep's rendezvous port first, or who answers as its store, gets nothing:
the launch fails naming the held port and never connects to it (torchrun's static rendezvous, rank 0 binding the
address itself under srun and mpirun), and a rank that reaches a store without its launch's proof refuses it.
For real: torchrun, the rank program and torch's TCPStore on 127.0.0.1."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdsbench.launchers import new_secret
from gdsbench.launchers.base import SECRET_VARIABLE
from tests.helpers import data_rows
from tests.test_launch_sweeps import launch_config

pytestmark = [pytest.mark.needs_torch, pytest.mark.timeout(240)]
ROOT = Path(__file__).resolve().parents[1]
CASE = "engine=dcp_fast,pattern=save,world_size=2,checkpoint_size=1M"


class Squatter:
    """Another user's listener on a port: counts who connects to it."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen()
        self.socket.settimeout(0.2)
        self.port, self.connections, self.stop = self.socket.getsockname()[1], 0, threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.socket.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.socket.close()


@pytest.fixture
def squatter() -> Iterator[Squatter]:
    held = Squatter()
    yield held
    held.close()


def rank_program(tmp_path: Path, rank: int, port: int, secret: str, timeout: float = 20) -> subprocess.CompletedProcess:
    """One rank of two as mpirun would start it, meeting at 127.0.0.1:`port` under `secret`."""
    env = {
        **os.environ,
        "OMPI_COMM_WORLD_RANK": str(rank),
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": str(rank),
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
        SECRET_VARIABLE: secret,
    }
    argv = [
        sys.executable,
        "-m",
        "gdsbench.cli_rank",
        "--case",
        CASE,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--out",
        str(tmp_path / "out"),
        "--rendezvous",
        f"127.0.0.1:{port}",
        "--join-timeout",
        "5",
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 60, cwd=ROOT, env=env)


def test_a_held_rendezvous_port_is_a_failed_row_naming_it_and_nothing_connects(tmp_path, squatter):
    """The default launcher (torchrun on 127.0.0.1) on a port someone else listens on: the agent binds it or fails;
    it never becomes a client of the squatter (torch's c10d backend would, and unpickle what it is sent)."""
    matrix = {"engine": ["dcp_fast"], "pattern": ["save"], "world_size": [2], "checkpoint_size": ["1M"]}
    config = launch_config(tmp_path, {"name": "local", "port": squatter.port}, matrix, checks=[])
    done = subprocess.run(
        [sys.executable, "-m", "gdsbench", "sweep", str(config), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=200,
        cwd=ROOT,
    )
    [csv_path] = (tmp_path / "out").glob("*.csv")
    [row] = data_rows(csv_path)
    assert done.returncode == 1 and row["status"] == "failed", done.stderr[-2000:]
    assert f"the rendezvous port ({squatter.port}) is held by another process: refused" in row["error"], row["error"]
    assert squatter.connections == 0


def test_rank_0_binds_the_rendezvous_itself_and_a_held_port_is_named(tmp_path, squatter):
    done = rank_program(tmp_path, 0, squatter.port, new_secret())
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().endswith(
        f"rank 0: rendezvous port 127.0.0.1:{squatter.port} is held by another process (Address already in use): "
        "refused, never connected"
    ), done.stderr[-2000:]
    assert squatter.connections == 0


def test_a_store_without_the_launchs_proof_is_refused_before_any_use(tmp_path):
    """An impostor store (a real TCPStore someone else runs, answering the key a rank asks for with what it likes):
    rank 1 reads the proof, finds it wrong and leaves, naming the store."""
    import torch.distributed as dist

    from gdsbench.runners.checkpoint.ranks.join import PROOF_KEY, namespace

    secret = new_secret()
    impostor = dist.TCPStore("127.0.0.1", 0, 2, True, datetime.timedelta(seconds=30), wait_for_workers=False)
    # the impostor sees which key is asked for (it is the server); it cannot make the proof without the secret
    dist.PrefixStore(namespace(secret), impostor).set(PROOF_KEY, b"0" * 64)
    done = rank_program(tmp_path, 1, impostor.port, secret)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().endswith(
        f"rank 1: the store at 127.0.0.1:{impostor.port} is not this launch's (its proof does not match): refused"
    ), done.stderr[-2000:]
    assert not (tmp_path / "ckpt").exists()


def test_two_ranks_under_one_secret_meet_and_their_keys_are_only_under_its_namespace(tmp_path):
    """The launch's keys live under a namespace derived from the secret: a client of the same store that knows
    torch's key names finds none of them there (a store cannot be listed), and the proof is not the namespace."""
    from gdsbench.runners.checkpoint.ranks.join import namespace, proof

    secret = new_secret()
    assert secret not in namespace(secret) and namespace(secret).encode() != proof(secret)
    assert namespace(secret) != namespace(new_secret()) and len(secret) == 64
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", JOIN_AND_REPORT, str(rank), str(port)],
            cwd=ROOT,
            env={**os.environ, SECRET_VARIABLE: secret, "SECRET_AGAIN": secret},
            stdout=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    said = [rank.communicate(timeout=120)[0].split() for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0]
    assert said == [["2", "True", "False"], ["2", "True", "False"]]  # joined; the keys only under the namespace


JOIN_AND_REPORT = """
import datetime, os, sys
import torch.distributed as dist
rank, port = int(sys.argv[1]), int(sys.argv[2])
os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
from gdsbench.runners.checkpoint.ranks import join
join.join("gloo", datetime.timedelta(seconds=60))
outsider = dist.TCPStore("127.0.0.1", port, 2, False, datetime.timedelta(seconds=5))
dist.barrier()
named = join.namespace(os.environ.get("SECRET_AGAIN", "")) + "/" + join.PROOF_KEY
print(dist.get_world_size(), outsider.check([named]), outsider.check([join.PROOF_KEY]))
dist.barrier()
dist.destroy_process_group()
"""
