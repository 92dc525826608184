"""The fast-device stand-in made and removed for real (root, losetup, mkfs.ext4, mount), refused without root,
and undone when a step fails. One test makes devices (the paths are the machine's, so tests never overlap)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from gdsbench import fastdev, sysinfo

MiB = 1 << 20
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not all(map(shutil.which, ("losetup", "mkfs.ext4", "mount"))),
    reason="needs root and util-linux/e2fsprogs",
)


def loops_over_backing() -> list[str]:
    """Loop devices attached to the stand-in's backing file (none once it is down)."""
    if not fastdev.BACKING.exists():
        return []
    out = subprocess.run(["losetup", "-n", "-O", "NAME", "-j", str(fastdev.BACKING)], capture_output=True, text=True)
    return out.stdout.split()


def test_up_makes_a_direct_io_device_down_removes_only_what_up_made_and_a_failed_up_undoes_itself(tmp_path):
    if fastdev.STATE.exists():
        pytest.skip("a stand-in is up on this machine: leaving it alone")
    mount = tmp_path / "fast"
    made = fastdev.up(256 * MiB, mount)
    try:
        assert made.loop and made.loop.startswith("/dev/loop") and made.mounted and made.made_mount
        assert os.path.ismount(mount) and sysinfo.odirect_works(mount)[0]
        done = subprocess.run(["fio", "--name=w", f"--directory={mount}", "--size=64M", "--bs=1M", "--rw=write",
                               "--direct=1", "--end_fsync=1", "--output-format=json"], capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0 and (mount / "w.0.0").stat().st_size == 64 * MiB
        with pytest.raises(fastdev.FastDevError, match="already up"):
            fastdev.up(256 * MiB, tmp_path / "again")
    finally:
        removed = fastdev.down()
    assert removed == [f"unmounted {mount}", f"removed {mount}", f"detached {made.loop}", f"removed {fastdev.BACKING}"]
    assert not mount.exists() and not fastdev.BACKING.exists() and not fastdev.STATE.exists()
    assert fastdev.down() == []

    blocked = tmp_path / "a-file"  # mounting over a regular file fails after the loop device exists
    blocked.write_text("mine")
    with pytest.raises(fastdev.FastDevError, match="mount"):
        fastdev.up(128 * MiB, blocked)
    assert loops_over_backing() == [] and not fastdev.BACKING.exists() and not fastdev.STATE.exists()
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
