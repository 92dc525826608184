"""Saves to one checkpoint directory never remove each other's files: two kinds of flock.

- A rank creates its data file and takes a shared flock on it before writing a byte, and holds it until
  its next save writes or the Writer closes (after the commit: the coordinator commits before any rank's
  save returns). A cleanup removes an unreferenced data file only after taking an exclusive flock on it
  without waiting: a file whose writer is alive, hence may still be committed, is never removed.
- The coordinator commits (metadata written and renamed, replaced files removed, orphans swept) under
  an exclusive flock on `.dcp-save.lock`, so two commits never interleave; a commit waits up to
  WAIT_SECONDS for another one, then fails with CheckpointBusy naming the holder.
flock locks die with their process (a SIGKILLed rank never leaves one behind) and NFS maps them to
server-side locks. On a file system without flock (Lustre mounted without `-o flock`) commits go on
unlocked and remove only what the replaced metadata named. The lock file is created once and left in
place; it holds the last holder's host and pid.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
import warnings
from pathlib import Path
from typing import IO

from ..errors import CheckpointBusy

LOCK_NAME = ".dcp-save.lock"
WAIT_SECONDS = 120.0  # a save waits this long for another save to commit before failing
POLL_SECONDS = 0.05
UNSUPPORTED = (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL)


def acquire(directory: Path, wait: float = WAIT_SECONDS, shared: bool = False) -> IO[bytes] | None:
    """The directory's save lock, held by the returned open file (closing it releases the lock); None where
    the file system has no flock. CheckpointBusy after `wait` seconds if another save keeps it. A commit holds
    it exclusively; `shared` is a writer creating its data file (no commit's sweep may run meanwhile)."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    f = os.fdopen(fd, "r+b", buffering=0)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(f.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            break
        except OSError as e:
            if e.errno in UNSUPPORTED:
                f.close()
                _warn_unlocked(directory, e)
                return None
            if e.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                holder = _holder(f)
                f.close()
                raise CheckpointBusy(directory, holder, wait) from None
        time.sleep(POLL_SECONDS)
    if not shared:
        f.truncate(0)
        f.write(f"host={socket.gethostname()} pid={os.getpid()}\n".encode())
    return f


def create_held(path: str) -> int:
    """Create `path` exclusively and hold a shared flock on it (a live writer's mark); the descriptor. The
    directory's lock is held shared meanwhile: a commit sweeping unheld files (under that lock, exclusive) never
    sees the new file in the moment between its creation and its flock, and never removes it."""
    creating = acquire(Path(path).parent, shared=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in UNSUPPORTED:
                os.close(fd)
                raise
    finally:
        release(creating)
    return fd


def remove_if_unheld(path: str) -> bool:
    """Unlink `path` if no live writer holds it (its exclusive flock taken without waiting); whether removed.
    Without flock support nothing proves a writer dead: the file is kept."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def release(lock: IO[bytes] | None) -> None:
    """Let the lock go (None: nothing held)."""
    if lock is not None and not lock.closed:
        lock.close()


def _holder(f: IO[bytes]) -> str:
    """Who holds the lock, as its holder wrote it."""
    try:
        return os.pread(f.fileno(), 200, 0).decode(errors="replace").strip()
    except OSError:
        return ""


def _warn_unlocked(directory: Path, error: OSError) -> None:
    """Say that saves to this directory are not serialised here."""
    warnings.warn(
        f"{directory}: no flock on this file system ({error.strerror}): concurrent saves are not serialised; "
        "each commit removes only the files the checkpoint it replaced named",
        RuntimeWarning,
        stacklevel=3,
    )
