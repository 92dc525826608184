"""The memory place (`memory://name`): a tier in RAM that outlives the process that saved it, made ours alone in a
shared /dev/shm, refused where it would not fit or is not in memory (issue 39, part 2: the RAM tier)."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from ckptio import TieredCheckpointer
from ckptio.errors import InvalidLocation, NotDurable, StorageFull, UnsafeLocation
from ckptio.places import memory, place
from ckptio.records import Restored
from hypothesis import given
from hypothesis import strategies as st

from tests.checkpoint.conftest import assert_same

pytestmark = pytest.mark.timeout(120)
STATE = {"w": torch.arange(1 << 16, dtype=torch.float32), "b": torch.ones(7, dtype=torch.bfloat16)}


@pytest.fixture
def shm(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A shared sticky folder in /dev/shm (as /dev/shm itself is), standing for it in this test."""
    made = Path(tempfile.mkdtemp(prefix="ckptio-test-shm-", dir="/dev/shm"))
    made.chmod(0o1777)
    monkeypatch.setattr(memory, "SHARED_MEMORY", str(made))
    yield made
    shutil.rmtree(made)


def test_a_memory_tier_is_private_in_ram_and_drains_to_disk(shm: Path, tmp_path: Path) -> None:
    where = place("memory://run1")
    assert where.traits.survives == "process" and where.path == str(shm / f"ckptio-{os.geteuid()}" / "run1")
    with TieredCheckpointer(["memory://run1", tmp_path / "disk"]) as ckpt:
        saved = ckpt.save(STATE, 3)
        saved.wait()
        assert sorted(saved.durable_seconds) == [0, 1]
        assert_same(STATE, ckpt.load())
        assert isinstance(ckpt.last, Restored) and (ckpt.last.step, ckpt.last.tier) == (3, 0)
    for folder in (shm / f"ckptio-{os.geteuid()}", shm / f"ckptio-{os.geteuid()}" / "run1"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert memory.file_system(where.path) == "tmpfs" and (tmp_path / "disk" / "step-000000000003.ckpt").is_file()


def test_the_memory_copy_outlives_the_process_that_saved_it(shm: Path) -> None:
    """A process saves into memory and is SIGKILLed; a new one restores that step from RAM, exact."""
    code = (
        "import os, signal, sys, torch\n"
        "from ckptio.places import memory\n"
        "memory.SHARED_MEMORY = sys.argv[1]\n"
        "from ckptio import TieredCheckpointer\n"
        "ckpt = TieredCheckpointer(['memory://crash'])\n"
        "ckpt.save({'w': torch.arange(1 << 16, dtype=torch.float32), 'b': torch.ones(7, dtype=torch.bfloat16)}, 9)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(shm)], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL
    with TieredCheckpointer(["memory://crash"]) as ckpt:
        assert_same(STATE, ckpt.load())
        assert ckpt.last is not None and ckpt.last.step == 9


def test_a_crashed_writer_s_temp_files_of_any_step_leave_ram_at_the_next_save(shm: Path) -> None:
    """A save or peer copy killed midway leaves a temp file in RAM (its bytes held for good): the tier's next save
    removes every one whose writer is provably gone, whichever step it was for; a live writer's stays."""
    from ckptio import durable

    folder = Path(place("memory://leak").path)
    with TieredCheckpointer(["memory://leak"]) as ckpt:
        ckpt.save(STATE, 1).wait()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    writer = f"{durable._host()}.{durable._boot_id()}.{int(dead.stdout)}.123"
    torn = [folder / f".step-{step:012d}.ckpt.{writer}.abcd1234{durable.TEMP_SUFFIX}" for step in (2, 7)]
    live = Path(durable.temp_path(str(folder / "step-000000000005.ckpt")))  # this process: a save under way
    for path in (*torn, live):
        path.write_bytes(b"x" * 4096)
    with TieredCheckpointer(["memory://leak"]) as ckpt:
        ckpt.save(STATE, 3).wait()
    assert not any(path.exists() for path in torn) and live.exists()
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "step-000000000001.ckpt",
        "step-000000000003.ckpt",
    ]


def test_a_save_that_would_not_fit_in_memory_is_refused_before_a_byte(
    shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 10)
    said = r"a save of 262158 bytes does not fit in memory: 1024 bytes available"
    with TieredCheckpointer(["memory://small"]) as ckpt, pytest.raises(StorageFull, match=said):
        ckpt.save(STATE, 1)
    assert list((shm / f"ckptio-{os.geteuid()}" / "small").iterdir()) == []


@pytest.mark.parametrize(
    ("location", "said"),
    [
        ("memory://../up", "expected memory://name"),
        ("memory://a/./b", "expected memory://name"),
        ("memory://", "expected memory://name"),
        ("memory://a b", "expected memory://name"),
        ("memory:///proc/x", "/proc/x is on proc, not in memory"),
    ],
)
def test_a_memory_location_is_a_plain_name_or_a_ram_folder(location: str, said: str) -> None:
    with pytest.raises(InvalidLocation, match=said):
        place(location)
    assert place("memory:///dev/shm/somewhere").path == "/dev/shm/somewhere"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another user's folder is made with chown")
def test_a_per_user_folder_another_user_made_first_is_refused(shm: Path) -> None:
    squatted = shm / f"ckptio-{os.geteuid()}"
    squatted.mkdir(mode=0o777)
    os.chown(squatted, 65534, 65534)
    with TieredCheckpointer(["memory://job"]) as ckpt, pytest.raises(UnsafeLocation, match="uid 65534"):
        ckpt.save(STATE, 1)
    assert list(squatted.iterdir()) == []


def test_an_exit_with_the_newest_step_only_in_memory_is_refused_unless_allowed(
    shm: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The farthest tier cannot take the step (a file stands where its folder should be): the drain fails, and the
    `with` block's end raises NotDurable naming the step and why, after freeing everything; with
    require_durable=False the same exit is allowed; a block already raising keeps its own error."""
    far = tmp_path / "far"
    far.write_text("not a folder")
    said = r"step 4, the newest save, is not durable in the farthest tier: tier 1 \(.*far\): .*Not a directory"
    with pytest.raises(NotDurable, match=said) as lost, TieredCheckpointer(["memory://exit", far]) as ckpt:
        ckpt.save(STATE, 4)
    assert lost.value.step == 4 and list(lost.value.missing) == [1] and ckpt._saving is None  # freed first
    with TieredCheckpointer(["memory://exit", far], require_durable=False) as allowed:
        allowed.save(STATE, 5)
    with pytest.raises(KeyError, match="the block's own"), TieredCheckpointer(["memory://exit", far]) as ckpt:
        ckpt.save(STATE, 6)
        raise KeyError("the block's own")
    assert "step 6, the newest save, is not durable" in caplog.text


@given(name=st.text(max_size=40))
def test_any_memory_name_stays_in_the_user_s_folder_or_is_refused(name: str) -> None:
    """No name reaches outside /dev/shm/ckptio-<uid> (no '..', no absolute turn, no odd bytes): a path there, or
    InvalidLocation."""
    if name.startswith("/"):
        return  # memory:///path is a RAM folder the user names, checked by its file system
    try:
        where = memory.parse(f"memory://{name}")
    except InvalidLocation:
        return
    assert os.path.normpath(where) == where and where.startswith(memory.user_root() + "/")
