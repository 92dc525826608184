"""A testbed's journal: what its `up` made, recorded as each thing comes to exist, so that `down` (and a failed
or interrupted `up`) undoes exactly that, nothing else.

The record is the testbed's own dataclass with a `steps` list, written whole (files.replace_file) where only we
write, and read back only from a trusted folder and file, every field of the type declared (gdsbench/trusted.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from gdsbench import trusted
from gdsbench.files import replace_file


class Made(Protocol):
    """What a testbed made: a dataclass whose `steps` name what exists, in the order it came to."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    steps: list[str]


M = TypeVar("M", bound=Made)


@dataclass(frozen=True)
class Journal:
    """The file where a testbed records what it made."""

    path: Path

    def record(self, made: Made, step: str) -> None:
        """Add `step` to what was made and write it all, the old record or the new one, never half."""
        made.steps.append(step)
        replace_file(self.path, lambda out: out.write(json.dumps(dataclasses.asdict(made), indent=1)))

    def exists(self) -> bool:
        """Something is at the journal's path (a link too: it is not ours to pass over)."""
        return os.path.lexists(self.path)

    def read(self, kind: type[M]) -> M:
        """The record, from a trusted folder and file, every field of the type `kind` declares."""
        trusted.check_folder(self.path.parent)
        return trusted.load_record(kind, self.path)

    def erase(self) -> None:
        """Remove the record, once what it names is undone."""
        self.path.unlink()


@contextlib.contextmanager
def undone_on_failure(undo: Callable[[], object]) -> Iterator[None]:
    """Run the block; on any failure or interrupt, `undo` what it made, then re-raise."""
    try:
        yield
    except BaseException:
        undo()
        raise
