"""I/O backends: how a checkpoint file is opened and what alignment its transfers need.

The engines in save.py/load.py chunk the work and run os.pwrite/os.preadv in threads (both release
the GIL); a backend only decides the open flags and the alignment rule. `choose` picks one, falling
back from O_DIRECT to buffered I/O with a warning where the filesystem refuses O_DIRECT (tmpfs).
"""

from __future__ import annotations

import os
import warnings
from typing import Protocol

from ..errors import BackendUnavailable, DirectIOFallbackWarning
from . import buffered, direct, gds


class Backend(Protocol):
    """A way to open checkpoint files for parallel positional I/O."""

    name: str
    alignment: int  # offsets, lengths and memory addresses must be multiples of this (1: none)

    def open_write(self, path: str, existing: bool = False) -> int:
        """Create `path` (or open it to overwrite in place, `existing`) for writing and return its fd
        (raises OSError EINVAL if unsupported)."""
        ...

    def open_read(self, path: str) -> int:
        """Open `path` for reading and return its fd (raises OSError EINVAL if unsupported)."""
        ...


BACKENDS: dict[str, Backend] = {"buffered": buffered.BACKEND, "direct": direct.BACKEND}  # type: ignore[dict-item]
NAMES = ("auto", "direct", "buffered", "gds")


def check_name(requested: str) -> None:
    """Reject unknown backend names early with the list of valid ones."""
    if requested not in NAMES:
        raise ValueError(f"backend must be one of {NAMES}, not {requested!r}")


def open_with_fallback(path: str, requested: str, write: bool, existing: bool = False) -> tuple[Backend, int]:
    """Open `path` with the requested backend; O_DIRECT refused (EINVAL) -> buffered + warning.

    `existing` (writes only): open the file that is there to overwrite it in place, never truncating.
    """
    check_name(requested)
    if requested == "gds":
        reason = gds.unavailable()
        raise BackendUnavailable("gds", reason or "gds moves data to CUDA tensors only (load with map_location='cuda')")
    backend = BACKENDS["buffered" if requested == "buffered" else "direct"]
    try:
        return backend, backend.open_write(path, existing) if write else backend.open_read(path)
    except OSError as e:
        if backend.name != "direct" or e.errno != 22:  # EINVAL: filesystem refuses O_DIRECT
            raise
    warnings.warn(
        f"O_DIRECT not supported for {path} (EINVAL; tmpfs?): using buffered I/O",
        DirectIOFallbackWarning,
        stacklevel=4,
    )
    fallback = BACKENDS["buffered"]
    return fallback, fallback.open_write(path, existing) if write else fallback.open_read(path)


def write_all(fd: int, data: memoryview, offset: int) -> None:
    """pwrite until every byte is written (pwrite may be short)."""
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def read_full(fd: int, dest: memoryview, offset: int) -> int:
    """preadv until `dest` is full or EOF; return the number of bytes read."""
    done = 0
    while done < len(dest):
        got = os.preadv(fd, [dest[done:]], offset + done)
        if got == 0:
            break
        done += got
    return done
