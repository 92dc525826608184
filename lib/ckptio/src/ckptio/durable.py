"""Crash-safe replacement of a file: temp name in the same directory, fsync, rename, fsync dir.

Only in a folder no other user controls (folder.py: every folder on the way ours or root's, writable by no one
else unless sticky, and in a sticky one the name ours), the temp file created exclusively and never through a
link: names there cannot be swapped under the save.

A SIGKILL at any moment leaves either the previous file or the new complete one under the final
name; at worst a temp file `.NAME.HOST.BOOT.PID.START.TOKEN.ckptio-tmp` is left behind. The next
save to the same path removes it once it can prove the writer is gone: same host and boot, and no
process with that pid and start time (a reused pid has another start time). Temp files of other
hosts sharing the file system are never touched: nothing here can prove those writers dead.

Recycling (a Checkpointer's opt-in): the replaced generation is kept under `.NAME.ckptio-spare`
and the next save overwrites its blocks in place before renaming it over NAME, as repeated saves to
one path do in training. Writing into allocated, written blocks skips ext4's allocation and extent conversion and,
on thin-provisioned or discard-mounted disks, the re-backing of freed blocks (on this project's VM:
1.5-1.7x new-file writes when the spare was written minutes before, no gain when it was older;
docs/benchmarks.md). The live file is never written: a spare is overwritten only
when it has exactly one name and no process has it open (proved by taking a write lease on it), so
a reader still holding the old generation keeps it intact. Cost: disk space for two generations.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .folder import check_destination, resolved_folder

TEMP_SUFFIX = ".ckptio-tmp"
SPARE_SUFFIX = ".ckptio-spare"
#: Temp files of gdsbench 0.1's saves (same fields, older suffix): removed alike once their writer is gone.
TEMP_SUFFIXES = (TEMP_SUFFIX, ".gdsbench-tmp")


@dataclass(frozen=True)
class Target:
    """Where a save writes before the rename: `path`, and whether it is a recycled file to overwrite."""

    path: str
    recycled: bool = False


def _boot_id() -> str:
    """This boot's id (8 hex digits), so a pid from before a reboot is never mistaken for a live one."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")[:8]
    except OSError:
        return "noboot"


def _start_time(pid: int) -> str | None:
    """A process's start time in clock ticks since boot (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat_line.rsplit(")", 1)[1].split()[19]  # fields after the command name, which may hold spaces


def _host() -> str:
    """This host's name as it can stand inside a file name."""
    return socket.gethostname().replace("/", "_") or "localhost"


def temp_path(path: str) -> str:
    """A unique temp name beside `path` naming the writer: host, boot, pid and the process's start time."""
    head, base = os.path.split(path)
    me = f"{_host()}.{_boot_id()}.{os.getpid()}.{_start_time(os.getpid())}"
    return os.path.join(head, f".{base}.{me}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def spare_path(path: str) -> str:
    """Where the generation replaced by a recycling save waits to be overwritten by the next one."""
    head, base = os.path.split(path)
    return os.path.join(head, f".{base}{SPARE_SUFFIX}")


def writer_gone(host: str, boot: str, pid: str, start: str) -> bool:
    """Whether the writer a temp name records is provably dead: on this host and boot, and no process
    with its pid and start time exists. Anything else (another host, unparsable) counts as alive."""
    if host != _host() or boot != _boot_id() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != start


def stale_temps(path: str) -> list[str]:
    """Temp files left beside `path` by saves whose process is provably gone."""
    head, base = os.path.split(path)
    prefix = f".{base}."
    found = []
    for name in os.listdir(head or "."):
        suffix = next((s for s in TEMP_SUFFIXES if name.endswith(s)), None)
        if not name.startswith(prefix) or suffix is None:
            continue
        parts = name[len(prefix) : -len(suffix)].rsplit(".", 4)
        if len(parts) == 5 and writer_gone(*parts[:4]):
            found.append(os.path.join(head, name))
    return found


def remove_stale_temps(path: str) -> None:
    """Delete temp files of dead saves to `path` that this user made (another user's are left alone, whatever
    their name says; another process may race us: ignore ENOENT)."""
    for name in stale_temps(path):
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(name).st_uid == os.geteuid():
                os.unlink(name)


def fsync_dir(directory: str) -> None:
    """fsync a directory so a rename inside it is durable."""
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        _fsync_held(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def replace_atomically(path: str, *, recycle: bool = False) -> Iterator[Target]:
    """Yield a Target to write (caller fsyncs it); on success rename it over `path` durably.

    With `recycle`, the Target is the spare generation when one can safely be overwritten (else a
    new temp file), and the generation being replaced becomes the next spare. Without it, spares
    are never touched (they belong to the Checkpointer that keeps them).
    """
    head, base = os.path.split(os.path.abspath(path))
    folder = resolved_folder(head)  # UnsafeLocation where another user controls a folder on the way
    check_destination(folder, base)
    path = os.path.join(folder, base)
    remove_stale_temps(path)
    target = Target(temp_path(path))
    if recycle and claim_spare(path, target.path):
        target = Target(target.path, recycled=True)
    previous = None
    held = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)  # the folder checked above
    try:
        yield target
        previous = None if recycle and _keep_as_spare(path) else _hold(path)
        temp = os.path.basename(target.path)
        os.replace(temp, base, src_dir_fd=held, dst_dir_fd=held)  # renameat within the folder held open
        _fsync_held(held)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.basename(target.path), dir_fd=held)
        _release_later(previous)
        raise
    finally:
        os.close(held)
    _release_later(previous)


def _fsync_held(fd: int) -> None:
    """fsync a directory held open, so a rename inside it is durable."""
    try:
        os.fsync(fd)
    except OSError as e:  # some filesystems refuse fsync on directories
        if e.errno not in (errno.EINVAL, errno.EBADF):
            raise


def drop_spare(path: str) -> bool:
    """Remove the spare a recycling Checkpointer kept for `path` (a plain file of this user's under ckptio's
    spare name only: another user's is left alone); True when there was one."""
    spare = spare_path(os.path.abspath(path))
    try:
        info = os.lstat(spare)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        return False
    _unlink_off_critical_path(spare)
    return True


def _unlink_off_critical_path(path: str) -> None:
    """Remove a name; if that frees a large file, free its blocks from a background thread."""
    held = _hold(path)
    try:
        os.unlink(path)
    finally:
        _release_later(held)


def claim_spare(path: str, tmp: str) -> bool:
    """Move the spare of `path` to `tmp` (atomically: one save wins it) when it is safe to overwrite.

    Only a spare this user could have kept is taken: a plain file of this user's, writable by nobody
    else, with one name (a crash between link and rename leaves it a second name of the live file).
    Anything else (a directory, a link, a file another user planted in a shared folder) is left alone
    and a new file is written instead. One that some process still has open is dropped (its name
    only: whoever holds it keeps the data).
    """
    spare = spare_path(path)
    try:
        if not _own_spare(os.lstat(spare)):
            return False
        os.rename(spare, tmp)
    except FileNotFoundError:
        return False
    if not _own_spare(os.lstat(tmp)):  # swapped between the check and the rename: not ours, give its name back
        os.rename(tmp, spare)
        return False
    if _unshared(tmp):
        return True
    _unlink_off_critical_path(tmp)
    return False


def _own_spare(info: os.stat_result) -> bool:
    """Whether a spare's lstat is one this user's recycling kept: a plain file of this user's with one name,
    writable by nobody else (so no other user can have planted it or can change it later)."""
    mine = info.st_uid == os.geteuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return stat.S_ISREG(info.st_mode) and mine and info.st_nlink == 1


def _unshared(path: str) -> bool:
    """Whether `path` is a regular file with one name that no open file (or mapping) refers to.

    Linux grants a write lease only when no other open file description exists for the inode, so
    taking one and dropping it is the proof; where leases are refused (not the owner, a filesystem
    without them) the answer is a conservative False.
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return False
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
        except OSError:
            return False
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        return True
    finally:
        os.close(fd)


def _keep_as_spare(path: str) -> bool:
    """Give the generation about to be replaced a second name, the spare (False: none, or no links here)."""
    try:
        os.link(path, spare_path(path), follow_symlinks=False)
    except OSError:  # ENOENT: first save; EEXIST: a concurrent save kept one; EPERM/EMLINK: no hard links
        return False
    return True


def _hold(path: str) -> int | None:
    """An fd on the file about to be replaced, so the rename does not free its blocks inline (a regular file only,
    never through a link: a FIFO at the name must not block the save)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _release_later(fd: int | None) -> None:
    """Close the replaced file's last fd in the background: freeing (and discarding) a multi-GB file's
    blocks took 0.2 s per 1.5 GiB here, all of it on the save's critical path if done by the rename."""
    if fd is not None:
        threading.Thread(target=os.close, args=(fd,), name="ckptio-release", daemon=True).start()
