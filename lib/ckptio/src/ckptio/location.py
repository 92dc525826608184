"""Where a checkpoint may be: a local path, never a URL taken for a folder (`s3://bucket/ck` would otherwise
become a folder `s3:` under the working directory). Every entry point (save, load, load_into, load_mmap,
Checkpointer, Writer, Reader) checks its location with `refuse_url` before touching the file system."""

from __future__ import annotations

import os
import re

from .errors import UnsupportedLocation

SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def refuse_url(path: str | os.PathLike[str]) -> None:
    """UnsupportedLocation for a `scheme://` location (until a scheme is supported); nothing for a local path."""
    text = os.fsdecode(os.fspath(path))
    found = SCHEME.match(text)
    if found:
        raise UnsupportedLocation(text, found.group(1))
