"""`--format csv`: the report's summary (median and min-max per group) in base units, for spreadsheets: a text cell
a spreadsheet would evaluate as a formula is written behind a `'` (textout.formula_safe); numbers as they are."""

from __future__ import annotations

from gdsbench.report import register, textout
from gdsbench.report.sections import Report


@register("csv")
def render(report: Report) -> str:
    """The summary table as CSV: one row per group, bandwidths in bytes/s."""
    import pandas as pd

    safe = lambda cell: textout.formula_safe(cell) if isinstance(cell, str) else cell  # noqa: E731
    table = report.summary.rename(columns=safe)
    text = [c for c in table if not pd.api.types.is_numeric_dtype(table[c])]
    table[text] = table[text].map(safe)
    return table.to_csv(index=False)
