"""A baseline gdsbench names in its sweeps but cannot measure on a machine like the one it is built on: every case
is a skipped row that says why (the engine's `reason`) and what would make it run, so a config can hold the
baseline and a report shows it missing, never silently absent. It has no run path: `unavailable` always answers."""

from __future__ import annotations

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint.base import CheckpointRunner


class Unmeasured(CheckpointRunner):
    """A declared baseline whose every case is skipped with `reason`."""

    patterns = frozenset({Pattern.TRAIN})
    transfers = frozenset({Transfer.CPU_CACHED})
    reason = ""  # why it cannot run, and what would make it

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """Always: the engine's reason."""
        return self.reason

    def call(self, case: Case) -> str:
        """The library's calls, as --dry-run and the rows show them."""
        return self.description

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Never reached (cannot_run always answers); a named error if it is."""
        raise ToolError(f"{self.name}: {self.reason}")
