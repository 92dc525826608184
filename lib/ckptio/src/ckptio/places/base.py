"""What every place declares (its scheme, its traits) and does for the entry points that ask it: a single-file
save's writer, a load's source, a Checkpointer's name, a DCP store, a tier. A place is resolved once from a
location (places.place) and the entry points ask it; none of them tests a scheme."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from .. import backends
from .. import format as fmt
from ..memory import StagingBuffers
from ..options import IOOptions


@dataclass(frozen=True)
class Traits:
    """What a place promises: how a new copy appears (`atomic`: "rename" of a temp file, or "put" of a whole
    object), whether its copies can be listed, whether every rank must take part in writing it (`collective`), and
    what it survives: "process", "node" or "job"."""

    atomic: str
    listable: bool
    collective: bool
    survives: str
    from_memory: bool  # a save writes it from training memory, and its copy can be read back to drain it


@dataclass(frozen=True)
class Source:
    """A checkpoint being loaded: its validated index, how its data is read (`reader(options, staging, backend)`)
    and, for an object, its small reads (`read_at`: None reads the file at index.data_path)."""

    index: fmt.Index
    reader: Callable[[IOOptions, StagingBuffers | None, str], backends.Reader]
    read_at: fmt.ReadAt | None = None

    @property
    def on_objects(self) -> bool:
        """Whether this is an object (read by ranged GETs into host memory) rather than a file."""
        return self.read_at is not None


@dataclass(frozen=True)
class Target:
    """Where a single-file save writes: its writer, and whether it overwrites a recycled generation."""

    writer: backends.Writer
    recycled: bool = False


class Place(ABC):
    """One location of one scheme, parsed once: `name` is how it is named in results and errors."""

    scheme: ClassVar[str]
    traits: ClassVar[Traits]
    name: str

    @abstractmethod
    def __init__(self, location: str) -> None:
        """The place `location` names, parsed (InvalidLocation where it is malformed)."""

    @abstractmethod
    def single_writer(
        self, options: IOOptions, staging: StagingBuffers, recycle: bool
    ) -> contextlib.AbstractContextManager[Target]:
        """A writer of a single-file checkpoint here, made durable and visible whole when the block succeeds."""

    @abstractmethod
    def opened(self, options: IOOptions) -> contextlib.AbstractContextManager[Source]:
        """The single-file checkpoint here, validated and pinned (its inode, or its object's version) for the block."""

    @abstractmethod
    def local_file(self, needs: str) -> str:
        """A path the kernel can map (UnsupportedLocation naming what the call `needs` where there is none)."""

    @abstractmethod
    def owned_name(self, recycle: bool) -> str:
        """The name a Checkpointer owning this place keeps (OptionError where `recycle` cannot be honoured)."""

    @abstractmethod
    def dcp_store(self, options: IOOptions) -> Any:
        """The store of a DCP checkpoint here (dcp/store.py's protocol)."""

    @abstractmethod
    def holds_dcp(self) -> bool:
        """Whether a DCP Reader may take this place as its checkpoint_id (a directory with a committed checkpoint;
        an object prefix is read when loaded)."""

    @abstractmethod
    def tier(self, options: IOOptions, keep: int) -> Any:
        """This place as a tier of a TieredCheckpointer keeping `keep` steps (tier_stores.Tier's protocol: list,
        put, remove, read)."""
