"""`--format json`: the report for machines: the groups, the summary, the checkpoint ratios and CPU costs in base
units (bytes/s, microseconds, NaN as null), the run labels, the status lines and the notes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gdsbench.report import register
from gdsbench.report.sections import Report

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "gdsbench.report/1"


def records(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
    """A frame as a list of JSON objects, NaN as null."""
    if frame is None or frame.empty:
        return []
    return list(json.loads(frame.to_json(orient="records")))


@register("json")
def render(report: Report) -> str:
    """Every figure of the report as one JSON document."""
    document = {
        "schema": SCHEMA,
        "groups": list(report.groups),
        "runs": dict(report.runs.items) if report.runs else {},
        "summary": records(report.summary),
        "ceilings": records(report.ratios),
        "cpu_cost": records(report.cpu_costs),
        "goodput": records(report.goodputs),
        "mlperf_geometry": records(report.geometries),
        "status": [{"group": title, "line": line} for title, line in report.status.items],
        "problems": list(report.notes.problems),
        "warnings": list(report.notes.warnings),
    }
    return json.dumps(document, indent=2) + "\n"
