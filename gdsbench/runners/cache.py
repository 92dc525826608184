"""Page-cache control, a condition runners set before a measurement (cold or warm reads).

Not a fact about the machine (that is gdsbench.sysinfo): these calls change the machine's state.
"""

from __future__ import annotations

import os
from pathlib import Path


def is_root() -> bool:
    """True when running as root (drop_caches needs it)."""
    return os.geteuid() == 0


def drop_caches() -> bool:
    """Write back dirty pages and drop the whole page cache (root only); True when it worked."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def evict(path: Path) -> None:
    """Drop one file's cached pages (posix_fadvise DONTNEED), the unprivileged way to read it cold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
