"""Files written before the library had its own name (gdsbench 0.1's `gdsbench.checkpoint`) keep working.

The fixtures in tests/data/legacy/ were written by that version (commit 22a8b49): `gdsbench-0.1.pt` by
`gdsbench.checkpoint.save({"w": arange(12).reshape(3, 4) float32, "b": [1, 2, 3] int64, "step": 7})`, and
`gdsbench-0.1-dcp/` by `dcp.save({"w", "b"}, storage_writer=gdsbench.checkpoint.Writer(...), no_dist=True)`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.needs_torch

LEGACY = Path(__file__).parent.parent / "data" / "legacy"
W = torch.arange(12, dtype=torch.float32).reshape(3, 4)
B = torch.tensor([1, 2, 3])


def test_a_gdsbench_0_1_file_loads_verified_and_its_index_reads(tmp_path: Path) -> None:
    import ckptio
    from ckptio.inspect import read_index

    path = tmp_path / "old.pt"
    shutil.copy(LEGACY / "gdsbench-0.1.pt", path)
    state = ckptio.load(path)
    assert torch.equal(state["w"], W) and torch.equal(state["b"], B) and state["step"] == 7
    assert {s.nbytes for s in read_index(path).storages} == {48, 24}
    assert torch.equal(torch.load(path, weights_only=True)["w"], W)


def test_a_corrupted_gdsbench_0_1_file_is_still_detected(tmp_path: Path) -> None:
    import ckptio
    from ckptio.errors import CorruptCheckpoint
    from ckptio.inspect import read_index

    path = tmp_path / "old.pt"
    shutil.copy(LEGACY / "gdsbench-0.1.pt", path)
    first = min(read_index(path).storages, key=lambda s: s.offset)
    with path.open("r+b") as f:
        f.seek(first.offset)
        f.write(b"\xff")
    with pytest.raises(CorruptCheckpoint):
        ckptio.load(path)


def test_new_files_carry_the_new_name(tmp_path: Path) -> None:
    import ckptio

    path = tmp_path / "new.pt"
    ckptio.save({"w": W}, path)
    head = path.read_bytes()[:4096]
    assert b"/ckptio/header" in head and b"gdsbench" not in path.read_bytes()


def test_a_gdsbench_0_1_dcp_checkpoint_loads_through_the_reader(tmp_path: Path) -> None:
    import ckptio
    import torch.distributed.checkpoint as dcp

    folder = tmp_path / "old-dcp"
    shutil.copytree(LEGACY / "gdsbench-0.1-dcp", folder)
    state = {"w": torch.zeros(3, 4), "b": torch.zeros(3, dtype=torch.int64)}
    dcp.load(state, storage_reader=ckptio.Reader(folder), no_dist=True)
    assert torch.equal(state["w"], W) and torch.equal(state["b"], B)


def test_temp_files_of_dead_gdsbench_0_1_saves_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    from ckptio import durable, save

    path = tmp_path / "c.pt"
    host, boot = durable._host(), durable._boot_id()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = path.with_name(f".c.pt.{host}.{boot}.{int(dead.stdout)}.123.abcd1234.gdsbench-tmp")
    live = path.with_name(f".c.pt.{host}.{boot}.{os.getpid()}.{durable._start_time(os.getpid())}.ab.gdsbench-tmp")
    for p in (gone, live):
        p.write_bytes(b"in progress")
    save({"a": torch.ones(2)}, path)
    assert live.exists() and not gone.exists()


def test_the_old_environment_prefix_is_read_and_the_new_one_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    from ckptio import IOOptions
    from ckptio.errors import OptionError

    monkeypatch.setenv("GDSBENCH_IO_THREADS", "5")
    assert IOOptions().threads == 5
    monkeypatch.setenv("CKPTIO_THREADS", "6")
    assert IOOptions().threads == 6
    monkeypatch.delenv("CKPTIO_THREADS")
    monkeypatch.setenv("GDSBENCH_IO_THREADS", "lots")
    with pytest.raises(OptionError, match="GDSBENCH_IO_THREADS='lots'"):
        IOOptions()
