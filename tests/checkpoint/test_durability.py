"""SIGKILL during save: the final path always holds a complete old or new checkpoint, never a torn one."""

from __future__ import annotations

import os
import pathlib
import pickle
import subprocess
import sys
import time

import pytest
import torch
from ckptio import durable, load, save

from tests.helpers import kill_when_busy, start_program

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
from ckptio import Checkpointer
path, recycle = sys.argv[1], sys.argv[2] == "recycle"
states = [make_state(1), make_state(2)]
ckpt = Checkpointer(path, recycle=recycle)
ready()
i = 0
while True:
    ckpt.save(states[i % 2])
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
    kill_when_busy(CHILD, [str(path), mode], seed, (0.0, 1.5))
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


def _temp_name(path: pathlib.Path, host: str, boot: str, pid: int | str, start: str) -> pathlib.Path:
    """A temp file name as a save by that writer would make it."""
    return path.with_name(f".{path.name}.{host}.{boot}.{pid}.{start}.abcd1234{durable.TEMP_SUFFIX}")


def test_temp_files_are_removed_only_when_their_writer_is_provably_gone(tmp_path: pathlib.Path) -> None:
    """Kept: a live writer's, another host's, one from unparsable names. Removed: a dead pid's, and a
    reused pid's (alive, but with another start time)."""
    path = tmp_path / "c.pt"
    host, boot = durable._host(), durable._boot_id()
    me = os.getpid()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    kept = [
        pathlib.Path(durable.temp_path(str(path))),  # this live process
        _temp_name(path, "other-host.example", boot, me, "1"),  # another host on a shared file system
        _temp_name(path, host, "0ldb00t0", int(dead.stdout), "1"),  # another boot: cannot tell
        path.with_name(f".c.pt.junk{durable.TEMP_SUFFIX}"),
    ]
    removed = [
        _temp_name(path, host, boot, int(dead.stdout), "123"),  # a process that exited
        _temp_name(path, host, boot, me, "999999999999"),  # our pid, but not our start time: pid reuse
    ]
    for p in kept + removed:
        p.write_bytes(b"in progress")
    save({"a": torch.ones(2)}, path)
    assert all(p.exists() for p in kept) and not any(p.exists() for p in removed)


CONCURRENT = (
    MAKE_STATE
    + """
import sys
from ckptio import save
path, tag = sys.argv[1], int(sys.argv[2])
state = make_state(tag)
for _ in range(4):
    save(state, path)
"""
)


@pytest.mark.timeout(180)
def test_concurrent_saves_to_one_path_leave_one_whole_checkpoint(tmp_path: pathlib.Path) -> None:
    """Two processes saving to one path at once: the file is always one writer's whole checkpoint,
    and nothing is left behind once both are done."""
    path = tmp_path / "ckpt.pt"
    children = [start_program(CONCURRENT, [str(path), str(tag)]) for tag in (5, 6)]  # forks: no torch start-up
    seen = set()
    while any(c.is_alive() for c in children):
        if path.exists():
            seen.add(_check_complete(path))
        time.sleep(0.05)
    for c in children:
        c.join()
    assert all(c.exitcode == 0 for c in children)
    assert _check_complete(path) in (5, 6) and seen <= {5, 6}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_failed_save_keeps_old_file_and_removes_temp(tmp_path: pathlib.Path) -> None:
    """An exception during save (unpicklable value) leaves the previous checkpoint untouched."""
    path = tmp_path / "c.pt"
    save({"a": torch.ones(2)}, path)
    before = path.read_bytes()
    with pytest.raises((pickle.PicklingError, AttributeError)):  # which one depends on where the lambda lives
        save({"a": torch.ones(2), "bad": lambda: 0}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]
