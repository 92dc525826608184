"""A fast-device stand-in: a RAM-backed block device that honours O_DIRECT, for measuring what an engine does
when the disk is no longer the limit (a GPU server's NVMe array runs 25-50 GB/s; this VM's disk 0.6-3 GB/s).

`up` makes a private folder in /dev/shm (mode 0700, a random name) holding the backing file, attaches it to a
loop device with direct I/O (`losetup --direct-io=on`), puts ext4 on it and mounts it; `down` undoes exactly that.
Root only. What was made is recorded in a journal only root can write (/run/gdsbench/fastdev.json) as it is
made (testbeds/journal.py), so `down` removes only what `up` created (a mount only where the recorded loop device is mounted at the
recorded mount point, a folder only if still ours), and a failed or interrupted `up` undoes its own steps before
it returns. Every tool runs as an argument list.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gdsbench import trusted
from gdsbench.errors import GdsbenchError
from gdsbench.sysinfo import host
from gdsbench.sysinfo.storage import MOUNTS, parse_mounts
from gdsbench.testbeds.journal import Journal, undone_on_failure
from gdsbench.units import size_label

SHM = Path("/dev/shm")
STATE_DIR = Path("/run/gdsbench")
STATE = STATE_DIR / "fastdev.json"
JOURNAL = Journal(STATE)
#: The backing file's private folder in /dev/shm: this prefix and 12 random hex digits.
FOLDER_PREFIX, BACKING_NAME = "gdsbench-fastdev-", "fastdev.img"
MOUNT = Path("/mnt/gdsbench-fast")
#: Share of available memory a default-sized device takes, and its bounds.
SHARE, SMALLEST, LARGEST = 0.25, 1 << 30, 64 << 30
#: The share of free memory (and of /dev/shm) a device may take.
ROOM = 0.9
MiB, GiB = 1 << 20, 1 << 30


class FastDevError(GdsbenchError):
    """The stand-in cannot be made or removed: says why and what to do."""

    exit_code = 2


@dataclass
class Made:
    """What `up` created, step by step (recorded as each exists)."""

    backing: str
    mount: str
    size: int
    loop: str | None = None
    mounted: bool = False
    made_mount: bool = False
    steps: list[str] = field(default_factory=list)


def default_size() -> int:
    """A quarter of available memory in whole GiB, between 1 GiB and 64 GiB."""
    available = _meminfo("MemAvailable")
    return int(min(max(available * SHARE, SMALLEST), LARGEST)) // (1 << 30) * (1 << 30)


def _meminfo(key: str) -> int:
    """A /proc/meminfo figure in bytes."""
    found = host.meminfo(key)
    if found is None:
        raise FastDevError(f"/proc/meminfo has no {key}")
    return found


def check_can_make(size: int) -> None:
    """Refuse, in one line, what cannot work: not root, one already up, too little memory or /dev/shm."""
    if os.geteuid() != 0:
        raise FastDevError("needs root (losetup, mkfs.ext4, mount): run it as root, or with sudo")
    if JOURNAL.exists():
        raise FastDevError(f"a stand-in is already up ({STATE}); `gdsbench fastdev down` removes it")
    free, available = os.statvfs(SHM).f_bavail * os.statvfs(SHM).f_frsize, _meminfo("MemAvailable")
    if size > min(free, available) * ROOM:
        fits = int(min(free, available) * ROOM)
        fits = fits // GiB * GiB if fits >= GiB else fits // MiB * MiB
        raise FastDevError(
            f"--size {size_label(size)} does not fit: {free / GiB:.1f} GiB free in /dev/shm, "
            f"{available / GiB:.1f} GiB of memory available; --size {size_label(fits)} fits"
        )


def up(size: int | None = None, mount: Path = MOUNT) -> Made:
    """Make the stand-in and mount it at `mount`; on any failure or interrupt, undo the steps taken."""
    size = size or default_size()
    check_can_make(size)
    trusted.private_folder(STATE_DIR)
    mount = _check_mount(mount)
    made = Made(str(SHM / f"{FOLDER_PREFIX}{secrets.token_hex(6)}" / BACKING_NAME), str(mount), size)
    with undone_on_failure(down):
        JOURNAL.record(made, "backing")  # before it is made: an interrupt mid-step is undone too
        _backing(Path(made.backing), size)
        made.loop = _run(["losetup", "--find", "--show", "--direct-io=on", made.backing]).strip()
        JOURNAL.record(made, "loop")
        _run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", made.loop])
        if not os.path.lexists(mount):
            mount.mkdir(parents=True)
            made.made_mount = True
            JOURNAL.record(made, "mountpoint")
        _run(["mount", made.loop, str(mount)])
        made.mounted = True
        JOURNAL.record(made, "mounted")
    return made


def _check_mount(mount: Path) -> Path:
    """The mount point, its folders trusted; one that exists must be ours (no link, not writable by others)."""
    mount = trusted.safe_path(mount)
    if os.path.lexists(mount):
        trusted.check_owned(mount)
    return mount


def _backing(backing: Path, size: int) -> None:
    """The backing file in a new private folder, its memory reserved now (a short /dev/shm fails here)."""
    try:
        os.mkdir(backing.parent, 0o700)
    except FileExistsError:
        raise FastDevError(f"{backing.parent} exists already: not made by gdsbench here, so left alone") from None
    with open(os.open(backing, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as out:
        os.posix_fallocate(out.fileno(), 0, size)


def down() -> list[str]:
    """Undo what the state file says `up` made, last step first; return what was removed."""
    made = status()
    if made is None:
        return []
    removed = []
    if made.loop and _mounted(made.loop, made.mount):
        _run(["umount", made.mount])
        removed.append(f"unmounted {made.mount}")
    if made.made_mount:
        with contextlib.suppress(OSError):
            Path(made.mount).rmdir()
            removed.append(f"removed {made.mount}")
    if "backing" in made.steps and _ours(Path(made.backing).parent):
        # every loop device over our file, even one attached before it was recorded
        for loop in _run(["losetup", "--noheadings", "--output", "NAME", "--associated", made.backing]).split():
            _run(["losetup", "--detach", loop])
            removed.append(f"detached {loop}")
        Path(made.backing).unlink(missing_ok=True)
        Path(made.backing).parent.rmdir()
        removed.append(f"removed {made.backing}")
    JOURNAL.erase()
    return removed


def status() -> Made | None:
    """What is up now (from a state file only root can have written, of the expected form), or None."""
    if not JOURNAL.exists():
        return None
    made = JOURNAL.read(Made)  # from a folder and file only root can have written
    backing = Path(made.backing)
    if backing.name != BACKING_NAME or backing.parent.parent != SHM or not _made_name(backing.parent.name):
        raise FastDevError(f"{STATE}: the backing file {made.backing} is not one `up` makes: left alone")
    if made.loop is not None and not re.fullmatch(r"/dev/loop\d+", made.loop):
        raise FastDevError(f"{STATE}: {made.loop} is not a loop device: left alone")
    return made


def _made_name(name: str) -> bool:
    """A private folder's name as `up` makes it."""
    return re.fullmatch(re.escape(FOLDER_PREFIX) + "[0-9a-f]{12}", name) is not None


def _ours(folder: Path) -> bool:
    """The backing file's folder exists and is still ours (made by `up`: no link, ours, mode 0700)."""
    with contextlib.suppress(OSError, trusted.UntrustedError):
        return trusted.check_owned(folder).st_mode & 0o777 == 0o700
    return False


def _mounted(source: str, target: str) -> bool:
    """`source` is mounted at `target` now (sysinfo's reading of /proc/self/mounts)."""
    return any((m.device, m.point) == (source, target) for m in parse_mounts(MOUNTS.read_text()))


def _run(argv: list[str]) -> str:
    """Run a tool (an argument list); its stdout, or FastDevError naming the command and its message."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except FileNotFoundError:
        raise FastDevError(f"{argv[0]} not found (util-linux, e2fsprogs)") from None
    if done.returncode != 0:
        raise FastDevError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip() or f'exit {done.returncode}'}")
    return done.stdout
