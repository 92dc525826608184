"""Where a save may write: a folder no other user controls.

A write by name is only as safe as every folder on the way: whoever can rename an entry of one of them can swap
a link in under the writer (root's save into a user's folder then overwrites a file elsewhere). So before a
save writes, its folder is walked from `/` one component at a time (each opened relative to the last, no link
followed blindly), and each folder on the way must be this user's or root's and writable by no one else, or
sticky (others may add names there, never move ours: /tmp, /dev/shm); a link is followed only where no one else
could have planted it (a folder as above that is not sticky, or a link of this user's or root's in a sticky
one). The folder itself may be a sticky shared one only where `alone` is not asked (a single file saved into
/tmp); a tier's folder must be ours alone. Anything else is UnsafeLocation, before a byte is written.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections import deque

from .errors import UnsafeLocation

FOLLOWED_LINKS = 40  # as the kernel's own limit on a path's links
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _trusted_owner(info: os.stat_result) -> bool:
    return info.st_uid in (os.geteuid(), 0)


def _shared(info: os.stat_result) -> bool:
    """Whether a folder lets other users add names (group or world writable, or another user's)."""
    return bool(info.st_mode & OTHERS_WRITE) or not _trusted_owner(info)


def _check_folder(info: os.stat_result, where: str, path: str) -> None:
    """A folder on the way: this user's or root's, and writable by no one else unless sticky."""
    if not _trusted_owner(info):
        raise UnsafeLocation(path, f"{where} belongs to uid {info.st_uid}, another user (who can rename what is in it)")
    if info.st_mode & OTHERS_WRITE and not info.st_mode & stat.S_ISVTX:
        raise UnsafeLocation(
            path, f"{where} is writable by other users and not sticky (mode {info.st_mode & 0o7777:o})"
        )


def _check_link(folder: os.stat_result, link: os.stat_result, where: str, path: str) -> None:
    """A link may be followed where only we or root could have made it."""
    if _shared(folder) and not _trusted_owner(link):
        raise UnsafeLocation(path, f"{where} is a link another user (uid {link.st_uid}) made in a shared folder")


def resolved_folder(path: str | os.PathLike[str], *, create: bool = False, alone: bool = False) -> str:
    """The real path of folder `path` once every folder on the way (and it) passed the checks above; `create`
    makes missing folders (mode 0700 where `alone`, else 0755, less the umask). `alone`: the folder itself must
    be ours, writable by no one else (a tier's). UnsafeLocation, or the OSError of a folder that is missing."""
    path = os.path.abspath(os.fspath(path))
    todo, real, links = deque(path.split("/")[1:]), [""], 0
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        here = os.fstat(fd)
        _check_folder(here, "/", path)
        while todo:
            name = todo.popleft()
            if name in ("", "."):
                continue
            where = "/".join(real) + "/" + name if name != ".." else "/".join(real[:-1]) or "/"
            try:
                child = _open_child(fd, name, create, 0o700 if alone else 0o755)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                link = os.lstat(name, dir_fd=fd)
                if not stat.S_ISLNK(link.st_mode):
                    raise
                _check_link(here, link, where, path)
                links += 1
                if links > FOLLOWED_LINKS:
                    raise UnsafeLocation(path, f"more than {FOLLOWED_LINKS} links on the way") from None
                target = os.readlink(name, dir_fd=fd)
                todo.extendleft(reversed(target.split("/")))
                if target.startswith("/"):
                    os.close(fd)
                    fd, real = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC), [""]
                    here = os.fstat(fd)
                continue
            os.close(fd)
            fd, here = child, os.fstat(child)
            real = real[:-1] or [""] if name == ".." else [*real, name]
            _check_folder(here, where, path)
        if alone and (here.st_uid != os.geteuid() or here.st_mode & OTHERS_WRITE):
            owner = "ours" if here.st_uid == os.geteuid() else f"uid {here.st_uid}'s"
            mode = f"{here.st_mode & 0o7777:o}"
            raise UnsafeLocation(path, f"a tier's folder must be ours alone; this one is {owner}, mode {mode}")
    finally:
        os.close(fd)
    return "/".join(real) or "/"


def _open_child(fd: int, name: str, create: bool, mode: int) -> int:
    """The folder `name` inside `fd`, not through a link (made first where `create` and missing)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile (another rank of ours, or anyone): checked alike
        os.mkdir(name, mode, dir_fd=fd)
    return os.open(name, flags, dir_fd=fd)


def check_destination(folder: str, name: str) -> None:
    """In a shared (sticky) folder, a file already at `name` must be a regular file of ours: another user's (or a
    link, a FIFO) is refused, never replaced or opened."""
    info = os.stat(folder)
    if not _shared(info):
        return
    try:
        there = os.lstat(os.path.join(folder, name))
    except FileNotFoundError:
        return
    if not stat.S_ISREG(there.st_mode) or there.st_uid != os.geteuid():
        kind = "a regular file" if stat.S_ISREG(there.st_mode) else "not a regular file"
        raise UnsafeLocation(
            os.path.join(folder, name), f"in a shared folder, the name is held by uid {there.st_uid} ({kind})"
        )
