"""Host memory (`memory://<name>`): checkpoints in a RAM file system, which outlive the training process (a crash,
a restart) but not the node, as ML Flashpoint's tmpfs tier. `memory://run1` is the folder run1 of this user's own
/dev/shm/ckptio-<uid> (made ours alone, mode 0700: /dev/shm is everyone's); `memory:///path` a folder on a tmpfs or
ramfs the user names (refused on any other file system). In everything else it is a local folder (files.py: a temp
file renamed into place, loads pinned, a tier ours alone); a tier here checks, before each save, that the state
fits in the memory left (StorageFull otherwise, before a byte is written)."""

from __future__ import annotations

import errno
import os
import re
from typing import Any

from ..errors import InvalidLocation, StorageFull
from ..options import IOOptions
from .base import Traits
from .files import Files, LocalTier

SCHEME = "memory"
SHARED_MEMORY = "/dev/shm"
RAM_FILESYSTEMS = ("tmpfs", "ramfs")
NAME = re.compile(r"[A-Za-z0-9._-]{1,128}(/[A-Za-z0-9._-]{1,128}){0,15}")


def user_root() -> str:
    """This user's folder of memory checkpoints in /dev/shm."""
    return os.path.join(SHARED_MEMORY, f"ckptio-{os.geteuid()}")


def file_system(path: str) -> str:
    """The type of the file system holding `path` (the longest mount point above it, /proc/self/mounts)."""
    real, best, kind = os.path.realpath(path), "", ""
    with open("/proc/self/mounts", encoding="utf-8", errors="replace") as mounts:
        for line in mounts:
            fields = line.split()
            if len(fields) < 3:
                continue
            point = fields[1].encode().decode("unicode_escape")
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind


def parse(location: str) -> str:
    """The folder a memory location names; InvalidLocation for a name that is not plain segments or a path not
    on a RAM file system."""
    rest = location[len(SCHEME) + 3 :]
    if rest.startswith("/"):
        found = file_system(os.path.dirname(rest.rstrip("/")) or "/")
        if found not in RAM_FILESYSTEMS:
            raise InvalidLocation(location, f"{rest} is on {found or 'an unknown file system'}, not in memory (tmpfs)")
        return os.path.normpath(rest)
    if not NAME.fullmatch(rest) or any(part in (".", "..") for part in rest.split("/")):
        raise InvalidLocation(location, "expected memory://name (plain segments: letters, digits, '.', '_', '-')")
    return os.path.join(user_root(), rest)


def available_bytes() -> int | None:
    """Memory the kernel can still give (MemAvailable), None where /proc/meminfo does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


class MemoryTier(LocalTier):
    """A tier in memory: a local tier whose saves must first fit in the memory left."""

    def room_for(self, nbytes: int) -> None:
        """StorageFull, naming both figures, where a save of `nbytes` would not fit: in the memory the kernel can
        still give, nor in the RAM file system's free space."""
        st = os.statvfs(self.path)
        free, available = st.f_bavail * st.f_frsize, available_bytes()
        room = min(free, available) if available is not None else free
        if nbytes > room:
            raise StorageFull(
                self.path,
                errno.ENOSPC,
                f"a save of {nbytes} bytes does not fit in memory: {available} bytes available (MemAvailable), "
                f"{free} free in the RAM file system; keep fewer steps or free memory",
            )


class Memory(Files):
    scheme = SCHEME
    traits = Traits(atomic="rename", listable=True, collective=False, survives="process", from_memory=True)

    def __init__(self, location: str) -> None:
        super().__init__(parse(location))

    def tier(self, options: IOOptions, keep: int) -> Any:
        return MemoryTier(self.path)


PLACE = Memory
