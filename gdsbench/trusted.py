"""Trust checks for the state, files and folders root helpers act on (fastdev, ceph): what others can write or
could have made is refused, naming what was found, never acted on.

A path is trusted when every folder above it is owned by root or us and writable by no one else (a sticky one,
such as /tmp, is fine: others cannot rename what is ours there), and it is no symbolic link, owned by us and
writable by no one else. State files are opened with O_NOFOLLOW and parsed into the exact types recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pwd
import stat
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from gdsbench.errors import GdsbenchError

Record = TypeVar("Record")


class UntrustedError(GdsbenchError):
    """A path others can write or could have made, or state that is not what gdsbench writes: left alone."""

    exit_code = 2


def _owner(uid: int) -> str:
    """A uid as `name (uid N)`."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _refuse(path: Path, why: str) -> UntrustedError:
    """The one-line refusal: the path, what was found, and that it is left alone."""
    return UntrustedError(f"{path}: {why}: not made by gdsbench here, so left alone")


def safe_path(path: Path) -> Path:
    """`path` made absolute with its folders' links resolved, once every folder above it that exists is trusted."""
    parent = Path(os.path.realpath(Path(path).absolute().parent))
    for folder in (*reversed(parent.parents), parent):
        if not os.path.lexists(folder):
            break  # the rest is made by the caller
        info = os.lstat(folder)
        if info.st_uid not in (0, os.geteuid()):
            raise _refuse(folder, f"a folder above it owned by {_owner(info.st_uid)}")
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            raise _refuse(folder, f"a folder above it writable by others (mode {stat.S_IMODE(info.st_mode):04o})")
    return parent / Path(path).name


def check_owned(path: Path, info: os.stat_result | None = None) -> os.stat_result:
    """Refuse a symbolic link, or a path not owned by us or writable by others; its lstat."""
    info = info or os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(path, "a symbolic link")
    if info.st_uid != os.geteuid():
        raise _refuse(path, f"owned by {_owner(info.st_uid)}")
    if info.st_mode & 0o022:
        raise _refuse(path, f"writable by others (mode {stat.S_IMODE(info.st_mode):04o})")
    return info


def check_folder(path: Path) -> Path:
    """A trusted folder (`safe_path`, then owned by us, writable by no one else): its safe path."""
    path = safe_path(path)
    if not stat.S_ISDIR(check_owned(path).st_mode):
        raise _refuse(path, "not a folder")
    return path


def private_folder(path: Path) -> Path:
    """Make `path` (mode 0700) if missing, its parent trusted; refuse one that others made or can write."""
    path = safe_path(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    return check_folder(path)


def read_text(path: Path) -> str:
    """A trusted file's text: no link followed (O_NOFOLLOW), a regular file owned by us, writable by no one else."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(safe_path(path), flags)
    except OSError as exc:
        raise _refuse(path, "a symbolic link" if os.path.islink(path) else exc.strerror or str(exc)) from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(check_owned(path, os.fstat(fd)).st_mode):
            raise _refuse(path, "not a regular file")
        return handle.read().decode(errors="replace")


def load_record(kind: type[Record], path: Path) -> Record:
    """The dataclass `kind` a trusted JSON state file holds, every field of the exact type declared."""
    try:
        data = json.loads(read_text(path))
    except ValueError:
        raise _refuse(path, "malformed state (not JSON)") from None
    hints = typing.get_type_hints(kind)
    names = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]
    if not isinstance(data, dict) or set(data) - names:
        raise _refuse(path, f"malformed state (expected the keys {sorted(names)})")
    for key, value in data.items():
        if not _fits(value, hints[key]):
            raise _refuse(path, f"malformed state ({key}: {value!r} is not {hints[key]})")
    try:
        return kind(**data)
    except TypeError:
        raise _refuse(path, f"malformed state (expected the keys {sorted(names)})") from None


def _fits(value: Any, hint: Any) -> bool:
    """`value` is of type `hint` (str, int, bool, None, list[...], unions): bool is not an int here."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if origin is list:
        return isinstance(value, list) and all(_fits(item, args[0]) for item in value)
    if hint in (int, float):
        return isinstance(value, hint) and not isinstance(value, bool)
    return value is None if hint is type(None) else isinstance(value, hint)
