"""The names a TieredCheckpointer gives its copies, `step-<step:012d>.ckpt` in every tier, and how a copy is read
as it is now (pinned): what the tiers of every place share."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterator

from .errors import OptionError

NAME = re.compile(r"step-(\d{12})\.ckpt")
MAX_STEP = 10**12 - 1


def name_of(step: int) -> str:
    """The checkpoint name of a step (OptionError for a step that has none)."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise OptionError(f"step must be an int from 0 to {MAX_STEP}, not {step!r}")
    return f"step-{step:012d}.ckpt"


def step_of(name: str) -> int | None:
    """The step a checkpoint name stands for, None for any other name."""
    found = NAME.fullmatch(name)
    return int(found.group(1)) if found else None


@contextlib.contextmanager
def pinned(path: str) -> Iterator[str]:
    """A name for the file at `path` as it is now (`/proc/self/fd/N`, not following a link, regular files only):
    what is read through it stays that file whatever is renamed over or removed at `path` meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path}: not a regular file")
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


@contextlib.contextmanager
def named(held: str, path: str) -> Iterator[None]:
    """Errors raised while reading `held` (a /proc/self/fd name) name `path` instead."""
    try:
        yield
    except Exception as error:
        if held in str(error):
            error.args = tuple(a.replace(held, path) if isinstance(a, str) else a for a in error.args)
            if isinstance(getattr(error, "path", None), str):
                error.path = path  # type: ignore[attr-defined]
        raise
