"""Local files (a path with no scheme): saves through a temp file renamed into a folder no other user controls,
loads pinned by the file's descriptor, DCP checkpoints in a directory, tiers in a folder ours alone."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from functools import partial
from typing import Any

from .. import backends, durable
from .. import format as fmt
from ..folder import resolved_folder
from ..memory import StagingBuffers
from ..options import IOOptions
from ..tier_names import name_of, named, pinned, step_of
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

    def tier(self, options: IOOptions, keep: int) -> Any:
        return LocalTier(self.path)


COPY_BYTES = 64 << 20  # what one sendfile call moves


class LocalTier:
    """A local directory of checkpoints, ours alone (made, mode 0700, on the first save into it): one another user
    owns or can write, or reached through a link another user could have planted, is refused (UnsafeLocation),
    so no file in it can have been planted or swapped by anyone but this user (or root)."""

    collective = False  # each rank writes and reads its own

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.path.abspath(os.fspath(path))

    def __str__(self) -> str:
        return self.path

    def file(self, step: int) -> str:
        """Where a step's checkpoint is."""
        return os.path.join(self.path, name_of(step))

    def prepare(self) -> None:
        """Make the folder (0700) if missing; UnsafeLocation where it, or a folder on the way, is not safe. The
        temp files of checkpoints whose writer is provably gone (a crashed save or copy) are removed: in RAM
        each would hold a checkpoint's bytes for good."""
        resolved_folder(self.path, create=True, alone=True)
        for step in {step_of(n[1:].split(".ckpt.", 1)[0] + ".ckpt") for n in os.listdir(self.path) if n[:1] == "."}:
            if step is not None:
                durable.remove_stale_temps(self.file(step))

    def room_for(self, nbytes: int) -> None:
        """Nothing asked before a save of files: the file system's ENOSPC says it while writing (StorageFull)."""

    def steps(self) -> list[int]:
        """The steps of the checkpoint files here: regular files of this user's (no link followed) of ckptio's names
        only, in a folder that is ours alone (UnsafeLocation otherwise)."""
        resolved_folder(self.path, alone=True)
        me = os.geteuid()
        with os.scandir(self.path) as entries:
            found = [(step_of(e.name), e) for e in entries]
            return [
                step
                for step, e in found
                if step is not None and e.is_file(follow_symlinks=False) and e.stat(follow_symlinks=False).st_uid == me
            ]

    def put(self, source: str, step: int) -> None:
        """Copy the file `source` in as `step`: to a temp name, fsynced, renamed into place, directory fsynced."""
        self.prepare()
        with durable.replace_atomically(self.file(step)) as target, open(source, "rb") as src:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(target.path, flags, 0o644)
            try:
                size, done = os.fstat(src.fileno()).st_size, 0
                while done < size:
                    sent = os.sendfile(out, src.fileno(), done, min(COPY_BYTES, size - done))
                    if sent == 0:
                        raise OSError(f"{source}: ended at {done} of {size} bytes while copied")
                    done += sent
                os.fsync(out)
            finally:
                os.close(out)

    def remove(self, step: int) -> None:
        """Remove a step's file if it is a regular file of this user's (another user's is left alone)."""
        path = self.file(step)
        with contextlib.suppress(FileNotFoundError):
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid():
                os.unlink(path)

    @contextlib.contextmanager
    def readable(self, step: int) -> Iterator[str]:
        """A name that reads a step's file as it is now, no link followed (errors name the file)."""
        path = self.file(step)
        with pinned(path) as held, named(held, path):
            yield held

    def forget(self) -> None:
        """Nothing held between requests."""


PLACE = Files
