"""Test helpers for state another user plants: a folder others can write, files and links made as `nobody`."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Planting as another user needs root (runuser) and that user.
plants_as_nobody = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None, reason="plants files as `nobody`: needs root and runuser"
)


def as_nobody(*argv: str | Path, data: bytes | None = None) -> None:
    """Run a command as the unprivileged user `nobody` (an argument list, no shell)."""
    subprocess.run(["runuser", "-u", "nobody", "--", *map(str, argv)], input=data, check=True, capture_output=True)


@contextlib.contextmanager
def shared_folder(mode: int = 0o1777, owner: str = "root") -> Iterator[Path]:
    """A fresh folder under /tmp that others reach (tmp_path's parents are root's alone): sticky and
    world-writable by default, owned by `owner` ("nobody": one another user made). Removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="gdsbench-test-shared-", dir="/tmp"))
    try:
        folder.chmod(mode)
        if owner != "root":
            shutil.chown(folder, owner)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def plant_file(path: Path, data: bytes = b"planted", mode: int = 0o666) -> None:
    """A file of `nobody`'s at `path`, with `data`, that everyone may write."""
    as_nobody("tee", path, data=data)
    as_nobody("chmod", f"{mode:o}", path)


def plant_link(path: Path, target: Path) -> None:
    """A symlink of `nobody`'s at `path` pointing at `target`."""
    as_nobody("ln", "-s", target, path)


def victim(folder: Path, data: bytes = b"root's own bytes\n") -> Path:
    """A root-owned file, readable by nobody else, that planted state must not reach."""
    path = folder / "victim"
    path.write_bytes(data)
    path.chmod(0o600)
    return path
