"""What an engine keeps in the sweep's directory and what it writes there before its first case, as the engine
declares it (KeepsFiles, Fills); the sweep's guard (gdsbench.filesets) and fill step (gdsbench.fill) read the
declarations of every engine a config names, never an engine's name.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from gdsbench.cases import Case, Pattern
from gdsbench.units import num2str, size_label

if TYPE_CHECKING:
    from gdsbench.runners.base import RunContext


@dataclass(frozen=True)
class FileSet:
    """Files of one engine that live in the directory: `count` files of `each` bytes (transient: only during a case)."""

    engine: str
    paths: tuple[Path, ...]
    each: int
    transient: bool = False

    @property
    def label(self) -> str:
        """A short description: 'gdsio 32 x 30G'."""
        return f"{self.engine} {len(self.paths)} x {size_label(self.each)}" + (" (per case)" if self.transient else "")

    def missing_bytes(self) -> int:
        """Bytes still to be allocated: each file's size minus what it already occupies on disk."""
        return sum(max(0, self.each - allocated(p)) for p in self.paths)

    def ready(self) -> bool:
        """Whether every file exists with at least its size, so a read need not write it first."""
        return all(p.is_file() and p.stat().st_size >= self.each for p in self.paths)


@dataclass(frozen=True)
class Fill:
    """How an engine writes the files its read cases need, once, before the sweep's first case: the files, the
    tool's command, and the check of its result (ToolError when the tool failed)."""

    files: FileSet
    argv: list[str]
    check: Callable[[subprocess.CompletedProcess], None]

    def needed(self) -> bool:
        """Whether the files are still to be written (missing blocks, or shorter than their size)."""
        return bool(self.files.missing_bytes()) or not self.files.ready()


@runtime_checkable
class KeepsFiles(Protocol):
    """An engine that keeps files in the sweep's directory (they count against its free space)."""

    def file_sets(self, cases: list[Case], ctx: RunContext) -> list[FileSet]:
        """The file sets this engine's `cases` keep in the directory."""


@runtime_checkable
class Fills(Protocol):
    """An engine whose read cases need files written first, by the engine's own tool."""

    def fill(self, cases: list[Case], ctx: RunContext) -> Fill | None:
        """How to write the files this engine's `cases` read (None: they read none)."""


@runtime_checkable
class HoldsMemory(Protocol):
    """An engine whose cases hold their data in this host's memory (a checkpoint's state dict)."""

    def memory_bytes(self, case: Case, ctx: RunContext) -> int:
        """The memory the case holds at its peak."""


def human(num_bytes: int) -> str:
    """Bytes as people read them: 1920GiB, 63.9MiB."""
    return num2str(num_bytes, unit="B")


def allocated(path: Path) -> int:
    """Bytes a file occupies on disk (its allocated blocks), 0 when it does not exist."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def most_threads(cases: Iterable[Case]) -> int:
    """The largest thread count among `cases`, 0 when none."""
    return max((c["threads"] for c in cases), default=0)


def widest_read(cases: Iterable[Case]) -> Case | None:
    """The reading case with the most threads (its files serve every narrower read), None when none reads."""
    reads = [c for c in cases if c.pattern in (Pattern.READ, Pattern.RANDREAD) and not c.get("unlink")]
    return max(reads, key=lambda c: c["threads"], default=None)
