"""The coordinator's commit of a DCP save: data checked present, sealed metadata renamed into place,
garbage removed, all under the directory's commit lock (lock.py; metadata.py has the protocol)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, StorageFull
from .lock import acquire, release, remove_if_unheld
from .metadata import read_metadata, referenced_files, write_metadata
from .records import DATA_NAME, METADATA, TEMP_NAME

FULL = (errno.ENOSPC, errno.EDQUOT)


def commit(directory: Path, metadata: Any, save_id: str) -> list[str]:
    """Make `metadata` the directory's checkpoint, durably; return the names of the files removed after."""
    lock = acquire(directory)
    try:
        replaced = committed_files(directory)
        check_written(directory, metadata)
        try:
            write_metadata(directory, metadata, save_id)
        except OSError as e:
            raise full_error(e, directory, "the metadata did not fit; the previous checkpoint stays") from e
        keep = referenced_files(metadata)
        return remove_garbage(directory, keep, replaced or set(), locked=lock is not None and replaced is not None)
    finally:
        release(lock)


def check_written(directory: Path, metadata: Any) -> None:
    """Every data file the metadata names is here, a regular file holding every chunk recorded in it."""
    for name, end in sorted(data_ends(metadata).items()):
        try:
            st = os.stat(directory / name, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode) or st.st_size < end:
            raise CheckpointError(
                f"{directory / name}: a rank's data file is gone or short before the commit "
                "(removed by another job?); the previous checkpoint stays"
            )


def data_ends(metadata: Any) -> dict[str, int]:
    """Each data file the metadata names, and where its last recorded chunk ends (the least size it must have)."""
    ends: dict[str, int] = {}
    for record in metadata.storage_data.values():
        end = max((offset + stored for offset, stored in record.chunks), default=0)
        ends[record.file] = max(ends.get(record.file, 0), end)
    return ends


def full_error(error: OSError, directory: Path, detail: str) -> OSError:
    """StorageFull (with the file system's free space) for ENOSPC/EDQUOT; any other error as it is."""
    if error.errno not in FULL:
        return error
    try:
        fs = os.statvfs(directory)
        space = f"; {fs.f_bavail * fs.f_frsize} of {fs.f_blocks * fs.f_frsize} bytes free now"
    except OSError:
        space = ""
    return StorageFull(directory, error.errno, detail + space)


def committed_files(directory: Path) -> set[str] | None:
    """The data files the checkpoint committed in `directory` names: empty if there is none, None if its
    metadata cannot be read (then nothing is known to be garbage)."""
    if not os.path.lexists(directory / METADATA):
        return set()
    try:
        return referenced_files(read_metadata(directory))
    except (CheckpointError, OSError):
        return None


def remove_garbage(directory: Path, keep: set[str], replaced: set[str], locked: bool) -> list[str]:
    """After a commit: remove the data files the replaced metadata named (a committed save's, now superseded),
    and, under the commit lock (`locked`), orphans of saves that died (data files no live writer holds,
    metadata temp files of commits that died). ckptio's names only; `keep` (the new metadata's files) and
    anything else in the directory stay. Returns the names removed."""
    removed = []
    for entry in os.scandir(directory):
        if entry.name in keep or not entry.is_file(follow_symlinks=False):
            continue
        if DATA_NAME.fullmatch(entry.name) and entry.name in replaced:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
            removed.append(entry.name)
        elif locked and DATA_NAME.fullmatch(entry.name) and remove_if_unheld(entry.path):
            removed.append(entry.name)
        elif locked and TEMP_NAME.fullmatch(entry.name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
            removed.append(entry.name)
    return sorted(removed)
