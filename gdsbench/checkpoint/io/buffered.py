"""Buffered I/O through the page cache: no alignment rules; the baseline and the tmpfs fallback."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class BufferedBackend:
    """Plain open(2) without O_DIRECT."""

    name: str = "buffered"
    alignment: int = 1

    def open_write(self, path: str, existing: bool = False) -> int:
        """Create (exclusively) `path`, or open the `existing` one without truncating it, for writing."""
        flags = os.O_WRONLY | os.O_CLOEXEC
        return os.open(path, flags) if existing else os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)

    def open_read(self, path: str) -> int:
        """Open `path` read-only."""
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


BACKEND = BufferedBackend()
