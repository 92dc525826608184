"""`--format csv`: the report's summary (median and min-max per group) in base units, for spreadsheets."""

from __future__ import annotations

from gdsbench.report import register
from gdsbench.report.sections import Report


@register("csv")
def render(report: Report) -> str:
    """The summary table as CSV: one row per group, bandwidths in bytes/s."""
    return report.summary.to_csv(index=False)
