"""File utilities shared by the results files and the testbeds' journals: a file replaced whole or not at all."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TextIO


def replace_file(path: Path, write: Callable[[TextIO], object]) -> None:
    """Create or replace `path` whole or not at all: `write` fills a new file in the same folder, which is
    fsynced, renamed over `path` (keeping its mode) and the folder fsynced; an interruption leaves the old
    file or the new one, never half of one, and no temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for any new file
    try:
        with os.fdopen(fd, "w", newline="") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            shutil.copymode(path, temp)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)  # our own temp file, never the target
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
