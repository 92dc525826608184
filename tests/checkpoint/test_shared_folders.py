"""Saves and tiers in folders another user controls (issues 44 and 45), tried as that user would: a folder of
theirs, a link planted on the way, a name held in a sticky shared folder, a FIFO at the next name, a step file
planted in a tier, a tier folder squatted before the job, names swapped under the save in a loop. Every one is
refused by name (UnsafeLocation) or skipped with a reason: nothing outside the folder is written, nothing planted
is loaded, nothing hangs. Needs root (the other user is uid 65534, `nobody`, made real with chown and setuid)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from ckptio import TieredCheckpointer, load, save
from ckptio.errors import NoCheckpoint, UnsafeLocation

from tests.checkpoint.conftest import assert_same

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another user's files are made with chown"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.timeout(120),
]
NOBODY = 65534
#: The other user's interpreter: the system's (this venv may sit in a folder only root can enter).
THEIR_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
STATE = {"w": torch.arange(4096, dtype=torch.float32), "n": 7}


@pytest.fixture
def area() -> Iterator[Path]:
    """A folder of root's that another user can enter (pytest's own tmp folders are 0700)."""
    made = Path(tempfile.mkdtemp(prefix="ckptio-shared-", dir="/var/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


def theirs(path: Path, mode: int = 0o755) -> Path:
    """`path` made a folder of the other user's."""
    path.mkdir(exist_ok=True)
    os.chown(path, NOBODY, NOBODY)
    path.chmod(mode)
    return path


def sticky(path: Path) -> Path:
    """`path` made a shared sticky folder (as /tmp is)."""
    path.mkdir()
    path.chmod(0o1777)
    return path


def precious(area: Path) -> Path:
    """A root-only file outside every folder the other user has."""
    secret = area / "root-only" / "shadow"
    secret.parent.mkdir(mode=0o700)
    secret.write_bytes(b"root's data\n")
    secret.chmod(0o600)
    return secret


def test_a_save_into_another_users_folder_is_refused_and_writes_nothing(area: Path) -> None:
    folder = theirs(area / "theirs")
    with pytest.raises(UnsafeLocation, match=r"theirs belongs to uid 65534, another user"):
        save(STATE, folder / "c.pt")
    assert list(folder.iterdir()) == []


def test_a_folder_others_can_write_that_is_not_sticky_is_refused(area: Path) -> None:
    open_to_all = area / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(UnsafeLocation, match=r"writable by other users and not sticky \(mode 777\)"):
        save(STATE, open_to_all / "c.pt")
    assert list(open_to_all.iterdir()) == []


def test_a_link_another_user_planted_on_the_way_is_never_followed(area: Path) -> None:
    secret = precious(area)
    shared = sticky(area / "tmp")
    os.symlink(secret.parent, shared / "run")
    os.lchown(shared / "run", NOBODY, NOBODY)
    with pytest.raises(UnsafeLocation, match=r"run is a link another user \(uid 65534\) made in a shared folder"):
        save(STATE, shared / "run" / "shadow")
    assert secret.read_bytes() == b"root's data\n"


def test_in_a_sticky_shared_folder_a_name_another_user_holds_is_refused_and_a_fresh_one_saves(area: Path) -> None:
    shared = sticky(area / "tmp")
    secret = precious(area)
    planted = shared / "c.pt"
    os.symlink(secret, planted)
    os.lchown(planted, NOBODY, NOBODY)
    with pytest.raises(UnsafeLocation, match=r"the name is held by uid 65534 \(not a regular file\)"):
        save(STATE, planted)
    assert planted.is_symlink() and secret.read_bytes() == b"root's data\n"
    save(STATE, shared / "mine.pt")
    assert_same(load(shared / "mine.pt"), STATE)


def test_a_fifo_at_the_name_never_blocks_the_save(area: Path) -> None:
    """A FIFO at the name in a shared folder is refused; in our own folder the save replaces it (never opens it)."""
    shared = sticky(area / "tmp")
    os.mkfifo(shared / "c.pt")
    os.chown(shared / "c.pt", NOBODY, NOBODY)
    started = time.monotonic()
    with pytest.raises(UnsafeLocation, match="not a regular file"):
        save(STATE, shared / "c.pt")
    own = area / "own"
    own.mkdir()
    os.mkfifo(own / "c.pt")
    save(STATE, own / "c.pt")
    assert time.monotonic() - started < 30 and stat.S_ISREG(os.lstat(own / "c.pt").st_mode)
    assert_same(load(own / "c.pt"), STATE)


SWAPPER = """
import os, sys, time
folder, target, until = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
while time.monotonic() < until:
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        try:
            if not os.path.islink(path):
                os.rename(path, path + ".moved")
                os.symlink(target, path)
        except OSError:
            pass
"""


def test_names_swapped_under_the_save_in_a_loop_never_reach_a_file_outside(area: Path) -> None:
    """The attack of issue 45: root saves into a folder another user owns while that user swaps every new name for
    a link to a root-only file. Every save is refused before it writes; the file outside is untouched and the
    checkpoint's name never becomes a link."""
    folder = theirs(area / "theirs")
    secret = precious(area)
    swapper = subprocess.Popen([THEIR_PYTHON, "-c", SWAPPER, str(folder), str(secret), "5"], user=NOBODY)
    try:
        refused = 0
        for _ in range(100):
            with pytest.raises(UnsafeLocation):
                save(STATE, folder / "c.pt")
            refused += 1
    finally:
        swapper.wait(30)
    assert refused == 100 and secret.read_bytes() == b"root's data\n"
    assert not (folder / "c.pt").is_symlink() and not (folder / "c.pt").exists()


def test_a_tier_folder_squatted_by_another_user_is_refused_and_nothing_planted_is_restored(area: Path) -> None:
    """Another user made the tier's folder before the job and put a whole, sealed checkpoint of their own in it."""
    squatted = theirs(area / "tier0", 0o777)
    save({"w": torch.zeros(4096), "n": 666}, area / "forged.pt")
    shutil.copy(area / "forged.pt", squatted / "step-999999999999.ckpt")
    os.chown(squatted / "step-999999999999.ckpt", NOBODY, NOBODY)
    with TieredCheckpointer([squatted]) as ckpt:
        with pytest.raises(UnsafeLocation, match="belongs to uid 65534"):
            ckpt.save(STATE, 1)
        with pytest.raises(NoCheckpoint, match=r"tier 0: cannot be listed: .*refused"):
            ckpt.load()


def test_a_tier_folder_must_be_ours_alone_and_is_made_private(area: Path) -> None:
    shared = sticky(area / "shm")
    with TieredCheckpointer([shared]) as ckpt, pytest.raises(UnsafeLocation, match="must be ours alone"):
        ckpt.save(STATE, 1)
    with TieredCheckpointer([shared / "job"]) as ckpt:  # inside the shared parent: a private folder of ours
        ckpt.save(STATE, 1)
    assert stat.S_IMODE(os.stat(shared / "job").st_mode) == 0o700
    planting = subprocess.run(
        [THEIR_PYTHON, "-c", f"open({str(shared / 'job' / 'step-999999999999.ckpt')!r}, 'wb')"],
        user=NOBODY,
        capture_output=True,
        text=True,
    )
    assert planting.returncode != 0 and "PermissionError" in planting.stderr


def test_a_step_file_of_another_users_in_the_tier_is_never_restored(area: Path) -> None:
    """Even where one got in (root made it for them: a restore of an old backup), only this user's files count."""
    tier = area / "tier0"
    with TieredCheckpointer([tier]) as ckpt:
        ckpt.save(STATE, 3)
        save({"w": torch.zeros(4096), "n": 666}, area / "forged.pt")
        planted = tier / "step-999999999999.ckpt"
        shutil.copy(area / "forged.pt", planted)
        os.chown(planted, NOBODY, NOBODY)
        restored = ckpt.load()
        assert ckpt.last is not None and ckpt.last.step == 3
    assert restored["n"] == 7 and planted.exists()


def test_a_dcp_save_into_another_users_folder_is_refused_by_name(area: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from ckptio import Writer
    from torch.distributed.checkpoint.api import CheckpointException

    folder = theirs(area / "theirs")
    with pytest.raises(CheckpointException) as caught:  # DCP wraps a rank's error in its CheckpointException
        dcp.save({"w": torch.arange(64.0)}, storage_writer=Writer(folder / "dcp"))
    assert "UnsafeLocation" in str(caught.value) and "theirs belongs to uid 65534, another user" in str(caught.value)
    assert list(folder.iterdir()) == []
