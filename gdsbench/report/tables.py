"""Tables of aggregated results as rich text or markdown, in fio's units."""

from __future__ import annotations

import io
import math
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from gdsbench.report.fio_style import iops_text
from gdsbench.units import format_bandwidth, num2str, size_label

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
    """Header and text cells of the aggregate table."""
    header = [*groups, "n", "bw (median)", "min-max", "IOPS", "lat mean us", "lat p99 us"]
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
            ]
        )
    return header, rows


def ratio_rows(ratios: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the checkpoint-vs-fio table."""
    header = ["engine", "pattern", "n", "bw (median)", "x fio", "x torch_save", "fio ceiling"]
    rows = [
        [
            r["engine"],
            r["pattern"],
            str(r["n"]),
            bw_text(r["bw_median"]),
            number(r["x_fio"], 2),
            number(r["x_torch_save"], 2),
            bw_text(r["fio_bw"]),
        ]
        for _, r in ratios.iterrows()
    ]
    return header, rows


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


def render(
    fmt: str,
    frame: pd.DataFrame,
    groups: list[str],
    table: pd.DataFrame,
    lines: list[str],
    ratios: pd.DataFrame,
    medians: list,
) -> str:
    """The report as rich text or markdown."""
    header, rows = table_rows(groups, table)
    titles = [" ".join(f"{g}={cell(g, v)}" for g, v in zip(groups, values)) for values, _ in medians]
    if fmt == "markdown":
        return _markdown(header, rows, titles, lines, ratios, problems(frame), warnings(table))
    return _text(header, rows, titles, lines, ratios, problems(frame), warnings(table))


def plain_text(*parts: str | Table) -> str:
    """Lines and rich tables rendered as plain text (no colour, no escape codes), 160 columns wide."""
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=False, color_system=None)
    for part in parts:
        console.print(part, highlight=False, soft_wrap=True)
    return out.getvalue()


def _text(header, rows, titles, lines, ratios, issues, notes) -> str:
    """rich tables rendered to plain text."""
    parts: list[str | Table] = ["Run status (fio style; the median repetition of each group):"]
    parts += [f"  {title}\n{line}" for title, line in zip(titles, lines)]
    parts.append(rich_table("Results: median and min-max over repetitions", header, rows))
    if not ratios.empty:
        parts.append(rich_table("Checkpoint engines against the fio ceiling of the same run", *ratio_rows(ratios)))
    parts += issues + [f"warning: {n}" for n in notes]
    return plain_text(*parts)


def rich_table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    """A rich Table from header and cells."""
    table = Table(title=title, title_justify="left")
    for name in header:
        table.add_column(name, justify="left" if name in ("engine", "pattern", "transfer") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def _markdown(header, rows, titles, lines, ratios, issues, notes) -> str:
    """GitHub-flavoured markdown, for pasting into a pull request."""
    parts = ["### Run status (fio style, median repetition)", "", "```"]
    for title, line in zip(titles, lines):
        parts += [f"# {title}", line]
    parts += ["```", "", "### Results (median, min-max over repetitions)", "", *md_table(header, rows)]
    if not ratios.empty:
        parts += ["", "### Checkpoint engines against the fio ceiling", "", *md_table(*ratio_rows(ratios))]
    if issues or notes:
        parts += [""] + [f"- {line}" for line in issues + [f"warning: {n}" for n in notes]]
    return "\n".join(parts) + "\n"


def md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown pipe table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]
