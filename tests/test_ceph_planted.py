"""`ceph up/down` never trust what others could have planted (no cluster is made: these are fast): a folder, marker,
state and ceph.conf `nobody` made are refused, naming what was found, and the mount, file and process they name
are left alone; a malformed state is a named error; `down` stops only the processes `up` starts."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench import trusted
from gdsbench.cli import cli
from gdsbench.testbeds import ceph
from tests.helpers import assert_exits

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root and runuser")


def as_nobody(script: str, *args: str) -> None:
    """Run a shell script as the unprivileged user `nobody` (its arguments as $1...)."""
    subprocess.run(["runuser", "-u", "nobody", "--", "sh", "-c", script, "sh", *args], check=True, timeout=30)


@pytest.fixture
def victims(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """What a planted state may name, none of it gdsbench's: a tmpfs mount, a root-owned file, and another
    cluster's directory with its conf."""
    mount, target = tmp_path / "mount", tmp_path / "target"
    mount.mkdir()
    target.write_text("root's\n")
    other = Path(tempfile.mkdtemp(prefix="gdsbench-ceph-other-", dir="/var/tmp"))
    (other / "ceph.conf").write_text("[global]\n")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "gdsbench-test-victim", str(mount)], check=True)
    try:
        yield {"mount": mount, "target": target, "other": other}
    finally:
        subprocess.run(["umount", str(mount)], check=False)
        shutil.rmtree(other)


@pytest.fixture
def planted_dir() -> Iterator[Path]:
    """A folder name in world-writable /var/tmp that `nobody` will make (removed after)."""
    directory = Path(f"/var/tmp/gdsbench-ceph-planted-{secrets.token_hex(4)}")
    yield directory
    if os.path.lexists(directory):
        subprocess.run(["rm", "-rf", "--one-file-system", str(directory)], check=True)


def root_process(*args: str) -> subprocess.Popen[bytes]:
    """A root process whose arguments name `args` (it sleeps a minute)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", *args])


@pytest.mark.parametrize("names", ["itself", "another cluster"])
def test_down_refuses_a_folder_nobody_made_and_touches_nothing_its_state_names(victims, planted_dir, names):
    """`nobody` makes the folder with gdsbench's marker, a state naming a tmpfs mount, the folder itself or another
    cluster (whose conf a root process's arguments name), a pid file with that process's pid, and a ceph.conf
    whose log file is a root-owned file: nothing is unmounted, run, written, killed or removed."""
    cluster = planted_dir if names == "itself" else victims["other"]
    victim = root_process("-c", str(cluster / "ceph.conf"))
    state = {
        "directory": str(cluster),
        "fsid": "x",
        "mon_address": "127.0.0.1:1",
        "block_size": 0,
        "fs": True,
        "mount": str(victims["mount"]),
        "pidfiles": [f"{planted_dir}/run/ceph-mds.a.pid"],
    }
    conf = f"[global]\nmon host = 127.0.0.1:1\nlog file = {victims['target']}\nlog to file = true\n"
    plant = 'mkdir -p "$1/run" && printf x > "$1/.gdsbench-ceph" && printf %s "$2" > "$1/gdsbench-ceph.json" && '
    plant += 'printf %s "$3" > "$1/run/ceph-mds.a.pid" && printf %s "$4" > "$1/ceph.conf"'
    try:
        as_nobody(plant, str(planted_dir), json.dumps(state), str(victim.pid), conf)
        run = CliRunner().invoke(cli, ["ceph", "down", "--dir", str(planted_dir)])
        assert_exits(run, 2, one_line_error=True)
        assert f"{planted_dir}: owned by nobody (uid " in run.output and "left alone" in run.output
        assert os.path.ismount(victims["mount"]) and victims["target"].read_text() == "root's\n"
        assert victim.poll() is None and (victims["other"] / "ceph.conf").exists()
        assert sorted(os.listdir(planted_dir)) == [".gdsbench-ceph", "ceph.conf", "gdsbench-ceph.json", "run"]
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("planted", ["empty folder", "link"])
def test_up_refuses_a_folder_or_link_nobody_made_where_its_directory_goes(planted_dir, tmp_path, planted):
    """The default directory lives in world-writable /var/tmp: one `nobody` made first is not adopted."""
    make = 'mkdir "$1"' if planted == "empty folder" else 'ln -s "$2" "$1"'
    as_nobody(make, str(planted_dir), str(tmp_path))
    why = "owned by nobody (uid " if planted == "empty folder" else "a symbolic link"
    with pytest.raises(trusted.UntrustedError, match=re.escape(f"{planted_dir}: {why}")):
        ceph.check_can_make(planted_dir)
    assert os.path.lexists(planted_dir) and os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "state",
    [{"directory": "DIR", "unknown": 1}, {"directory": 5, "fsid": "", "mon_address": "", "block_size": 0}, [1]],
)
def test_a_malformed_state_is_a_named_error_not_a_traceback(state):
    directory = Path(tempfile.mkdtemp(prefix="gdsbench-ceph-bad-", dir="/var/tmp"))
    try:
        (directory / ceph.MARKER).write_text("x")
        (directory / ceph.STATE).write_text(json.dumps(state).replace("DIR", str(directory)))
        run = CliRunner().invoke(cli, ["ceph", "down", "--dir", str(directory)])
        assert_exits(run, 2, one_line_error=True)
        assert f"{directory / ceph.STATE}: malformed state" in run.output
        assert (directory / ceph.STATE).exists()
    finally:
        shutil.rmtree(directory)


def test_a_state_naming_paths_outside_its_directory_is_refused(victims):
    directory = Path(tempfile.mkdtemp(prefix="gdsbench-ceph-out-", dir="/var/tmp"))
    try:
        (directory / ceph.MARKER).write_text("x")
        made = ceph.Made(str(directory), "x", "127.0.0.1:1", 0, mount=str(victims["mount"]))
        (directory / ceph.STATE).write_text(json.dumps(made.__dict__))
        with pytest.raises(ceph.CephError, match=re.escape(f"names {victims['mount']}, not what `up` makes")):
            ceph.down(directory)
        assert os.path.ismount(victims["mount"]) and directory.exists()
    finally:
        shutil.rmtree(directory)


def test_down_stops_only_processes_up_starts_not_one_whose_arguments_name_the_conf():
    """A root process that merely names the cluster's conf is no daemon of `up`'s (`<ceph binary> -c <conf>`)."""
    directory = Path(tempfile.mkdtemp(prefix="gdsbench-ceph-kill-", dir="/var/tmp"))
    (directory / ceph.MARKER).write_text("x")
    victim = root_process("-c", str(directory / "ceph.conf"))
    try:
        assert ceph.down(directory) == [f"removed {directory}"]
        assert victim.poll() is None and not directory.exists()
    finally:
        victim.kill()
        victim.wait()
        shutil.rmtree(directory, ignore_errors=True)
