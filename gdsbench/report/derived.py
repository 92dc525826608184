"""Derived report tables as plug-ins: each (ceilings, MLPerf geometry, goodput, CPU cost) is one module that
declares a `Derived`: its name and title, a compute over the rows and their sidecars (its figures in base units,
the json format's), its rows (text cells), what its columns mean and the report settings it reads. `report.summary.DERIVED` lists them in
reading order; the Report holds what each computed, and every format iterates them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from gdsbench.report import tables
from gdsbench.report.sections import DerivedTable, Table

#: Header and text cells of a derived table from its figures and the run labels (`run 1` per run id).
Rows = Callable[[pd.DataFrame, dict[str, str]], tuple[list[str], list[list[str]]]]


@dataclass(frozen=True)
class Setting:
    """A report setting a derived table declares (a model's parameter, not a measurement): `gdsbench report
    --<name with dashes>`, its help, and how its text is read (UsageError naming the option when it cannot be)."""

    name: str  # its key in Inputs.settings: "mtbf_local" is --mtbf-local
    help: str
    parse: Callable[[str], Any]

    @property
    def option(self) -> str:
        """The command-line option: --mtbf-local."""
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True, eq=False)
class Inputs:
    """What a derived table is computed from: the rows (flags judged), their sidecars by source, and the
    report settings the tables declare, parsed, by name (absent: the table's default)."""

    frame: pd.DataFrame
    metas: Mapping[str, dict[str, Any]]
    settings: Mapping[str, Any] = field(default_factory=dict)


def no_notes(found: pd.DataFrame, labels: dict[str, str]) -> list[str]:
    """A derived table with nothing to add to the report's notes."""
    return []


@dataclass(frozen=True)
class Derived:
    """One derived table: `compute` gives its figures (an empty frame: no table), `rows` its cells, whose columns
    up to `key` name a row (repeated when a narrow terminal splits it); `meanings` explain columns under it,
    `notes` add warnings to the report's notes."""

    name: str  # its key in the json format
    title: str
    compute: Callable[[Inputs], pd.DataFrame]
    rows: Rows
    key: str
    meanings: Mapping[str, str] = field(default_factory=dict)
    notes: Callable[[pd.DataFrame, dict[str, str]], list[str]] = no_notes
    settings: tuple[Setting, ...] = ()  # its report settings (gdsbench report builds its options from them)

    def build(self, inputs: Inputs, labels: dict[str, str]) -> DerivedTable:
        """Compute the table once: its figures and, where it has rows, its text cells."""
        found = self.compute(inputs)
        if found.empty:
            return DerivedTable(self.name, found, None)
        header, cells = self.rows(found, labels)
        legend = tables.legend(header, dict(self.meanings))
        table = Table(self.title, tuple(header), tuple(map(tuple, cells)), header.index(self.key) + 1, legend)
        return DerivedTable(self.name, found, table)
