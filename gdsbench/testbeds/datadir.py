"""A testbed's data directory (ceph.py, slurm.py): everything its `up` makes lives there, so `down` has one place
to clean. Ours alone: made by `up` (or an empty one of ours), marked as gdsbench's (`.gdsbench-<kind>`) before
anything is made in it, holding the journal of what `up` made (`gdsbench-<kind>.json`); never one others made or
can write, nor a link (gdsbench/trusted.py)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench import trusted
from gdsbench.errors import GdsbenchError
from gdsbench.testbeds.journal import Journal


@dataclass(frozen=True)
class DataDir:
    """The data directory of the testbed `kind` (`gdsbench <kind> up`), its failures raised as `error`."""

    path: Path
    kind: str
    error: type[GdsbenchError]

    @property
    def marker(self) -> Path:
        """gdsbench's mark, made first: `down` removes no directory without it."""
        return self.path / f".gdsbench-{self.kind}"

    @property
    def journal(self) -> Journal:
        """The state file: what `up` made, recorded as it was made."""
        return Journal(self.path / f"gdsbench-{self.kind}.json")

    def check_can_make(self) -> None:
        """Refuse one others made (or a link), one where a testbed is up, or one that is not empty."""
        if os.path.lexists(self.path):
            trusted.check_owned(self.path)  # the defaults live in world-writable /var/tmp
        if self.journal.path.exists():
            down = f"gdsbench {self.kind} down --dir {self.path}"
            raise self.error(f"a cluster is already up in {self.path}; `{down}` removes it")
        if self.path.exists() and (not self.path.is_dir() or any(self.path.iterdir())):
            raise self.error(f"{self.path} exists and is not an empty directory: give another --dir")

    def make(self) -> None:
        """The directory (or the empty one of ours given), then gdsbench's marker in it, made anew."""
        try:
            self.path.mkdir(mode=0o755, parents=True)  # never writable by others, whatever the umask
        except FileExistsError:
            trusted.check_folder(self.path)  # made since check_can_make: by whom?
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(self.marker, flags, 0o644), "w") as out:
            out.write(f"made by gdsbench {self.kind} up; `gdsbench {self.kind} down` removes this directory\n")

    def finished(self, load_state: Callable[[Path], Any]) -> Any | None:
        """What an `up` that finished made here, as `load_state` reads it from the trusted folder; None where there
        is no state, or its `up` did not finish (`complete`)."""
        made = load_state(trusted.check_folder(self.path)) if self.journal.exists() else None
        return made if made is not None and made.complete else None

    def ours(self) -> Path | None:
        """The directory for `down` to undo, once trusted, or None where it holds nothing of ours (no marker)."""
        if not os.path.lexists(self.marker):
            if self.journal.exists():
                raise self.error(f"{self.path} has a state file but no gdsbench marker: not ours, left alone")
            return None
        folder = trusted.check_folder(self.path)  # others could have made it, or planted what it holds
        trusted.check_owned(self.marker)
        return folder
