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
class Report:
    """One report of one or more results files, grouped by `groups`."""

    groups: tuple[str, ...]
    summary: pd.DataFrame  # median and min-max per group, in base units (the csv format)
    status: Lines
    results: tuple[Table, ...]  # one table per family of rows: storage I/O, checkpoints
    ceilings: Table | None  # checkpoint engines against fio, when the results have checkpoint rows
    cpu: Table | None  # what each checkpoint engine's bytes cost in CPU, when its rows recorded it
    goodput: Table | None  # train rows: engines side by side on stall, slowdown, restore and goodput
    mlperf: Table | None  # runs of the MLPerf Storage checkpoint geometry in the rules' terms
    notes: Notes
    runs: Legend | None = None  # when several runs are reported: `run N` -> file and run id
    ratios: pd.DataFrame | None = None  # the ceilings table in base units (the json format)
    cpu_costs: pd.DataFrame | None = None  # the CPU-cost table in base units (the json format)
    goodputs: pd.DataFrame | None = None  # the goodput table in base units (the json format)
    geometries: pd.DataFrame | None = None  # the MLPerf geometry table in base units (the json format)
    labels: tuple[tuple[str, str], ...] = ()  # (run_id, `run N`) when several runs are reported

    @property
    def sections(self) -> tuple[Section, ...]:
        """The sections in reading order (the only place the order is written); empty ones left out."""
        notes = (self.notes,) if self.notes.lines else ()
        runs = (self.runs,) if self.runs else ()
        tables = (*self.results, *(t for t in (self.ceilings, self.mlperf, self.goodput, self.cpu) if t))
        return (*runs, self.status, *tables, *notes)
