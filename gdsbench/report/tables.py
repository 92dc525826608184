"""Report cells in fio's units (sizes as 4K/16M, bandwidths as 1886MiB/s (1978MB/s)), the rows of the
report's tables, and the plain-text and markdown table writers that reports and compare share."""

from __future__ import annotations

import io
import math
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from gdsbench.report.fio_style import iops_text
from gdsbench.units import format_bandwidth, num2str, size_label

if TYPE_CHECKING:
    import pandas as pd

SPREAD_WARNING = 0.10
#: Parameter columns that hold sizes in bytes, shown as people write them (4K, 16M, 4G).
SIZE_COLUMNS = ("io_size", "checkpoint_size")


def cell(column: str, value: Any) -> str:
    """A parameter value as people read it: sizes as 4K/16M, missing as '-'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if column in SIZE_COLUMNS:
        return size_label(int(value))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def case_labels(cases: list[str]) -> tuple[list[str], list[list[str]]]:
    """The parameters that differ between cases, as columns and cells (4K/16M sizes), instead of long keys."""
    parsed = [dict(part.split("=", 1) for part in case.split(",") if "=" in part) for case in cases]
    names = list(dict.fromkeys(name for params in parsed for name in params))
    varying = [n for n in names if len({p.get(n) for p in parsed}) > 1] or ["engine"]
    return varying, [
        [cell(n, _number(p.get(n))) if n in SIZE_COLUMNS else p.get(n, "-") for n in varying] for p in parsed
    ]


def _number(text: str | None) -> float | None:
    """A parsed number for size cells, None when missing or not numeric."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def bw_text(value: float) -> str:
    """A bandwidth in fio's units, power of 2 then power of 10."""
    return "-" if value is None or math.isnan(value) else format_bandwidth(value)


def bw_range(low: float, high: float) -> str:
    """min-max bandwidth in power-of-2 units."""
    return f"{num2str(int(low), unit='B/s')}-{num2str(int(high), unit='B/s')}"


def number(value: float, digits: int = 1) -> str:
    """A float with a fixed number of digits, '-' when missing."""
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def table_rows(groups: list[str], table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and text cells of the aggregate table (a `flags` column when any group is flagged)."""
    flagged = int("flags" in table and bool(table["flags"].fillna("").astype(bool).any()))
    header = [*groups, "n", "bw (median)", "min-max", "IOPS", "lat mean us", "lat p99 us", *(["flags"] * flagged)]
    rows = []
    for _, row in table.iterrows():
        iops = row["iops_median"]
        rows.append(
            [
                *(cell(c, row[c]) for c in groups),
                str(int(row["n"])),
                bw_text(row["bw_median"]),
                bw_range(row["bw_min"], row["bw_max"]),
                "-" if math.isnan(iops) else iops_text(iops),
                number(row["lat_mean_us"]),
                number(row["lat_p99_us"]),
                *([row["flags"] or ""] * flagged),
            ]
        )
    return header, rows


#: Columns of the checkpoint table shown only when some row has them: header -> (ratio column, digits).
OPTIONAL_RATIOS = {"x dcp": ("x_dcp", 2), "blocked s": ("blocking_s", 3), "size ratio": ("compression_ratio", 2)}


def ratio_rows(ratios: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the checkpoint-vs-fio table: the ratio to fio's ceiling (durable for saves),
    to fio's write without fsync (a reference, saves only) and to torch_save; for distributed engines the
    ratio to DCP's own storage, the time the caller was blocked and the compression ratio; the ceiling."""
    extra = {h: c for h, c in OPTIONAL_RATIOS.items() if c[0] in ratios and ratios[c[0]].notna().any()}
    header = ["engine", "pattern", "n", "bw (median)", "x fio", "x fio (no fsync)", "x torch_save", *extra,
              "fio ceiling"]  # fmt: skip
    rows = [
        [
            r["engine"],
            r["pattern"],
            str(r["n"]),
            bw_text(r["bw_median"]),
            number(r["x_fio"], 2),
            number(r["x_fio_no_fsync"], 2),
            number(r["x_torch_save"], 2),
            *(number(r[column], digits) for column, digits in extra.values()),
            bw_text(r["fio_bw"]) + _ceiling_kind(r["pattern"], r["durable"]),
        ]
        for _, r in ratios.iterrows()
    ]
    return header, rows


def _ceiling_kind(pattern: str, durable: bool) -> str:
    """What a save's ceiling was: fio's durable write, or (labelled, for want of one) a write without fsync."""
    if pattern != "save":
        return ""
    return ", durable" if durable else ", no fsync"


def problems(frame: pd.DataFrame) -> list[str]:
    """Skipped and failed cases, each once with its reason."""
    lines = []
    for status in ("failed", "skipped"):
        rows = frame[frame["status"] == status].drop_duplicates(["case", "error"])
        lines += [f"{status}: {r['case']}: {r['error']}" for _, r in rows.iterrows()]
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


def plain_text(*parts: str | Table) -> str:
    """Lines and rich tables rendered as plain text (no colour, no escape codes), 160 columns wide."""
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=False, color_system=None)
    for part in parts:
        console.print(part, highlight=False, soft_wrap=True, markup=False)
    return out.getvalue()


def rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    """A rich Table from header and cells."""
    table = Table(title=title, title_justify="left")
    for name in header:
        table.add_column(name, justify="left" if name in ("engine", "pattern", "transfer") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown pipe table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]
