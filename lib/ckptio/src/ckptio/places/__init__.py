"""Where a checkpoint may be, resolved once: each scheme is a module declaring its Place (files.py: a path with no
scheme; objects.py: `s3://bucket/prefix`), and `place(location)` turns a location into the place every entry point
asks; memory.py: `memory://name`, a folder in RAM; peer.py: `peer://name`, a tier held in other nodes' RAM). A URL of another scheme is UnsupportedLocation, never a
folder named `gs:`. Adding a place is one module
and its line in PLACES."""

from __future__ import annotations

import os
import re

from ..errors import UnsupportedLocation
from . import files, memory, objects, peer
from .base import Place, Source, Target, Traits

PLACES: dict[str, type[Place]] = {module.SCHEME: module.PLACE for module in (files, memory, objects, peer)}
SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def place(location: str | os.PathLike[str]) -> Place:
    """The place a location names (InvalidLocation for a malformed one of a known scheme, UnsupportedLocation for
    a scheme ckptio does not take)."""
    text = os.fsdecode(os.fspath(location))
    found = SCHEME.match(text)
    scheme = found.group(1) if found else ""
    made = PLACES.get(scheme)
    if made is None:
        raise UnsupportedLocation(shown(text), scheme)
    return made(text)


def shown(url: str) -> str:
    """A URL without the credentials it may hold (errors never carry them)."""
    from ..s3.location import redacted

    return redacted(url)


__all__ = ["PLACES", "Place", "Source", "Target", "Traits", "place", "shown"]
