"""The one-host Ceph brought up for real (root, Debian's packages, real daemons): healthy, RADOS, S3, CephFS, on
loopback only; `down` and an interrupted `up` leave no process, directory or /etc/ceph link behind.

One cluster with radosgw and CephFS serves the whole run (tests/ceph_cluster.py: the first xdist worker to take
the lock brings it up, the others reuse it, the controller takes it down at the end). The lifecycle test makes a
small cluster (mon, mgr, OSD) of its own and interrupts it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from gdsbench.testbeds import ceph
from gdsbench.testbeds.daemons import alive as _alive
from tests.ceph_cluster import _installed
from tests.helpers import HANG_S

MiB = 1 << 20
pytestmark = pytest.mark.slow
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (Ceph daemons, /etc/ceph, ceph-fuse)")


def _rados(ceph_cluster: ceph.Cluster, *args: str) -> None:
    """Run the rados CLI against the cluster (its conf), failing the test on an error."""
    subprocess.run(
        ["rados", "-c", str(ceph_cluster.conf), "-p", ceph_cluster.rados_pool, *args], check=True, timeout=HANG_S
    )


def _settled(ceph_cluster: ceph.Cluster, most: float = 30.0) -> dict:
    """The cluster's status once every placement group is active+clean (a pool radosgw makes on first use, such as
    its multipart pool when another test's upload comes first, starts with its groups `unknown` for a moment)."""
    deadline = time.monotonic() + most
    while True:
        status = ceph_cluster.status()
        states = [s["state_name"] for s in status["pgmap"]["pgs_by_state"]]
        if states == ["active+clean"] or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


@needs_root
def test_the_cluster_is_healthy_and_rados_round_trips_bytes(ceph_cluster, tmp_path):
    status = _settled(ceph_cluster)
    assert status["health"]["status"] == "HEALTH_OK"
    assert status["osdmap"]["num_up_osds"] == status["osdmap"]["num_in_osds"] == 1
    assert [s["state_name"] for s in status["pgmap"]["pgs_by_state"]] == ["active+clean"]
    assert {"gdsbench", "gdsbench-rbd", "gdsbench-fs-meta", "gdsbench-fs-data"} <= set(ceph_cluster.pools)
    assert ceph_cluster.max_object_size == 128 * MiB  # left at its default, recorded

    data, name = os.urandom(3 * MiB + 17), f"obj-{uuid.uuid4().hex}"
    (tmp_path / "in").write_bytes(data)
    _rados(ceph_cluster, "put", name, str(tmp_path / "in"))
    ceph_cluster.drop_caches()  # the next read comes from BlueStore, not the OSD's cache
    _rados(ceph_cluster, "get", name, str(tmp_path / "out"))
    _rados(ceph_cluster, "rm", name)
    assert (tmp_path / "out").read_bytes() == data

    info = subprocess.run(
        [
            "rbd",
            "-c",
            str(ceph_cluster.conf),
            "info",
            f"{ceph_cluster.rbd_pool}/{ceph_cluster.rbd_image}",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_S,
    )
    assert json.loads(info.stdout)["size"] == 4 << 30


@needs_root
def test_radosgw_answers_s3_on_loopback_and_its_credentials_are_in_a_private_file(ceph_cluster):
    assert ceph_cluster.s3_endpoint and ceph_cluster.s3_endpoint.startswith("http://127.0.0.1:")
    with urllib.request.urlopen(ceph_cluster.s3_endpoint + "/", timeout=30) as answer:
        assert answer.status == 200
        body = answer.read().decode()
    assert "<ListAllMyBucketsResult" in body and "http://s3.amazonaws.com/doc/2006-03-01/" in body

    env_file = ceph_cluster.directory / "s3.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    env = ceph_cluster.env()
    assert env["CEPH_CONF"] == str(ceph_cluster.conf) and env["AWS_ENDPOINT_URL"] == ceph_cluster.s3_endpoint
    assert len(env["AWS_ACCESS_KEY_ID"]) == 20 and len(env["AWS_SECRET_ACCESS_KEY"]) >= 40


@needs_root
def test_cephfs_is_mounted_by_ceph_fuse_and_a_file_reads_back(ceph_cluster):
    assert ceph_cluster.cephfs == ceph_cluster.directory / "cephfs"
    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    assert [m[2] for m in mounts if m[1] == str(ceph_cluster.cephfs)] == ["fuse.ceph-fuse"]
    data, path = os.urandom(2 * MiB + 5), ceph_cluster.cephfs / f"f-{uuid.uuid4().hex}"
    with path.open("wb") as out:
        out.write(data)
        os.fsync(out.fileno())
    assert path.read_bytes() == data
    path.unlink()


def _listening(pids: list[int]) -> dict[int, list[str]]:
    """The TCP addresses (hex ip:port of /proc/net/tcp and tcp6) each process listens on."""
    inodes: dict[str, str] = {}
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":  # LISTEN
                inodes[fields[9]] = fields[1]
    found: dict[int, list[str]] = {}
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        links = [os.readlink(fd) for fd in fds.iterdir()]
        found[pid] = [inodes[link[8:-1]] for link in links if link.startswith("socket:[") and link[8:-1] in inodes]
    return found


@needs_root
def test_every_daemon_listens_on_127_0_0_1_only(ceph_cluster):
    pids = {Path(p).stem: ceph._read_pid(p) for p in ceph_cluster.pidfiles}
    assert set(pids) >= {"ceph-mon.a", "ceph-mgr.x", "ceph-osd.0", "ceph-client.rgw.a", "ceph-mds.a"}
    listening = _listening([pid for pid in pids.values() if pid])
    loopback = "0100007F"  # 127.0.0.1, as /proc/net/tcp writes it
    for name, pid in pids.items():
        if name != "ceph-client.admin":  # ceph-fuse only connects
            assert pid and listening[pid], f"{name} listens on nothing"
        assert all(address.split(":")[0] == loopback for address in listening.get(pid or 0, [])), (name, listening)
    mon_ports = {int(part.rsplit(":", 1)[1]) for part in ceph_cluster.mon_address.strip("[]").split(",")}
    assert {int(a.split(":")[1], 16) for a in listening[pids["ceph-mon.a"] or 0]} == mon_ports


def _scratch_dir() -> Path:
    """An empty directory of its own under /var/tmp (short: the admin sockets' paths are at most 107 bytes)."""
    return Path(tempfile.mkdtemp(prefix="gdsbench-ceph-small-", dir="/var/tmp"))


def _no_trace_of(directory: Path, pids: list[int]) -> None:
    """Assert that nothing of a cluster in `directory` is left: process, directory, /etc/ceph link."""
    assert pids and not any(map(_alive, pids))
    assert not directory.exists()
    conf = str(directory / "ceph.conf")
    assert not (ceph.ETC_CONF.is_symlink() and os.readlink(ceph.ETC_CONF) == conf)
    users = [p for p in os.listdir("/proc") if p.isdigit() and conf in ceph._argv(int(p))]
    assert users == []


@needs_root
def test_down_and_an_interrupted_up_leave_no_process_directory_or_link(monkeypatch):
    """Ctrl-C once mon, mgr and OSD run and the /etc/ceph link is made: `up` undoes itself through `down`, which
    stops the daemons newest first and removes the directory and its own link; a second `down` finds nothing."""
    _installed()
    started: list[int] = []
    linked: list[bool] = []
    undone: list[list[str]] = []
    link, down = ceph._link_etc_conf, ceph.down

    def link_then_interrupt(made: ceph.Made) -> None:
        link(made)
        started.extend(pid for f in made.pidfiles if (pid := ceph._read_pid(Path(f))))
        linked.append(ceph.ETC_CONF.is_symlink() and os.readlink(ceph.ETC_CONF) == made.conf)
        assert linked[0] == (made.fio_note == "")  # ours, or left alone and said so (the shared cluster's link)
        raise KeyboardInterrupt  # Ctrl-C with mon, mgr and OSD running

    def recorded_down(directory: Path) -> list[str]:
        undone.append(down(directory))
        return undone[-1]

    monkeypatch.setattr(ceph, "_link_etc_conf", link_then_interrupt)
    monkeypatch.setattr(ceph, "down", recorded_down)
    directory = _scratch_dir()
    try:
        with pytest.raises(KeyboardInterrupt):
            ceph.up(directory, rgw=False, cephfs=False)
        assert len(started) == 3 and len(undone) == 1
        assert undone[0][0] == f"stopped ceph-osd.0 (pid {started[2]})" and undone[0][-1] == f"removed {directory}"
        assert (f"removed the link {ceph.ETC_CONF}" in undone[0]) == linked[0]
        _no_trace_of(directory, started)
        assert down(directory) == []
    finally:
        down(directory)
        if directory.exists():  # an `up` refused before it marked the directory
            directory.rmdir()


@needs_root
def test_a_foreign_directory_is_refused_and_down_without_a_cluster_removes_nothing(tmp_path):
    from click.testing import CliRunner

    from gdsbench.cli import cli
    from tests.helpers import assert_exits

    _installed()
    (tmp_path / "theirs").write_text("not ours")
    run = CliRunner().invoke(cli, ["ceph", "up", "--dir", str(tmp_path)])
    assert_exits(run, 2)
    assert f"{tmp_path} exists and is not an empty directory" in run.output
    assert (tmp_path / "theirs").read_text() == "not ours" and not (tmp_path / ceph.STATE).exists()

    run = CliRunner().invoke(cli, ["ceph", "down", "--dir", str(tmp_path)])
    assert_exits(run, 0)
    assert run.output == f"nothing to remove: no cluster in {tmp_path}\n"
    (tmp_path / ceph.STATE).write_text("{}")  # a state file without gdsbench's marker: left alone
    with pytest.raises(ceph.CephError, match="no gdsbench marker"):
        ceph.down(tmp_path)
    assert (tmp_path / "theirs").exists()


def test_without_root_it_is_refused_in_one_line_and_nothing_is_made(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from gdsbench.cli import cli
    from tests.helpers import assert_exits

    monkeypatch.setattr(ceph.os, "geteuid", lambda: 1000)
    run = CliRunner().invoke(cli, ["ceph", "up", "--dir", str(tmp_path / "c")])
    assert_exits(run, 2, one_line_error=True)
    assert "root" in run.output and not (tmp_path / "c").exists()
