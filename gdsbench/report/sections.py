"""The report as one value: its sections, in reading order, as text cells any format can render.

Built once from results (report.summary.build); every format (report/formats/*, the HTML page) renders
the same value, so the order of the sections and their contents are written in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Lines:
    """fio's run-status lines, one per group, each under its group's title (`transfer=CPU_ONLY io_size=1M`)."""

    title: str
    items: tuple[tuple[str, str], ...]  # (group title, status line)


@dataclass(frozen=True)
class Table:
    """A table of text cells (bandwidths already in fio's units)."""

    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    keys: int = 0  # the first `keys` columns name the row: repeated when a narrow terminal splits the table
    legend: tuple[tuple[str, str], ...] = ()  # (column, what it means): said under the table in every format


@dataclass(frozen=True)
class Legend:
    """What the short labels of a report stand for: `run 1` is this results file, this run id."""

    title: str
    items: tuple[tuple[str, str], ...]  # (label, what it stands for)


@dataclass(frozen=True)
class Notes:
    """What a reader must know besides the numbers: failed and skipped cases, rigour warnings."""

    title: str
    problems: tuple[str, ...]  # "failed: <case>: <error>", "skipped: <case>: <reason>"
    warnings: tuple[str, ...]  # without the "warning: " prefix

    @property
    def lines(self) -> tuple[str, ...]:
        """Problems, then warnings marked as such."""
        return self.problems + tuple(f"warning: {note}" for note in self.warnings)


Section = Legend | Lines | Table | Notes


@dataclass(frozen=True, eq=False)
class DerivedTable:
    """What one derived table (report/derived.py) computed for a report: its figures in base units (the json
    format's) and its text cells, None where it has no rows."""

    name: str
    frame: pd.DataFrame
    table: Table | None


@dataclass(frozen=True, eq=False)
class Report:
    """One report of one or more results files, grouped by `groups`."""

    groups: tuple[str, ...]
    summary: pd.DataFrame  # median and min-max per group, in base units (the csv format)
    status: Lines
    results: tuple[Table, ...]  # one table per family of rows: storage I/O, checkpoints
    notes: Notes
    derived: tuple[DerivedTable, ...] = ()  # each derived table, in reading order (report.summary.DERIVED)
    runs: Legend | None = None  # when several runs are reported: `run N` -> file and run id
    labels: tuple[tuple[str, str], ...] = ()  # (run_id, `run N`) when several runs are reported

    def table(self, name: str) -> Table | None:
        """The derived table `name`'s cells (None where it has no rows)."""
        return next((d.table for d in self.derived if d.name == name), None)

    def figures(self, name: str) -> pd.DataFrame | None:
        """The derived table `name`'s figures in base units (None where no such table is derived)."""
        return next((d.frame for d in self.derived if d.name == name), None)

    @property
    def sections(self) -> tuple[Section, ...]:
        """The sections in reading order (the only place the order is written); empty ones left out."""
        notes = (self.notes,) if self.notes.lines else ()
        runs = (self.runs,) if self.runs else ()
        derived = tuple(d.table for d in self.derived if d.table)
        return (*runs, self.status, *self.results, *derived, *notes)
