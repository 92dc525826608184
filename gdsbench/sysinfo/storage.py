"""Facts about the target directory's storage: its mount, block device (and RAID members), O_DIRECT
support, free space, and the reserved huge pages fio's hugetlb buffers need.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench.sysinfo.host import read_fact

MOUNTS = Path("/proc/self/mounts")
#: The kernel writes space, tab, newline and backslash in /proc/self/mounts fields as \040, \011, \012, \134.
_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of /proc/self/mounts: device, mount point and filesystem type, unescaped."""

    device: str
    point: str
    fstype: str


def unescape(field: str) -> str:
    """A /proc/self/mounts field with the kernel's octal escapes (\\040 = space, \\134 = backslash) decoded."""
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mounts(text: str) -> list[Mount]:
    """Every mount in /proc/self/mounts text, in the kernel's order (a later mount hides an earlier one)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) >= 3:
            mounts.append(Mount(unescape(fields[0]), unescape(fields[1]), unescape(fields[2])))
    return mounts


def mount_of(path: Path, mounts: list[Mount] | None = None) -> dict[str, str]:
    """The mount holding `path`: the longest mount point above it (the last one mounted when stacked)."""
    path = Path(path).resolve()
    if mounts is None:
        mounts = parse_mounts(read_fact(MOUNTS) or "")
    best: Mount | None = None
    for mount in mounts:
        point = Path(mount.point)
        if (path == point or point in path.parents) and (best is None or len(mount.point) >= len(best.point)):
            best = mount
    return {"mount_point": best.point, "device": best.device, "fstype": best.fstype} if best else {}


def block_device(device: str) -> dict[str, Any]:
    """Queue facts of the block device behind a mount (model, rotational, scheduler, max segments)."""
    name = Path(device).name
    base = Path("/sys/class/block") / name
    if not name or not base.exists():
        return {}
    queue = base / "queue" if (base / "queue").exists() else base.resolve().parent / "queue"
    facts: dict[str, Any] = {"name": name}
    for fact in ("rotational", "scheduler", "max_segments", "max_sectors_kb", "logical_block_size", "nr_requests"):
        facts[fact] = read_fact(queue / fact)
    facts["model"] = _model(base)
    facts["size_bytes"] = int(read_fact(base / "size") or 0) * 512
    facts["members"] = raid_members(name)
    return facts


def _model(device: Path) -> str | None:
    """A block device's model, from its own device folder or (for a partition) its disk's."""
    return read_fact(device / "device" / "model") or read_fact(device.resolve().parent / "device" / "model")


def raid_members(name: str) -> list[dict[str, str | None]]:
    """The devices under a software RAID (md) or device-mapper volume, with their models (from sysfs)."""
    slaves = Path("/sys/block") / name / "slaves"
    if not slaves.is_dir():
        return []
    return [
        {"name": slave.name, "model": _model(Path("/sys/class/block") / slave.name)}
        for slave in sorted(slaves.iterdir())
    ]


def odirect_works(directory: Path) -> tuple[bool, str]:
    """Whether O_DIRECT opens work in `directory`, and why not when they do not."""
    if not hasattr(os, "O_DIRECT"):
        return False, "this OS has no O_DIRECT"
    try:
        fd, name = tempfile.mkstemp(prefix=".gdsbench-probe-", dir=directory)
        os.close(fd)
    except OSError as exc:
        return False, f"cannot create a file in {directory}: {exc.strerror}"
    try:
        fd = os.open(name, os.O_RDWR | os.O_DIRECT)
        os.close(fd)
        return True, "ok"
    except OSError as exc:
        reason = "the filesystem refuses O_DIRECT" if exc.errno == errno.EINVAL else str(exc.strerror)
        return False, reason
    finally:
        with contextlib.suppress(OSError):  # the folder can go meanwhile (a file system unmounted, a folder removed)
            os.unlink(name)


def target(directory: Path) -> dict[str, Any]:
    """Filesystem, block device and O_DIRECT support of the directory the test files go to."""
    mount = mount_of(directory)
    usage = shutil.disk_usage(directory) if Path(directory).exists() else None
    works, why = odirect_works(directory) if Path(directory).is_dir() else (False, "no such directory")
    return {
        "directory": str(directory),
        **mount,
        "free_bytes": usage.free if usage else None,
        "odirect": works,
        "odirect_reason": why,
        "block_device": block_device(mount.get("device", "")),
    }


def huge_pages() -> tuple[int, int]:
    """(free reserved huge pages, huge page size in bytes) from /proc/meminfo; (0, 0) when unknown."""
    facts = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, value = line.partition(":")
            facts[name] = int(value.split()[0]) if value.split() else 0
    except (OSError, ValueError):
        return 0, 0
    return facts.get("HugePages_Free", 0), facts.get("Hugepagesize", 0) * 1024
