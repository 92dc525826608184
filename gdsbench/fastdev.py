"""A fast-device stand-in: a RAM-backed block device that honours O_DIRECT, for measuring what an engine does
when the disk is no longer the limit (a GPU server's NVMe array runs 25-50 GB/s; this VM's disk 0.6-3 GB/s).

`up` makes a file in /dev/shm, attaches it to a loop device with direct I/O (`losetup --direct-io=on`), puts
ext4 on it and mounts it; `down` undoes exactly that. Root only. What was made is recorded in a state file
(/dev/shm/gdsbench-fastdev.json) as it is made, so `down` removes only what `up` created, and a failed or
interrupted `up` undoes its own steps before it returns. Every tool runs as an argument list.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gdsbench.errors import GdsbenchError
from gdsbench.results import replace_file
from gdsbench.units import size_label

SHM = Path("/dev/shm")
STATE = SHM / "gdsbench-fastdev.json"
BACKING = SHM / "gdsbench-fastdev.img"
MOUNT = Path("/mnt/gdsbench-fast")
#: Share of available memory a default-sized device takes, and its bounds.
SHARE, SMALLEST, LARGEST = 0.25, 1 << 30, 64 << 30


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
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0]) * 1024
    raise FastDevError(f"/proc/meminfo has no {key}")


def check_can_make(size: int) -> None:
    """Refuse, in one line, what cannot work: not root, one already up, too little memory or /dev/shm."""
    if os.geteuid() != 0:
        raise FastDevError("needs root (losetup, mkfs.ext4, mount): run it as root, or with sudo")
    if STATE.exists():
        raise FastDevError(f"a stand-in is already up ({STATE}); `gdsbench fastdev down` removes it")
    free = os.statvfs(SHM).f_bavail * os.statvfs(SHM).f_frsize
    if size > min(free, _meminfo("MemAvailable")) * 0.9:
        raise FastDevError(f"--size {size_label(size)} does not fit: {size_label(free)} free in /dev/shm")


def up(size: int | None = None, mount: Path = MOUNT) -> Made:
    """Make the stand-in and mount it at `mount`; on any failure or interrupt, undo the steps taken."""
    size = size or default_size()
    check_can_make(size)
    made = Made(str(BACKING), str(mount), size)
    try:
        _step(made, "backing", lambda: _backing(size))
        made.loop = _run(["losetup", "--find", "--show", "--direct-io=on", str(BACKING)]).strip()
        _record(made, "loop")
        _run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", made.loop])
        if not mount.exists():
            mount.mkdir(parents=True)
            made.made_mount = True
            _record(made, "mountpoint")
        _run(["mount", made.loop, str(mount)])
        made.mounted = True
        _record(made, "mounted")
    except BaseException:
        down()
        raise
    return made


def _backing(size: int) -> None:
    """The backing file, its memory reserved now (a short /dev/shm fails here, not mid-benchmark)."""
    with BACKING.open("xb") as out:
        os.posix_fallocate(out.fileno(), 0, size)


def _step(made: Made, name: str, action: Callable[[], object]) -> None:
    """Record the step before taking it (so an interrupt mid-step is undone too), then take it."""
    _record(made, name)
    action()


def _record(made: Made, name: str) -> None:
    """Write what exists so far, atomically."""
    made.steps.append(name)
    replace_file(STATE, lambda out: out.write(json.dumps(asdict(made))))


def down() -> list[str]:
    """Undo what the state file says `up` made, last step first; return what was removed."""
    if not STATE.exists():
        return []
    made = Made(**json.loads(STATE.read_text()))
    removed = []
    if made.mounted:
        _run(["umount", made.mount])
        removed.append(f"unmounted {made.mount}")
    if made.made_mount:
        with contextlib.suppress(OSError):
            Path(made.mount).rmdir()
            removed.append(f"removed {made.mount}")
    if "backing" in made.steps:  # every loop device over our file, even one attached before it was recorded
        for loop in _run(["losetup", "--noheadings", "--output", "NAME", "--associated", made.backing]).split():
            _run(["losetup", "--detach", loop])
            removed.append(f"detached {loop}")
        Path(made.backing).unlink(missing_ok=True)
        removed.append(f"removed {made.backing}")
    STATE.unlink()
    return removed


def status() -> Made | None:
    """What is up now, or None."""
    return Made(**json.loads(STATE.read_text())) if STATE.exists() else None


def _run(argv: list[str]) -> str:
    """Run a tool (an argument list); its stdout, or FastDevError naming the command and its message."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    except FileNotFoundError:
        raise FastDevError(f"{argv[0]} not found (util-linux, e2fsprogs)") from None
    if done.returncode != 0:
        raise FastDevError(f"{' '.join(argv)}: {(done.stderr or done.stdout).strip() or f'exit {done.returncode}'}")
    return done.stdout
