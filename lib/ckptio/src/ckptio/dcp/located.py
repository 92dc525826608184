"""The store of a DCP checkpoint's location: the place it names (places/) asked for its store, once; a Writer or
Reader given a new checkpoint_id keeps its store (and its connections) where the id names the same place."""

from __future__ import annotations

import os

from ..options import IOOptions
from ..places import place
from .store import Store


def store_for(path: str | os.PathLike[str], options: IOOptions) -> Store:
    """The store of a location: a directory, an object-store prefix (its client with the options' part size and
    connections), whatever the place it names keeps (other URLs refused)."""
    store: Store = place(path).dcp_store(options)
    return store


def store_at(store: Store, location: str | os.PathLike[str], options: IOOptions) -> Store:
    """The store of `location` (a new checkpoint_id): `store` itself where it is that place (its connections
    kept), else a new one (the old one closed)."""
    if str(store.path) == os.fsdecode(os.fspath(location)).rstrip("/"):
        return store
    store.close()
    return store_for(location, options)
