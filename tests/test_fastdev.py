"""The fast-device stand-in made and removed for real (root, losetup, mkfs.ext4, mount), refused without root,
and undone when a step fails. One test makes devices (the paths are the machine's, so tests never overlap)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from gdsbench import sysinfo, trusted
from gdsbench.testbeds import fastdev
from gdsbench.units import parse_size

MiB = 1 << 20
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(map(shutil.which, ("losetup", "mkfs.ext4", "mount"))),
    reason="needs root and util-linux/e2fsprogs",
)


def backing_folders() -> list[str]:
    """The private folders in /dev/shm that hold a stand-in's backing file (none once it is down)."""
    return sorted(p.name for p in fastdev.SHM.glob(f"{fastdev.FOLDER_PREFIX}*"))


def loops_over(backing: str) -> list[str]:
    """Loop devices attached to a backing file, by the name losetup keeps (none once it is down)."""
    out = subprocess.run(["losetup", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if backing in line]


def test_up_makes_a_direct_io_device_down_removes_only_what_up_made_and_a_failed_up_undoes_itself(tmp_path):
    if fastdev.STATE.exists():
        pytest.skip("a stand-in is up on this machine: leaving it alone")
    mount, before = tmp_path / "fast", backing_folders()
    made = fastdev.up(256 * MiB, mount)
    try:
        assert made.loop and made.loop.startswith("/dev/loop") and made.mounted and made.made_mount
        folder = os.lstat(os.path.dirname(made.backing))  # private: root's, mode 0700, a random name
        assert folder.st_uid == 0 and folder.st_mode & 0o777 == 0o700 and len(backing_folders()) == len(before) + 1
        assert os.lstat(fastdev.STATE).st_uid == 0 and os.lstat(fastdev.STATE_DIR).st_mode & 0o777 == 0o700
        assert os.path.ismount(mount) and sysinfo.odirect_works(mount)[0]
        done = subprocess.run(
            [
                "fio",
                "--name=w",
                f"--directory={mount}",
                "--size=64M",
                "--bs=1M",
                "--rw=write",
                "--direct=1",
                "--end_fsync=1",
                "--output-format=json",
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0 and (mount / "w.0.0").stat().st_size == 64 * MiB
        with pytest.raises(fastdev.FastDevError, match="already up"):
            fastdev.up(256 * MiB, tmp_path / "again")
    finally:
        removed = fastdev.down()
    assert removed == [f"unmounted {mount}", f"removed {mount}", f"detached {made.loop}", f"removed {made.backing}"]
    assert not mount.exists() and backing_folders() == before and not fastdev.STATE.exists()
    assert fastdev.down() == []

    blocked = tmp_path / "a-file"  # mounting over a regular file fails after the loop device exists
    blocked.write_text("mine")
    with pytest.raises(fastdev.FastDevError, match="mount"):
        fastdev.up(128 * MiB, blocked)
    assert loops_over(fastdev.FOLDER_PREFIX) == [] and backing_folders() == before and not fastdev.STATE.exists()
    assert blocked.read_text() == "mine"  # not ours: left alone


def test_without_root_it_is_refused_in_one_line_and_nothing_is_made(tmp_path, monkeypatch):
    """Not root (a stand-in for a user account: the venv here is not readable by `nobody`, so the uid is
    reported as 1000 rather than dropped)."""
    from click.testing import CliRunner

    from gdsbench.cli import cli
    from tests.helpers import assert_exits

    monkeypatch.setattr(fastdev.os, "geteuid", lambda: 1000)
    run = CliRunner().invoke(cli, ["fastdev", "up", "--size", "64M", "--mount", str(tmp_path / "m")])
    assert_exits(run, 2, one_line_error=True)
    assert run.output.strip() == "gdsbench: error: needs root (losetup, mkfs.ext4, mount): run it as root, or with sudo"
    assert not (tmp_path / "m").exists()


def test_a_default_size_is_a_quarter_of_free_memory_in_whole_gib():
    size = fastdev.default_size()
    assert size % (1 << 30) == 0 and fastdev.SMALLEST <= size <= fastdev.LARGEST
    assert size <= fastdev._meminfo("MemAvailable") * fastdev.SHARE + (1 << 30)


def test_a_bad_size_is_a_usage_error():
    from click.testing import CliRunner

    from gdsbench.cli import cli
    from tests.helpers import assert_exits

    run = CliRunner().invoke(cli, ["fastdev", "up", "--size", "lots"])
    assert_exits(run, 2, one_line_error=True)
    assert "--size: expected a size such as 8G (got 'lots')" in run.output


@pytest.fixture
def planted_mount(tmp_path):
    """A tmpfs gdsbench never made, and a root file beside it: what a planted state names (unmounted after)."""
    victim, keep = tmp_path / "victim", tmp_path / "keep"
    victim.mkdir()
    keep.write_text("root's")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "gdsbench-test-victim", str(victim)], check=True)
    try:
        yield victim, keep
    finally:
        subprocess.run(["umount", str(victim)], check=False)


def _planted_state(victim, keep) -> str:
    """A state that names a mount and a file gdsbench never made."""
    return json.dumps(
        {
            "backing": str(keep),
            "mount": str(victim),
            "size": 1,
            "loop": "/dev/loop7",
            "mounted": True,
            "made_mount": True,
            "steps": ["backing", "loop", "mounted"],
        }
    )


def test_a_state_planted_in_dev_shm_by_another_user_is_never_acted_on_nor_blocks_up(planted_mount):
    """`nobody` writes the state file where it used to live (world-writable /dev/shm): `down` unmounts and
    deletes nothing of it, and `up` is not refused as 'already up'."""
    if os.path.lexists(fastdev.STATE):
        pytest.skip("a stand-in is up on this machine: leaving it alone")
    victim, keep = planted_mount
    planted = fastdev.SHM / "gdsbench-fastdev.json"
    write = 'printf %s "$1" > "$2"'
    subprocess.run(
        ["runuser", "-u", "nobody", "--", "sh", "-c", write, "sh", _planted_state(victim, keep), str(planted)],
        check=True,
    )
    try:
        assert fastdev.down() == []
        assert os.path.ismount(victim) and keep.read_text() == "root's" and planted.exists()
        fastdev.check_can_make(1 << 20)  # not 'already up'
    finally:
        planted.unlink(missing_ok=True)


def test_a_malformed_state_is_a_named_error_and_down_unmounts_only_the_recorded_loop_device(planted_mount):
    """State of the wrong form is refused in one line, not a TypeError; a state naming a mount that is not the
    recorded loop device's leaves that mount alone (and its backing folder, not one `up` made)."""
    from click.testing import CliRunner

    from gdsbench.cli import cli
    from tests.helpers import assert_exits

    if os.path.lexists(fastdev.STATE):
        pytest.skip("a stand-in is up on this machine: leaving it alone")
    victim, keep = planted_mount
    trusted.private_folder(fastdev.STATE_DIR)
    try:
        fastdev.STATE.write_text(json.dumps({"backing": 5, "mount": "/", "size": "big"}))
        run = CliRunner().invoke(cli, ["fastdev", "down"])
        assert_exits(run, 2, one_line_error=True)
        assert f"{fastdev.STATE}: malformed state (backing: 5 is not" in run.output
        assert fastdev.STATE.exists()

        backing = fastdev.SHM / f"{fastdev.FOLDER_PREFIX}{'0' * 12}" / fastdev.BACKING_NAME
        fastdev.STATE.write_text(_planted_state(victim, keep).replace(str(keep), str(backing)))
        assert fastdev.down() == []
        assert os.path.ismount(victim) and keep.read_text() == "root's" and not fastdev.STATE.exists()
    finally:
        fastdev.STATE.unlink(missing_ok=True)


def test_a_size_that_does_not_fit_is_refused_saying_which_size_fits():
    if os.path.lexists(fastdev.STATE):
        pytest.skip("a stand-in is up on this machine")
    with pytest.raises(fastdev.FastDevError, match=r"--size 1P does not fit: .* GiB free in /dev/shm") as refused:
        fastdev.check_can_make(1 << 50)
    fits = re.search(r"; --size (\d+[MG]) fits$", str(refused.value))
    assert fits, str(refused.value)
    fastdev.check_can_make(parse_size(fits[1]))  # what it says fits is accepted
