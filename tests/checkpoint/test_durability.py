"""SIGKILL during save: the final path always holds a complete old or new checkpoint, never a torn one."""

from __future__ import annotations

import os
import pathlib
import pickle
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from gdsbench.checkpoint import durable, load, save

# Executed both here and in the child, so both build identical state dicts for a tag.
MAKE_STATE = """
import torch
def make_state(tag):
    g = torch.Generator().manual_seed(tag)
    layers = [torch.randint(0, 256, (3 << 20,), dtype=torch.uint8, generator=g).view(torch.bfloat16)
              for _ in range(8)]
    return {"tag": tag, "layers": layers, "bias": torch.randn(1001, generator=g)}
"""
namespace: dict = {}
exec(MAKE_STATE, namespace)
make_state = namespace["make_state"]

CHILD = (
    MAKE_STATE
    + """
import sys
from gdsbench.checkpoint import save
path, recycle = sys.argv[1], sys.argv[2] == "recycle"
states = [make_state(1), make_state(2)]
print("ready", flush=True)
i = 0
while True:
    save(states[i % 2], path, recycle=recycle)
    i += 1
"""
)


def _check_complete(path: pathlib.Path) -> int:
    """Load with verification and compare with the state its tag promises; return the tag."""
    out = load(path)
    expect = make_state(out["tag"])
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(out["layers"], expect["layers"]))
    assert torch.equal(out["bias"], expect["bias"])
    return out["tag"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("mode", ["new-file", "recycle"])
def test_sigkill_never_tears_the_final_file(tmp_path: pathlib.Path, seed: int, mode: str) -> None:
    """Kill a child that re-saves 24 MiB in a loop at a random moment; the file stays whole (with
    recycling too, where the child overwrites the previous generation's file in place)."""
    path = tmp_path / "ckpt.pt"
    save(make_state(0), path)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), mode],
        stdout=subprocess.PIPE,
        cwd=pathlib.Path(__file__).resolve().parents[2],
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(random.Random(seed).uniform(0.0, 1.5))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _check_complete(path) in (0, 1, 2)
    spare = pathlib.Path(durable.spare_path(str(path)))
    if spare.exists():  # a whole earlier generation (or, killed between link and rename, the live one)
        assert torch.load(spare, weights_only=True)["tag"] in (0, 1, 2)
    leftovers = [p for p in tmp_path.iterdir() if p not in (path, spare)]
    assert all(p.name.startswith(".ckpt.pt.") and p.name.endswith(durable.TEMP_SUFFIX) for p in leftovers)
    assert sorted(durable.stale_temps(str(path))) == sorted(str(p) for p in leftovers)
    save(make_state(3), path)  # the next save cleans up after the dead one
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt.pt"] + ([spare.name] if spare.exists() else []))
    assert _check_complete(path) == 3


def test_temp_files_of_live_processes_are_kept(tmp_path: pathlib.Path) -> None:
    """A temp file whose pid is alive (a concurrent save) is not removed by another save."""
    path = tmp_path / "c.pt"
    live = tmp_path / f".c.pt.{os.getpid()}.abcd1234{durable.TEMP_SUFFIX}"
    live.write_bytes(b"in progress")
    save({"a": torch.ones(2)}, path)
    assert live.exists()


def test_failed_save_keeps_old_file_and_removes_temp(tmp_path: pathlib.Path) -> None:
    """An exception during save (unpicklable value) leaves the previous checkpoint untouched."""
    path = tmp_path / "c.pt"
    save({"a": torch.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises((pickle.PicklingError, AttributeError)):  # which one depends on where the lambda lives
        save({"a": torch.ones(2), "bad": lambda: 0}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
