"""Buffered I/O through the page cache: no alignment rules; the baseline and the tmpfs fallback."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class BufferedBackend:
    """Plain open(2) without O_DIRECT."""

    name: str = "buffered"
    alignment: int = 1

    def open_write(self, path: str) -> int:
        """Create (exclusively) `path` for writing."""
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)

    def open_read(self, path: str) -> int:
        """Open `path` read-only."""
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


BACKEND = BufferedBackend()
