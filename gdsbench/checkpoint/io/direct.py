"""O_DIRECT I/O: bypasses the page cache so several threads' pwrite/preadv go straight to the device.

Limits: every offset, length and memory address must be a multiple of 4096 (we use the page size,
which also satisfies 512-byte logical blocks); callers stage unaligned memory through aligned
buffers and pad the last page. tmpfs and some FUSE filesystems refuse O_DIRECT with EINVAL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ALIGNMENT = 4096


@dataclass(frozen=True)
class DirectBackend:
    """open(2) with O_DIRECT."""

    name: str = "direct"
    alignment: int = ALIGNMENT

    def open_write(self, path: str, existing: bool = False) -> int:
        """Create (exclusively) `path`, or open the `existing` one without truncating it, for O_DIRECT
        writes; EINVAL if the filesystem refuses."""
        flags = os.O_WRONLY | os.O_CLOEXEC | os.O_DIRECT
        if existing:
            return os.open(path, flags)
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            if os.path.exists(path):  # open created the file, then refused O_DIRECT
                os.unlink(path)
            raise

    def open_read(self, path: str) -> int:
        """Open `path` read-only with O_DIRECT; EINVAL if the filesystem refuses."""
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_DIRECT)


BACKEND = DirectBackend()
