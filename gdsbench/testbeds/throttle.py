"""A device made slower on purpose, for testing a gate's power: a blkio (cgroup v1) group that caps the read and
write bandwidth of the block device under a folder; what runs in it (a process enters with `enter`) is
throttled by the kernel itself. Made with an unguessable name and removed after, by whoever made it (root)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from gdsbench.errors import GdsbenchError

BLKIO = Path("/sys/fs/cgroup/blkio")


class ThrottleError(GdsbenchError):
    """No blkio throttle here (no cgroup v1 blkio controller, or not root)."""


def available() -> str | None:
    """Why a throttle cannot be made here (None: it can)."""
    if os.geteuid() != 0:
        return "a blkio throttle needs root"
    if not (BLKIO / "blkio.throttle.read_bps_device").exists():
        return f"no cgroup v1 blkio throttle at {BLKIO}"
    return None


@contextlib.contextmanager
def throttled(folder: Path, read_bps: int, write_bps: int | None = None) -> Iterator[Path]:
    """A blkio group capping the device under `folder` at `read_bps` (and `write_bps`) bytes/s; its path, for
    `enter`. Removed when the block ends (once its processes have)."""
    why = available()
    if why:
        raise ThrottleError(why)
    device = os.stat(folder).st_dev
    rule = f"{os.major(device)}:{os.minor(device)}"
    group = BLKIO / f"gdsbench-throttle-{uuid.uuid4().hex[:12]}"
    group.mkdir(mode=0o755)
    try:
        (group / "blkio.throttle.read_bps_device").write_text(f"{rule} {int(read_bps)}")
        if write_bps is not None:
            (group / "blkio.throttle.write_bps_device").write_text(f"{rule} {int(write_bps)}")
        yield group
    finally:
        group.rmdir()


def enter(group: Path) -> None:
    """Move this process into `group` (as a child's preexec_fn: the child and what it starts are throttled)."""
    (group / "cgroup.procs").write_text(str(os.getpid()))
