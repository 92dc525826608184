"""Report cells in fio's units (sizes as 4K/16M, bandwidths as 1886MiB/s (1978MB/s), latencies in fio's unit),
the identity of rows (only what varies and applies), and the rows of the report's tables."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gdsbench.report.fio_style import iops_text
from gdsbench.results import figures_of
from gdsbench.units import format_bandwidth, latency_text, num2str, size_label

if TYPE_CHECKING:
    import pandas as pd

SPREAD_WARNING = 0.10
#: Parameter columns that hold sizes in bytes, shown as people write them (4K, 16M, 4G).
SIZE_COLUMNS = ("io_size", "file_size", "checkpoint_size", "staging", "alignment", "block_size")
#: Checkpoint patterns; every other pattern is storage I/O (fio, gdsio). The two never share a table.
CHECKPOINT_PATTERNS = ("save", "load", "train")
#: The header of the run_id column in tables: runs are labelled `run 1`, `run 2` (report.summary.run_labels).
RUN = "run"


def missing(value: Any) -> bool:
    """True for an empty cell: None or NaN (a key that does not apply to the row's engine)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def cell(column: str, value: Any, empty: str = "-") -> str:
    """A parameter value as people read it: sizes as 4K/16M, 4.0 as 4, missing as `empty`."""
    if missing(value):
        return empty
    if column in SIZE_COLUMNS and _integral(value):
        return size_label(int(float(value)))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _integral(value: Any) -> bool:
    """True for a whole number, or text that reads as one (a size cell of a case key)."""
    try:
        return float(value).is_integer()
    except (TypeError, ValueError):
        return False


def parse_case(case: str) -> dict[str, str]:
    """A case key `engine=fio,pattern=write,...` as a dict."""
    return dict(part.split("=", 1) for part in str(case).split(",") if "=" in part)


def case_text(case: str) -> str:
    """A case key with its sizes as people write them: io_size=16M, not 16777216."""
    return ",".join(f"{name}={cell(name, value)}" for name, value in parse_case(case).items())


def varying(frame: pd.DataFrame, columns: list[str]) -> list[str]:
    """The columns worth showing for these rows: filled in some row, not the same in every row, and (beside
    `engine`) telling apart some rows of one engine: an option of one engine, the same in all its rows
    (dcp's world_size=1), says nothing the engine column does not; rows of an older run that lack the
    key (it did not exist yet) are not told apart by it either."""

    def tells_apart(column: str) -> bool:
        if column == "engine" or "engine" not in frame:
            return True
        return bool((frame.groupby("engine", dropna=False)[column].nunique() > 1).any())

    return [
        c
        for c in columns
        if c in frame and frame[c].notna().any() and frame[c].nunique(dropna=False) > 1 and tells_apart(c)
    ]


def unused(frame: pd.DataFrame) -> dict[str, set[str]]:
    """Each case's options its rows leave blank although its key names them: options its engine does not use
    there (a read's end_fsync, the pool of fio on a local disk), as the sweep wrote them."""
    if "case" not in frame:
        return {}
    firsts = frame.dropna(subset=["case"]).drop_duplicates("case")  # each case's first row, in one pass
    return {
        row["case"]: {n for n in parse_case(row["case"]) if n in row.index and missing(row[n])}
        for _, row in firsts.iterrows()
    }


def case_labels(cases: list[str], blank: Mapping[str, set[str]] | None = None) -> tuple[list[str], list[list[str]]]:
    """The parameters that tell cases apart, as columns and cells (4K/16M sizes, blank where a key does not
    apply to the case's engine, or its rows left it blank: `unused`), instead of long keys."""
    import pandas as pd

    blank = blank or {}
    parsed = [{k: v for k, v in parse_case(case).items() if k not in blank.get(case, ())} for case in cases]
    names = list(dict.fromkeys(name for params in parsed for name in params))
    shown = varying(pd.DataFrame(parsed, columns=names), names) or ["engine"]
    return shown, [[cell(n, p.get(n), "") for n in shown] for p in parsed]


def group_title(groups: list[str], values: tuple, labels: dict[str, str]) -> str:
    """A group's values as `k=v` words, leaving out keys that do not apply (empty), runs by their label."""
    words = []
    for column, value in zip(groups, values):
        if column == "run_id" and value in labels:
            words.append(labels[value])
        elif not missing(value):
            words.append(f"{column}={cell(column, value)}")
    return " ".join(words)


def families(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows split into storage I/O (fio, gdsio) and checkpoint engines, each named, empty ones left out."""
    if "pattern" not in frame:
        return [("", frame)]
    saves = frame["pattern"].isin(CHECKPOINT_PATTERNS)
    parts = [("storage I/O", frame[~saves]), ("checkpoints", frame[saves])]
    return [(name, part) for name, part in parts if not part.empty]


def identity(groups: list[str], table: pd.DataFrame) -> list[str]:
    """The group columns a table of these rows shows: those that vary and apply (engine when none does)."""
    fallback = [str(g) for g in ("engine", "pattern") if g in groups][:1] or groups[:1]
    return varying(table, groups) or fallback


def median_row(group: pd.DataFrame, by: str = "bw_bytes") -> pd.Series:
    """A group's median repetition by `by` (the lower middle one when their count is even), ties in row order."""
    return group.sort_values(by, kind="stable").iloc[(len(group) - 1) // 2]


def header_of(column: str) -> str:
    """A group column's header: `run` for run_id (its cells are run labels)."""
    return RUN if column == "run_id" else column


def bw_text(value: float) -> str:
    """A bandwidth in fio's units, power of 2 then power of 10."""
    return "-" if value is None or math.isnan(value) else format_bandwidth(value)


def bw_range(low: float, high: float) -> str:
    """min-max bandwidth in power-of-2 units, the unit written once when both share it: 2806-2900MiB/s."""
    if missing(low) or missing(high):
        return "-"
    low_text, high_text = num2str(int(low), unit="B/s"), num2str(int(high), unit="B/s")
    (number_low, unit_low), unit_high = _split_unit(low_text), _split_unit(high_text)[1]
    return f"{number_low}-{high_text}" if unit_low == unit_high else f"{low_text}-{high_text}"


def _split_unit(text: str) -> tuple[str, str]:
    """'2806MiB/s' -> ('2806', 'MiB/s')."""
    digits = len(text) - len(text.lstrip("0123456789."))
    return text[:digits], text[digits:]


def number(value: float, digits: int = 1) -> str:
    """A float with a fixed number of digits, '-' when missing."""
    return "-" if missing(value) else f"{value:.{digits}f}"


def flags_cell(value: Any) -> str:
    """A flags cell, names separated by a comma and a space (so a narrow column wraps between them)."""
    return "" if missing(value) or not value else ", ".join(str(value).split(","))


def drop_empty(header: list[str], rows: list[list[str]], keep: int) -> tuple[list[str], list[list[str]]]:
    """Leave out the columns after the first `keep` that are empty ('-' or '') in every row."""
    shown = [i for i, _ in enumerate(header) if i < keep or any(row[i] not in ("-", "") for row in rows)]
    return [header[i] for i in shown], [[row[i] for i in shown] for row in rows]


def table_rows(
    groups: list[str], table: pd.DataFrame, runs: dict[str, str] | None = None
) -> tuple[list[str], list[list[str]]]:
    """Header and text cells of the aggregate table of these rows: the group columns that vary and apply
    (run labels for run_id), then the figures; columns empty in every row left out."""
    shown = identity(groups, table)
    header = [
        *map(header_of, shown),
        "n",
        "bw (median)",
        "min-max",
        "IOPS",
        "lat mean",
        "lat p99",
        "lat first",
        *figures_of(table),
        "flags",
    ]
    rows = [
        [
            *(runs.get(row[c], row[c]) if c == "run_id" and runs else cell(c, row[c], "") for c in shown),
            str(int(row["n"])),
            bw_text(row["bw_median"]),
            bw_range(row["bw_min"], row["bw_max"]),
            "-" if missing(row["iops_median"]) else iops_text(row["iops_median"]),
            latency_text(row["lat_mean_us"]),
            latency_text(row["lat_p99_us"]),
            latency_text(row.get("lat_first_us")),
            *(figure_text(column.unit, row[name]) for name, column in figures_of(table).items()),
            flags_cell(row.get("flags")),
        ]
        for _, row in table.iterrows()
    ]
    return drop_empty(header, rows, len(shown))


def figure_text(unit: str, value: Any) -> str:
    """A declared figure as the core ones read, by its unit: bandwidth and bytes in fio's units, latency in us or
    ms, seconds to the millisecond, counts whole, ratios to two places (anything else to 4 digits)."""
    if missing(value):
        return "-"
    number = float(value)
    if unit == "bytes/s":
        return bw_text(number)
    if unit == "bytes":
        return num2str(int(number), unit="B")
    if unit == "us":
        return latency_text(number)
    if unit == "s":
        return f"{number:.3f}s"
    if unit == "count":
        return f"{number:.0f}" if number.is_integer() or abs(number) >= 100 else f"{number:.1f}"
    if unit == "ratio":
        return f"{number:.2f}"
    return f"{number:.4g}"


def legend(header: list[str], meanings: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """(column, what it means) for the columns of `header` that `meanings` explains, in header order."""
    return tuple((name, meanings[name]) for name in header if name in meanings)


def problems(frame: pd.DataFrame) -> list[str]:
    """Skipped and failed cases, each once with its reason."""
    lines = []
    for status in ("failed", "skipped"):
        rows = frame[frame["status"] == status].drop_duplicates(["case", "error"])
        lines += [f"{status}: {case_text(r['case'])}: {r['error']}" for _, r in rows.iterrows()]
    return lines


def warnings(table: pd.DataFrame) -> list[str]:
    """Rigour checks on the aggregate: wide spread between repetitions, too few repetitions."""
    notes: list[str] = []
    if table.empty:
        return notes
    wide = table[table["spread"] > SPREAD_WARNING]
    if len(wide):
        notes.append(
            f"{len(wide)} of {len(table)} groups vary by more than {SPREAD_WARNING:.0%} between "
            "repetitions (max-min over median); add repetitions or a longer runtime"
        )
    if (table["n"] < 3).any():
        notes.append("some groups have fewer than 3 repetitions; medians of 1-2 runs are fragile")
    return notes
