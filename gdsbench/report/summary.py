"""From results rows to the report value: group, aggregate repetitions, pick median runs, build the Report."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from gdsbench import flags
from gdsbench.errors import UsageError
from gdsbench.report import ceilings, cpu_cost, faults, fio_style, goodput, ladder, mlperf, nodes, tables, trust
from gdsbench.report.derived import Derived, Inputs, Setting
from gdsbench.report.sections import Legend, Lines, Notes, Report, Table
from gdsbench.results import NUMBER, figures_of, parameters, with_traits

STATUS_TITLE = "Run status, fio style (median repetition; the lower of two middle ones)"
RUNS_TITLE = "Runs"
RESULTS_TITLE = "Results: median and min-max over repetitions"
NOTES_TITLE = "Notes"
#: The derived tables (report/derived.py), in reading order: each one module's declaration.
DERIVED: tuple[Derived, ...] = (
    ceilings.TABLE,
    mlperf.TABLE,
    nodes.TABLE,
    goodput.TABLE,
    ladder.TABLE,
    faults.TABLE,
    cpu_cost.TABLE,
)


def settings() -> tuple[Setting, ...]:
    """Every report setting the derived tables declare (gdsbench report's options)."""
    return tuple(setting for table in DERIVED for setting in table.settings)


def default_groups(frame: pd.DataFrame) -> list[str]:
    """Group by host and run (when several are merged, or a multi-host sweep's) and by every parameter
    that varies."""
    runs = [c for c in ("host", "run_id") if c in frame and frame[c].nunique() > 1]
    varying = [c for c in parameters(frame.columns, figures_of(frame)) if frame[c].nunique(dropna=True) > 1]
    return runs + (varying or ["engine", "pattern"])


NEVER_POOLED = ("engine", "pattern")  # reads with writes, or one engine with another, are never one figure


def asked_groups(frame: pd.DataFrame, groups: list[str]) -> tuple[list[str], list[str]]:
    """--by's columns plus engine and pattern where they vary (never pooled), and the varying parameters
    pooled into each group (named in a note)."""
    ok = frame[frame["status"] == "ok"]
    varying = [c for c in parameters(ok.columns, figures_of(ok)) if ok[c].nunique(dropna=True) > 1]
    added = [c for c in NEVER_POOLED if c in varying and c not in groups]
    pooled = [c for c in varying if c not in groups and c not in added]
    return [*added, *groups], pooled


def pooled_note(frame: pd.DataFrame, asked: list[str], added: list[str], pooled: list[str]) -> list[str]:
    """What --by did beyond the columns asked for: the columns it kept apart, those it pooled over."""
    notes = []
    if added:
        notes.append(f"--by {','.join(asked)}: also grouped by {', '.join(added)} (never pooled)")
    if pooled:
        ok = frame[frame["status"] == "ok"]
        values = "; ".join(f"{c} ({', '.join(map(str, sorted(ok[c].dropna().unique(), key=str)))})" for c in pooled)
        notes.append(f"--by {','.join(asked)}: each group pools rows over {values}")
    return notes


def check_columns(frame: pd.DataFrame, groups: list[str]) -> None:
    """Refuse grouping by a column the results do not have, naming those it has."""
    unknown = [c for c in groups if c not in frame.columns]
    if unknown:
        known = ", ".join(c for c in frame.columns if c != "source")
        raise UsageError(f"--by: no column {', '.join(unknown)} in these results; columns: {known}")


def aggregate(frame: pd.DataFrame, groups: list[str]) -> pd.DataFrame:
    """Median and min-max of each group's ok rows, plus the number of repetitions."""
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=[*groups, "n"])
    grouped = ok.groupby(groups, dropna=False, sort=False)
    figures = {name: c for name, c in figures_of(frame).items() if c.kind == NUMBER and name in ok}
    table = grouped.agg(
        n=("bw_bytes", "size"),
        bw_median=("bw_bytes", "median"),
        bw_min=("bw_bytes", "min"),
        bw_max=("bw_bytes", "max"),
        iops_median=("iops", "median"),
        lat_mean_us=("lat_mean_us", "median"),
        lat_p99_us=("lat_p99_us", "median"),
        **({"lat_first_us": ("lat_first_us", "median")} if "lat_first_us" in ok else {}),
        bytes=("bytes", "median"),
        **{name: (name, "median") for name in figures},
    ).reset_index()
    table.attrs["figures"] = figures  # the engines' declared columns, shown after the core figures
    table["spread"] = (table["bw_max"] - table["bw_min"]) / table["bw_median"]
    if "flags" in ok:
        table["flags"] = list(grouped["flags"].agg(trust.union_flags))
    return table


def median_rows(frame: pd.DataFrame, groups: list[str]) -> list[tuple[tuple, dict[str, Any]]]:
    """Each group's median repetition (lower middle when even), as (group values, row)."""
    ok = frame[frame["status"] == "ok"]
    picked = []
    for values, group in ok.groupby(groups, dropna=False, sort=False):
        picked.append((values if isinstance(values, tuple) else (values,), tables.median_row(group).to_dict()))
    return picked


def run_labels(frame: pd.DataFrame) -> dict[str, str]:
    """`run 1`, `run 2`, ... for each run id in order of appearance, when the frame holds several runs."""
    if "run_id" not in frame or frame["run_id"].nunique() < 2:
        return {}
    return {run: f"run {index}" for index, run in enumerate(frame["run_id"].dropna().unique(), 1)}


def runs_legend(frame: pd.DataFrame, labels: dict[str, str]) -> Legend | None:
    """What each run label stands for: its results file and run id."""
    if not labels:
        return None
    items = []
    for run, label in labels.items():
        files = frame.loc[frame["run_id"] == run, "source"].dropna().unique() if "source" in frame else []
        where = ", ".join(Path(str(f)).stem for f in files)
        items.append((label, f"{where} (run_id {run})" if where else f"run_id {run}"))
    return Legend(RUNS_TITLE, tuple(items))


def status_lines(frame: pd.DataFrame, groups: list[str], labels: dict[str, str] | None = None) -> Lines:
    """fio's run-status line of each group's median repetition, titled by the group's values; a training loop's
    rows have none (their bandwidth is one checkpoint's bytes over its time until durable, not a storage run:
    the train and ladder tables show their figures)."""
    runs = frame[frame["pattern"] != "train"] if "pattern" in frame else frame
    items = [
        (tables.group_title(groups, values, labels or {}), fio_style.status_line(row))
        for values, row in median_rows(runs, groups)
    ]
    return Lines(STATUS_TITLE, tuple(items))


def _table(title: str, header: list[str], rows: list[list[str]], keys: int = 0) -> Table:
    """A Table section from a header and rows of text cells."""
    return Table(title, tuple(header), tuple(tuple(row) for row in rows), keys)


def results_tables(summary: pd.DataFrame, groups: list[str], labels: dict[str, str]) -> tuple[Table, ...]:
    """The results table of each family of rows (storage I/O, checkpoints), titled by it when there are two."""
    parts = tables.families(summary)
    made = []
    for name, part in parts:
        header, rows = tables.table_rows(groups, part, labels)
        title = f"{RESULTS_TITLE}, {name}" if len(parts) > 1 else RESULTS_TITLE
        made.append(_table(title, header, rows, len(tables.identity(groups, part))))
    return tuple(made) or (_table(RESULTS_TITLE, *tables.table_rows(groups, summary, labels)),)


def build(frame: pd.DataFrame, groups: list[str] | None = None, settings: Mapping[str, Any] | None = None) -> Report:
    """The report of a results frame: every section, in order, computed once for every format; `settings`: the
    report settings the derived tables declare (settings()), parsed, by name (the goodput model's `mtbf`, the
    durability ladder's `mtbf_local`, `mtbf_node` and `mtbf_correlated`).

    Every guard rail is judged first (flags.annotate): flags show per group, with their remedies,
    stragglers and links below their maximum in the notes.
    """
    asked, pooling = list(groups or []), list[str]()
    if groups:
        check_columns(frame, groups)
        groups, pooling = asked_groups(frame, groups)
    groups = groups or default_groups(frame)
    pooled = pooled_note(frame, asked, [g for g in groups if g not in asked], pooling) if asked else []
    frame = with_traits(frame)  # a frame built in memory, not read from a file, gets them as a file would
    metas = trust.sidecars(frame)
    frame = flags.annotate(frame, metas)
    summary = aggregate(frame, groups)
    labels = run_labels(frame)
    inputs = Inputs(frame, metas, dict(settings or {}))
    built = [(table, table.build(inputs, labels)) for table in DERIVED]
    derived_notes = [note for table, found in built for note in table.notes(found.frame, labels)]
    return Report(
        groups=tuple(groups),
        summary=summary,
        status=status_lines(frame, groups, labels),
        results=results_tables(summary, groups, labels),
        notes=Notes(
            NOTES_TITLE,
            tuple(tables.problems(frame)),
            tuple(
                pooled
                + tables.warnings(summary)
                + derived_notes
                + trust.flag_notes(frame)
                + trust.straggler_notes(frame, groups, labels)
                + trust.link_warnings(metas)
            ),
        ),
        derived=tuple(found for _, found in built),
        runs=runs_legend(frame, labels),
        labels=tuple(labels.items()),
    )
