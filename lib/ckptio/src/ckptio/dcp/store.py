"""Where a DCP checkpoint lives, chosen once per location: a local directory (here) or an `s3://bucket/prefix`
(object_store.py). A store writes a rank's data and commits a save; for a load it reads the committed metadata,
holds the data files it names (their sizes known) and opens one for the reads. Writer and Reader hold one and
never ask which kind it is; both kinds take the same write and read pieces (encode.py, decode.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any, Protocol

from .. import backends
from ..durable import fsync_dir
from ..errors import CheckpointError
from ..folder import resolved_folder
from ..memory import StagingBuffers
from ..options import IOOptions
from .commit import commit, full_error
from .encode import write_items
from .lock import create_held
from .metadata import current_commit, open_regular, read_commit
from .records import ItemRecord


class Store(Protocol):
    """A checkpoint location as a save and a load use it."""

    @property
    def path(self) -> Any:
        """The location (a Path, or an ObjectLocation whose str() is its s3:// URL)."""

    def where(self, name: str) -> str:
        """How a file of the checkpoint is named in errors."""

    def begin(self, coordinator: bool) -> None:
        """A save begins on this rank (the coordinator notes what a commit may later sweep)."""

    def prepare(self) -> None:
        """Make the location ready for this rank's data."""

    def write(
        self,
        name: str,
        items: list[Any],
        options: IOOptions,
        codec: Any,
        checksum: str,
        staging: StagingBuffers,
        rank: int,
    ) -> list[ItemRecord]:
        """This rank's data file `name`, whole and durable (or visible) when this returns; its records."""

    def commit(self, metadata: Any, save_id: str) -> None:
        """Make `metadata` the checkpoint, then remove what it replaced."""

    def read_commit(self) -> tuple[Any, bytes]:
        """The committed metadata, checked, and the identity of its commit."""

    def current_commit(self) -> bytes:
        """The identity of the commit the location holds now."""

    def hold(self, names: set[str]) -> bool:
        """Hold the named data files and learn their sizes; False if one could not be (size() then raises why)."""

    def size(self, name: str) -> int:
        """The size of a held data file (held now if it was not)."""

    def keep_only(self, names: set[str]) -> None:
        """Let go of the held data files not named."""

    def reader(self, name: str, options: IOOptions, staging: StagingBuffers) -> backends.Reader:
        """A held data file opened for a load's reads."""

    def release(self) -> None:
        """Let go of every data file held (a load's, and the last save's)."""

    def close(self) -> None:
        """Release, and free any connection."""


class DirectoryStore:
    """A checkpoint directory: data files held by flock while written (lock.py), fsynced, committed by rename
    under the commit lock (commit.py); a load holds its data files open (a later commit may unlink them, never
    the bytes held open)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._held: IO[bytes] | None = None  # this rank's last data file (its commit is over by the next save)
        self._files: dict[str, int] = {}  # a load's data files, open
        self._sizes: dict[str, int] = {}
        self._unopened: dict[str, CheckpointError] = {}  # data files that could not be opened, and why

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a Writer going to DCP's process executor) without its open files."""
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def where(self, name: str) -> str:
        return str(self.path / name)

    def begin(self, coordinator: bool) -> None:
        """Nothing to note: the commit lock decides what a sweep may remove."""

    def prepare(self) -> None:
        """Make the checkpoint directory; UnsafeLocation where another user controls it or a folder on the way."""
        resolved_folder(self.path, create=True)

    def write(
        self,
        name: str,
        items: list[Any],
        options: IOOptions,
        codec: Any,
        checksum: str,
        staging: StagingBuffers,
        rank: int,
    ) -> list[ItemRecord]:
        """The new data file, held (lock.py) from before its first byte, then file and directory fsynced; on
        failure it is removed and an exhausted file system is named (StorageFull)."""
        path = str(self.path / name)
        self.release()
        self._held = open(create_held(path), "rb", buffering=0)  # noqa: SIM115  # released by the next save
        try:
            writer = backends.open_writer(path, options, staging, existing=True)
            records = write_items(writer, name, items, options, codec, checksum)
            fsync_dir(str(self.path))
        except BaseException as e:
            self.release()
            os.unlink(path)
            if isinstance(e, OSError):
                raise full_error(e, self.path, f"rank {rank}'s data file did not fit; it was removed") from e
            raise
        return records

    def commit(self, metadata: Any, save_id: str) -> None:
        commit(self.path, metadata, save_id)

    def read_commit(self) -> tuple[Any, bytes]:
        return read_commit(self.path)

    def current_commit(self) -> bytes:
        return current_commit(self.path)

    def hold(self, names: set[str]) -> bool:
        """Open every named data file now; one that cannot be opened is an error only for a plan that reads it."""
        self.release()
        for name in sorted(names):
            try:
                self._open(name)
            except CheckpointError as e:
                self._unopened[name] = e
        return not self._unopened

    def size(self, name: str) -> int:
        if name in self._unopened:
            raise self._unopened[name]
        if name not in self._files:
            self._open(name)
        return self._sizes[name]

    def _open(self, name: str) -> None:
        self._files[name] = open_regular(self.path, name)
        self._sizes[name] = os.fstat(self._files[name]).st_size

    def keep_only(self, names: set[str]) -> None:
        for name in set(self._files) - names:
            os.close(self._files.pop(name))

    def reader(self, name: str, options: IOOptions, staging: StagingBuffers) -> backends.Reader:
        """The held file read through its descriptor (the file the metadata named, even if unlinked since)."""
        backend = "buffered" if options.backend == "buffered" else "direct"
        return backends.open_reader(f"/proc/self/fd/{self._files[name]}", options, staging, backend)

    def release(self) -> None:
        if self._held is not None:
            self._held.close()
            self._held = None
        for fd in self._files.values():
            os.close(fd)
        self._files, self._sizes, self._unopened = {}, {}, {}

    def close(self) -> None:
        self.release()
