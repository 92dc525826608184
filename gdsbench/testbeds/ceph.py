"""A one-host Ceph cluster for tests and demos: one monitor, manager and BlueStore OSD (a sparse file), optionally
radosgw (S3) and CephFS (ceph-fuse), on 127.0.0.1 only, auth off, pool size 1 (docs/ceph.md: why, limits, pitfalls).

Everything lives in one data directory, ours alone (made by `up`, or an empty one of ours: never one others made
or can write), marked as gdsbench's before anything is made in it. What `up` makes is recorded in a journal (a state file,
testbeds/journal.py) as it is made: `down` removes only that, and a failed or interrupted `up` undoes its own steps before it re-raises;
`down` refuses a directory, marker, state or conf others could have planted (gdsbench/trusted.py) and stops only
processes `up` starts (`<ceph binary> -c <its conf>`, ours). Root only; every tool runs as an argument list.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gdsbench import trusted
from gdsbench.errors import GdsbenchError
from gdsbench.hosts import free_port as _free_port
from gdsbench.sysinfo.storage import MOUNTS, parse_mounts
from gdsbench.testbeds.base import Testbed
from gdsbench.testbeds.daemons import argv_of as _argv
from gdsbench.testbeds.daemons import owned_by_us, stop_daemons
from gdsbench.testbeds.daemons import read_pid as _read_pid
from gdsbench.testbeds.journal import undone_on_failure

DEFAULT_DIR = Path("/var/tmp/gdsbench-ceph")
STATE, MARKER, S3_ENV = "gdsbench-ceph.json", ".gdsbench-ceph", "s3.env"
ETC_CONF = Path("/etc/ceph/ceph.conf")
BINARIES = (
    "ceph-mon",
    "ceph-osd",
    "ceph-mgr",
    "radosgw",
    "ceph-mds",
    "ceph-fuse",
    "ceph",
    "rados",
    "rbd",
    "radosgw-admin",
    "monmaptool",
    "ceph-authtool",
)
PACKAGES = ("ceph", "ceph-mon", "ceph-osd", "ceph-mgr", "radosgw", "ceph-common", "ceph-mds", "ceph-fuse")
POOL, RBD_POOL, RBD_IMAGE, RBD_IMAGE_MIB = "gdsbench", "gdsbench-rbd", "gdsbench", 4096
FS_NAME, FS_POOLS = "gdsbench", ("gdsbench-fs-meta", "gdsbench-fs-data")
PGS, GiB, HEALTH_TIMEOUT, STOP_TIMEOUT = 8, 1 << 30, 120.0, 20.0
#: The OSD's sparse file: half the free space under the directory, at most 24 GiB (pitfall 5: never fill it).
BLOCK_MAX, BLOCK_MIN = 24 * GiB, 4 * GiB
#: A unix socket path has at most 107 bytes: the longest of ours is <directory>/run/ceph-client.admin.<pid>.asok.
LONGEST_DIR = 107 - len("/run/ceph-client.admin.4194304.asok")


class CephError(GdsbenchError):
    """The cluster cannot be installed, brought up or taken down: says why and what to do."""

    exit_code = 2


BED = Testbed("ceph", CephError, PACKAGES, BINARIES, "`make ceph-deps` installs Debian's Ceph packages")
#: Install the Debian packages when a binary is missing (root); True when it installed them.
install = BED.install


@dataclass
class Made:
    """What `up` created, recorded as each thing exists (the state file)."""

    directory: str
    fsid: str
    mon_address: str
    block_size: int
    rgw_port: int | None = None
    pidfiles: list[str] = field(default_factory=list)
    linked: bool = False
    fio_note: str = ""
    mount: str | None = None
    fs: bool = False
    pools: list[str] = field(default_factory=list)
    rbd_image: str | None = None
    max_object_size: int = 0
    complete: bool = False
    steps: list[str] = field(default_factory=list)

    @property
    def conf(self) -> str:
        """The cluster's ceph.conf."""
        return f"{self.directory}/ceph.conf"


@dataclass
class Cluster:
    """A cluster that is up: where it lives and how a client reaches it."""

    directory: Path
    conf: Path
    mon_address: str
    s3_endpoint: str | None
    cephfs: Path | None
    pools: list[str]
    rbd_image: str
    max_object_size: int
    pidfiles: list[Path]
    fio_note: str = ""
    rados_pool: str = POOL
    rbd_pool: str = RBD_POOL

    def env(self) -> dict[str, str]:
        """The environment a client needs: CEPH_CONF and the S3 variables of s3.env."""
        s3 = self.directory / S3_ENV
        lines = s3.read_text().splitlines() if s3.exists() else []
        return {"CEPH_CONF": str(self.conf)} | {k: v for k, _, v in (line.partition("=") for line in lines) if v}

    def status(self) -> dict[str, Any]:
        """`ceph -s --format json`, parsed."""
        return dict(json.loads(ceph(self.conf, "-s", "--format", "json")))

    def drop_caches(self) -> None:
        """Empty every OSD's cache (pitfall 6), for cold reads."""
        ceph(self.conf, "tell", "osd.*", "cache", "drop")

    def pids(self) -> list[int]:
        """The pids in the daemons' pid files (those that exist)."""
        return [pid for pid in map(_read_pid, self.pidfiles) if pid]


def up(directory: Path = DEFAULT_DIR, *, rgw: bool = True, cephfs: bool = True) -> Cluster:
    """Bring a cluster up in `directory`; on any failure or interrupt, undo the steps taken and re-raise."""
    directory = trusted.safe_path(Path(directory))
    mon = f"[v2:127.0.0.1:{_free_port()},v1:127.0.0.1:{_free_port()}]"  # free now, not 3300 and 6789
    made = Made(str(directory), str(uuid.uuid4()), mon, check_can_make(directory))
    made.rgw_port = _free_port() if rgw else None
    with undone_on_failure(lambda: down(directory)):
        BED.data_dir(directory).make()
        BED.journal(made.directory).record(made, "directory")
        _start_mon(made)
        _start(made, "mgr.x", ["ceph-mgr", "-i", "x"])
        _start_osd(made)
        _link_etc_conf(made)
        _pool(made, POOL, "rados")
        _pool(made, RBD_POOL, "rbd")
        _run(["rbd", "-c", made.conf, "create", "--size", str(RBD_IMAGE_MIB), f"{RBD_POOL}/{RBD_IMAGE}"])
        made.rbd_image = RBD_IMAGE
        if rgw:  # radosgw makes its pools, then listens; the user's metadata makes one more: both before the wait
            _start(made, "client.rgw.a", ["radosgw", "-n", "client.rgw.a"])
            _s3_user(made)
        if cephfs:
            _start_mds(made)
        _wait_healthy(made)
        if cephfs:
            _mount(made)
        config = ["ceph-conf", "-c", made.conf, "--name", "osd.0", "--show-config-value", "osd_max_object_size"]
        made.max_object_size, made.complete = int(_run(config)), True  # left at its default (pitfall 4)
        BED.journal(made.directory).record(made, "complete")
    return _cluster(made)


def check_can_make(directory: Path) -> int:
    """Refuse what cannot work, in one line; else the OSD's file size (half the free disk, 24 GiB at most)."""
    if os.geteuid() != 0:
        raise CephError("needs root (daemons, /etc/ceph, ceph-fuse): run it as root, or with sudo")
    directory = trusted.safe_path(directory)
    BED.data_dir(directory).check_can_make()
    if len(str(directory)) > LONGEST_DIR:
        raise CephError(f"{directory}: too long for the unix sockets under it (at most {LONGEST_DIR} characters)")
    parent = next(p for p in (directory, *directory.parents) if p.exists())
    free = os.statvfs(parent).f_bavail * os.statvfs(parent).f_frsize
    if free // 2 < BLOCK_MIN:
        raise CephError(f"{parent}: {free / GiB:.1f} GiB free; the OSD's sparse file needs {2 * BLOCK_MIN // GiB}")
    return min(free // 2, BLOCK_MAX) // GiB * GiB


#: ceph.conf's settings (docs/ceph.md): loopback only, auth off, pools of size 1 and few PGs, one BlueStore OSD.
GLOBAL = {
    "public addr": "127.0.0.1",
    "cluster addr": "127.0.0.1",
    "ms bind ipv4": "true",
    "ms bind ipv6": "false",
    "auth cluster required": "none",
    "auth service required": "none",
    "auth client required": "none",
    "auth allow insecure global id reclaim": "false",  # else HEALTH_WARN
    "osd pool default size": "1",
    "osd pool default min size": "1",
    "mon allow pool size one": "true",
    "mon warn on pool no redundancy": "false",
    "osd crush chooseleaf type": "0",
    "osd pool default pg num": str(PGS),
    "osd pool default pgp num": str(PGS),
    "osd pool default pg autoscale mode": "off",
    "mon max pg per osd": "1000",  # radosgw makes 6-7 pools
    "mon data avail warn": "5",  # the host disk sits near the default 30 %
    "paxos propose interval": "0.1",  # a pool is made in 0.3 s, not 1 s: `up` takes 7 s, not 15
    "mds beacon interval": "1",  # a stopping MDS waits up to one for the monitor: 1 s, not 3-4
    "osd objectstore": "bluestore",
    "bluestore block create": "true",
    "osd memory target": "1536M",
}
#: Where each daemon keeps its files, all under the data directory.
PATHS = {
    "run dir": "run",
    "pid file": "run/$cluster-$name.pid",
    "admin socket": "run/$cluster-$name.asok",
    "log file": "log/$cluster-$name.log",
    "mon cluster log file": "log/$cluster.log",
    "crash dir": "crash",
    "mon data": "mon/$cluster-$id",
    "mgr data": "mgr/$cluster-$id",
    "osd data": "osd/$cluster-$id",
    "mds data": "mds/$cluster-$id",
    "keyring": "keyring",
}
#: Clients: crc modes (pitfall 2: radosgw hangs 300 s without them), timeouts (pitfall 5: a full OSD hangs them).
CLIENT = {
    "ms mon client mode": "crc",
    "ms client mode": "crc",
    "rados osd op timeout": "60",
    "rados mon op timeout": "60",
    "client mount timeout": "60",
}


def _write_conf(made: Made) -> None:
    """Write ceph.conf: [global], [client] (a socket per process: pitfall 9) and radosgw's section."""
    d = made.directory
    sections: dict[str, dict[str, object]] = {
        "global": {
            "fsid": made.fsid,
            "mon host": made.mon_address,
            **GLOBAL,
            "bluestore block size": made.block_size,
            **{key: f"{d}/{path}" for key, path in PATHS.items()},
        },
        "client": {**CLIENT, "admin socket": f"{d}/run/$cluster-$name.$pid.asok"},
        "client.rgw.a": {
            # tcp_nodelay: without it Nagle and delayed ACKs add ~40 ms to every small answer on a kept connection
            "rgw frontends": f"beast endpoint=127.0.0.1:{made.rgw_port} tcp_nodelay=1",
            "rgw data": f"{d}/rgw",
            # replaced and deleted objects' space back in minutes, not hours (a test run rewrites GiBs on a small OSD)
            "rgw gc obj min wait": 60,
            "rgw gc processor period": 60,
        },
    }
    text = "\n".join(f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items()) for name, kv in sections.items())
    Path(made.conf).write_text(text)


def _start_mon(made: Made) -> None:
    """The conf, the mon keyring and monmap, the monitor's store, then the monitor itself."""
    d = Path(made.directory)
    for sub in ("run", "log", "crash", "mon", "mgr/ceph-x", "osd", "mds/ceph-a", "rgw"):
        (d / sub).mkdir(parents=True)
    _write_conf(made)
    keyring, monmap = str(d / "mon.keyring"), str(d / "monmap")
    _run(["ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", "mon.", "--cap", "mon", "allow *"])
    _run(["monmaptool", "--create", "--addv", "a", made.mon_address, "--fsid", made.fsid, monmap])
    _run(["ceph-mon", "-c", made.conf, "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", keyring])
    _start(made, "mon.a", ["ceph-mon", "-i", "a"])


def _start(made: Made, name: str, argv: list[str]) -> None:
    """Start a daemon (it forks, then writes its pid file); its pid file is recorded before it starts."""
    made.pidfiles.append(f"{made.directory}/run/ceph-{name}.pid")
    BED.journal(made.directory).record(made, name)
    with (out := Path(made.directory) / "log" / f"{name}.out").open("ab") as log:
        argv = [argv[0], "-c", made.conf, *argv[1:]]
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=120, check=False)
    if done.returncode != 0:
        tail = " | ".join(out.read_text(errors="replace").splitlines()[-5:])
        raise CephError(f"{argv[0]} did not start (exit {done.returncode}; log/{out.name}): {tail}")


def _start_osd(made: Made) -> None:
    """Register an OSD, make its BlueStore on a sparse file in its data directory, start it."""
    osd_uuid = str(uuid.uuid4())
    osd_id = ceph(made.conf, "osd", "new", osd_uuid).strip()
    (Path(made.directory) / "osd" / f"ceph-{osd_id}").mkdir()
    _run(["ceph-osd", "-c", made.conf, "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid])
    _start(made, f"osd.{osd_id}", ["ceph-osd", "-i", osd_id])


def _link_etc_conf(made: Made) -> None:
    """Link /etc/ceph/ceph.conf to ours for fio's rados/rbd engines (pitfall 3), only where nothing is there."""
    with contextlib.suppress(OSError):  # a conf of the host's or another cluster's link: left alone
        ETC_CONF.symlink_to(made.conf)  # a link to our conf is ours, whether or not recorded before an interrupt
    made.linked = ETC_CONF.is_symlink() and os.readlink(ETC_CONF) == made.conf
    if not made.linked:
        made.fio_note = f"{ETC_CONF} is not this cluster's: fio's rados and rbd engines (they read it) won't see it"
    BED.journal(made.directory).record(made, "etc link")


def _pool(made: Made, name: str, application: str | None) -> None:
    """A pool of PGS placement groups, its application enabled (an unlabelled pool warns)."""
    made.pools.append(name)
    BED.journal(made.directory).record(made, f"pool {name}")
    ceph(made.conf, "osd", "pool", "create", name, str(PGS), str(PGS))
    if application:
        ceph(made.conf, "osd", "pool", "application", "enable", name, application)


def _start_mds(made: Made) -> None:
    """An MDS, a metadata and a data pool, and the file system over them (no standby wanted)."""
    _start(made, "mds.a", ["ceph-mds", "-i", "a"])
    for pool in FS_POOLS:
        _pool(made, pool, None)  # `fs new` labels them
    made.fs = True
    BED.journal(made.directory).record(made, "file system")
    ceph(made.conf, "fs", "new", FS_NAME, *FS_POOLS)
    ceph(made.conf, "fs", "set", FS_NAME, "standby_count_wanted", "0")


def _wait_healthy(made: Made, timeout: float = HEALTH_TIMEOUT) -> None:
    """Wait for HEALTH_OK, every PG active+clean, any MDS active and radosgw listening; else fail with `ceph -s`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(CephError, ValueError, KeyError):
            with socket.socket() as probe:  # radosgw listens once its pools exist
                rgw_ok = not made.rgw_port or probe.connect_ex(("127.0.0.1", made.rgw_port)) == 0
            status = json.loads(ceph(made.conf, "-s", "--format", "json"))
            pgs, fsmap = status["pgmap"], status["fsmap"]
            clean = sum(s["count"] for s in pgs["pgs_by_state"] if s["state_name"] == "active+clean")
            mds_ok = not made.fs or [r["status"] for r in fsmap["by_rank"]] == ["up:active"]
            if status["health"]["status"] == "HEALTH_OK" and pgs["num_pgs"] == clean > 0 and mds_ok and rgw_ok:
                return
        time.sleep(0.5)
    last = _run(["ceph", "-c", made.conf, "--connect-timeout", "10", "-s"], check=False)
    raise CephError(f"not HEALTH_OK with all PGs active+clean after {timeout:.0f} s:\n{last.rstrip()}")


def _mount(made: Made) -> None:
    """Mount CephFS by ceph-fuse at <directory>/cephfs (recorded first: an interrupt mid-mount is undone)."""
    mount = Path(made.directory) / "cephfs"
    mount.mkdir()
    made.mount = str(mount)
    _start(made, "client.admin", ["ceph-fuse", str(mount)])  # its parent exits once the mount is made, or failed


def _s3_user(made: Made) -> None:
    """An S3 user with a random key and secret, written to s3.env (mode 0600), never printed."""
    access, secret = secrets.token_hex(10).upper(), secrets.token_urlsafe(30)
    env = Path(made.directory) / S3_ENV
    with os.fdopen(os.open(env, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(f"AWS_ACCESS_KEY_ID={access}\nAWS_SECRET_ACCESS_KEY={secret}\n")
        out.write(f"AWS_ENDPOINT_URL=http://127.0.0.1:{made.rgw_port}\n")
    BED.journal(made.directory).record(made, "s3 user")
    _run(
        [
            "radosgw-admin",
            "-c",
            made.conf,
            "user",
            "create",
            "--uid=gdsbench",
            "--display-name=gdsbench",
            f"--access-key={access}",
            f"--secret-key={secret}",
        ]
    )


def _cluster(made: Made) -> Cluster:
    """The client's view of what was made."""
    s3 = f"http://127.0.0.1:{made.rgw_port}" if made.rgw_port else None
    fs = Path(made.mount) if made.mount else None
    pidfiles = [Path(p) for p in made.pidfiles]
    return Cluster(
        Path(made.directory),
        Path(made.conf),
        made.mon_address,
        s3,
        fs,
        list(made.pools),
        made.rbd_image or "",
        made.max_object_size,
        pidfiles,
        made.fio_note,
    )


def attach(directory: Path = DEFAULT_DIR) -> Cluster | None:
    """The cluster `up` finished in `directory`, or None (none there, or one whose `up` did not finish)."""
    made = BED.attach(directory, _load_state)
    return _cluster(made) if made else None


def _load_state(directory: Path) -> Made:
    """The state `up` wrote in a trusted `directory`: ours, of the expected form, naming nothing outside it."""
    state = BED.journal(directory)
    made = state.read(Made)
    wrong = [made.directory] if made.directory != str(directory) else []
    wrong += [made.mount] if made.mount not in (None, str(directory / "cephfs")) else []
    wrong += [p for p in made.pidfiles if Path(p).parent != directory / "run"]
    if wrong:
        raise CephError(f"{state.path}: names {', '.join(wrong)}, not what `up` makes in {directory}: left alone")
    return made


def down(directory: Path = DEFAULT_DIR) -> list[str]:
    """Undo what the state file says `up` made: unmount, stop the daemons, the /etc/ceph link, the directory."""
    if (folder := BED.data_dir(Path(directory).absolute()).ours()) is None:
        return []
    directory = folder
    made = _load_state(directory) if BED.journal(directory).exists() else Made(str(directory), "", "", 0)
    removed = []
    if made.mount and made.mount in _mounts():  # ceph-fuse exits once unmounted (pitfall 10)
        _run(["fusermount", "-u", made.mount] if shutil.which("fusermount") else ["umount", made.mount])
        removed.append(f"unmounted {made.mount}")
    if made.fs and (mds := _read_pid(Path(made.directory, "run", "ceph-mds.a.pid"))):
        _fail_fs(made, mds)
    removed += _stop_daemons(made)
    if ETC_CONF.is_symlink() and os.readlink(ETC_CONF) == made.conf:  # still ours
        ETC_CONF.unlink()
        removed.append(f"removed the link {ETC_CONF}")
    if mounts := [m for m in _mounts() if m == str(directory) or m.startswith(f"{directory}/")]:
        raise CephError(f"{', '.join(mounts)} still mounted: unmount it, then `gdsbench ceph down` again")
    shutil.rmtree(directory)
    return [*removed, f"removed {directory}"]


def _fail_fs(made: Made, mds: int) -> None:
    """Fail the file system; wait (5 s at most) for its MDS to respawn as a standby, which stops in 1 s."""
    # An active MDS can hang on SIGTERM for ever (seen while it purged a deleted file).
    with contextlib.suppress(CephError):
        trusted.read_text(Path(made.conf))  # the conf `up` wrote, not one planted (it names files ceph writes)
        ceph(made.conf, "--connect-timeout", "5", "fs", "fail", FS_NAME)
        deadline = time.monotonic() + 5
        while _read_pid(Path(made.directory, "run", "ceph-mds.a.pid")) in (mds, None) and time.monotonic() < deadline:
            time.sleep(0.05)


def _stop_daemons(made: Made) -> list[str]:
    """Stop the pid files' daemons one by one, last started first, then any process left with our conf."""
    # radosgw and the MDS hang on an OSD stopped under them, an OSD waits 5 s on a stopped monitor.
    daemons = {pid: Path(f).stem for f in made.pidfiles if (pid := _read_pid(Path(f))) and _started(pid, made.conf)}
    return stop_daemons(daemons, lambda pid: _started(pid, made.conf), STOP_TIMEOUT)


def _started(pid: int, conf: str) -> str | None:
    """The binary, where process `pid` is one `up` starts: `<ceph binary> -c <conf> ...`, run by us (not merely
    naming the conf); else None."""
    argv = _argv(pid)
    ours = owned_by_us(pid) and len(argv) > 2 and Path(argv[0]).name in BINARIES and argv[1:3] == ["-c", conf]
    return argv[0] if ours else None


def _mounts() -> list[str]:
    """Mount points now (sysinfo's reading of /proc/self/mounts)."""
    return [m.point for m in parse_mounts(MOUNTS.read_text())]


def ceph(conf: str | Path, *args: str) -> str:
    """Run the ceph CLI against a cluster's conf; its stdout."""
    return _run(["ceph", "-c", str(conf), *args])


def _run(argv: list[str], timeout: float = 120, env: dict[str, str] | None = None, check: bool = True) -> str:
    """BED.run with this cluster's default timeout (and, unchecked, what the tool said on stderr too)."""
    return BED.run(argv, timeout, env, check, with_stderr=not check)
