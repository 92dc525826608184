"""Checkpointer: an object that owns one checkpoint path, its generations and its staging buffers.

Repeated saves and loads of one path (a training run) keep their staging buffers instead of paying
for fresh memory each time, and may recycle the previous generation's disk blocks. Both are state
that outlives a call, so they belong to an object with a lifetime: a context manager whose exit
frees the buffers and removes the spare generation it kept (as Orbax's CheckpointManager and
torchsnapshot's Snapshot own theirs).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, TypeVar

from . import durable
from .loading import Loaded, device_of, load_existing, load_mapped, load_new
from .memory import StagingCache
from .options import IOOptions, resolve
from .places import place
from .saving import Saved, save_to

if TYPE_CHECKING:
    pass

T = TypeVar("T")


class Checkpointer:
    """Saves and loads of one checkpoint path with reused staging buffers.

    Args:
        path: the checkpoint file this object owns, or an `s3://bucket/prefix/name.ckpt` object
            (ckptio[s3]; `load_mmap` then raises UnsupportedLocation).
        options: how to move the bytes (host defaults if None).
        checksum: "xxh3" (default), "crc32c" or None, for every save.
        recycle: keep the generation each save replaces as a hidden spare (`.NAME.ckptio-spare`) and
            write the next save into its blocks before renaming it into place: overwrites instead of
            new-file allocation, for the disk space of two generations. A spare any process still has
            open or mapped is never overwritten (a write lease proves nobody has it open), nor one this
            user did not keep (another user's, or writable by others). `close()` removes the spare; a plain
            `save()` never touches it. Files only (OptionError for an object).

    Example:
        with Checkpointer("ckpt.pt", recycle=True) as ckpt:
            for step in range(steps):
                ckpt.save(model.state_dict())
            ckpt.load_into(model.state_dict())
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        options: IOOptions | None = None,
        checksum: str | None = "xxh3",
        recycle: bool = False,
    ) -> None:
        self.path = place(path).owned_name(recycle)  # a file's absolute path, or an object's URL (no recycling)
        self.options = resolve(options)
        self.checksum = checksum
        self.recycle = recycle
        self.last: Saved | Loaded | None = None
        self._cache: StagingCache | None = StagingCache()

    def _staging(self) -> StagingCache:
        """The kept staging buffers (refused once closed)."""
        if self._cache is None:
            raise ValueError(f"Checkpointer({self.path!r}) is closed")
        return self._cache

    def save(self, state_dict: Any) -> Saved:
        """Save durably to the owned path (see ckptio.save); says whether it recycled."""
        staging = self._staging().within(self.options.buffer_bytes, self.options.chunk_bytes)
        saved = save_to(state_dict, self.path, self.options, self.checksum, staging, recycle=self.recycle)
        self.last = saved
        return saved

    def load(self, *, map_location: Any = "cpu", verify: bool = True) -> Any:
        """Load into new memory (see ckptio.load)."""
        self.last = load_new(self.path, device_of(map_location), self.options, verify, self._staging())
        return self.last.obj

    def load_into(self, state_dict: T, *, verify: bool = True, strict: bool = True) -> T:
        """Fill existing tensors in place (see ckptio.load_into); returns `state_dict`."""
        self.last = load_existing(self.path, state_dict, self.options, verify, self._staging(), strict)
        return state_dict

    def load_mmap(self, *, verify: bool = True) -> Any:
        """Map the checkpoint (see ckptio.load_mmap)."""
        self._staging()
        self.last = load_mapped(self.path, self.options, verify)
        return self.last.obj

    def close(self) -> None:
        """Free the staging buffers and remove the spare generation this object kept (idempotent)."""
        if self._cache is None:
            return
        self._cache.close()
        self._cache = None
        if self.recycle:
            durable.drop_spare(self.path)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._cache is None else "open"
        return f"Checkpointer({self.path!r}, recycle={self.recycle}, {state})"
