"""Local files (a path with no scheme): saves through a temp file renamed into a folder no other user controls,
loads pinned by the file's descriptor, DCP checkpoints in a directory, tiers in a folder ours alone."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from functools import partial
from typing import Any

from .. import backends, durable
from .. import format as fmt
from ..memory import StagingBuffers
from ..options import IOOptions
from .base import Place, Source, Target, Traits

SCHEME = ""


class Files(Place):
    scheme = SCHEME
    traits = Traits(atomic="rename", listable=True, collective=False, survives="node", from_memory=True)

    def __init__(self, location: str) -> None:
        self.path = location
        self.name = os.path.abspath(location)

    @contextlib.contextmanager
    def single_writer(self, options: IOOptions, staging: StagingBuffers, recycle: bool) -> Iterator[Target]:
        """A temp file beside the path (durable.replace_atomically), written by the options' backend."""
        with durable.replace_atomically(self.path, recycle=recycle) as target:
            writer = backends.open_writer(target.path, options, staging, existing=target.recycled)
            try:
                yield Target(writer, target.recycled)
            finally:
                writer.close()

    @contextlib.contextmanager
    def opened(self, options: IOOptions) -> Iterator[Source]:
        with fmt.pinned_index(self.path) as index:
            yield Source(index, partial(backends.open_reader, index.data_path))

    def local_file(self, needs: str) -> str:
        return self.path

    def owned_name(self, recycle: bool) -> str:
        return self.name

    def dcp_store(self, options: IOOptions) -> Any:
        from pathlib import Path

        from ..dcp.store import DirectoryStore

        return DirectoryStore(Path(self.path))

    def holds_dcp(self) -> bool:
        from ..dcp.records import METADATA

        return os.path.isfile(os.path.join(self.path, METADATA))

    def tier(self, options: IOOptions) -> Any:
        from ..tier_stores import LocalTier

        return LocalTier(self.path)


PLACE = Files
