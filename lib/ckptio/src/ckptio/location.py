"""Where a checkpoint may be: a local path, or (with the extra `ckptio[s3]`) an `s3://bucket/prefix` location;
never a URL taken for a folder (`gs://bucket/ck` would otherwise become a folder `gs:` under the working
directory). Every entry point checks its location with `object_location` (those that take objects) or
`refuse_url` (those that need a file: load_mmap) before touching the file system."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from .errors import UnsupportedLocation

if TYPE_CHECKING:
    from .s3.location import ObjectLocation

SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def refuse_url(path: str | os.PathLike[str], needs: str = "") -> None:
    """UnsupportedLocation for any `scheme://` location (saying what the call `needs`); nothing for a local path."""
    text = os.fsdecode(os.fspath(path))
    found = SCHEME.match(text)
    if found:
        raise UnsupportedLocation(_shown(text), found.group(1), needs)


def object_location(path: str | os.PathLike[str]) -> ObjectLocation | None:
    """The parsed `s3://` location (InvalidLocation when malformed), None for a local path; UnsupportedLocation
    for any other scheme."""
    text = os.fsdecode(os.fspath(path))
    found = SCHEME.match(text)
    if not found:
        return None
    if found.group(1) != "s3":
        raise UnsupportedLocation(_shown(text), found.group(1))
    from .s3.location import parse

    return parse(text)


def _shown(url: str) -> str:
    """A URL without the credentials it may hold (errors never carry them)."""
    from .s3.location import redacted

    return redacted(url)
