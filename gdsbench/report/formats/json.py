"""`--format json`: the report for machines: the groups, the summary, each derived table by its name (the checkpoint
ratios, the MLPerf geometry, goodput, CPU costs: report.summary.DERIVED) in base units (bytes/s, microseconds, NaN
as null; `units` names each column's unit by name or suffix; whole-number axes as integers), the run labels, the
status lines and the notes."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gdsbench.report import register
from gdsbench.report.sections import Report

if TYPE_CHECKING:
    import pandas as pd

SCHEMA = "gdsbench.report/1"


#: The unit of a figure's column, by the first rule its name matches: (exact name or suffix or prefix, unit).
UNIT_RULES = (
    ("cpu_s_per_gib", "CPU-seconds per GiB (2^30 bytes)"),
    ("busy_cpus_before", "CPUs"),
    ("cores", "CPUs"),
    ("x_", "ratio to the named best configuration's median"),
    ("bw", "bytes/s"),
    ("_us", "microseconds"),
    ("_s", "seconds"),
    ("seconds", "seconds"),
    ("bytes", "bytes"),
    ("io_size", "bytes"),
    ("file_size", "bytes"),
    ("checkpoint_size", "bytes"),
    ("iops", "I/O operations per second"),
    ("spread", "ratio: (max - min) / median"),
    ("compression_ratio", "ratio: bytes / bytes on disk"),
)


def unit_of(column: str) -> str | None:
    """A column's unit by UNIT_RULES (None for counts, text and parameters without one)."""
    for rule, unit in UNIT_RULES:
        if column == rule or column.endswith(rule) or column.startswith(rule) or f"_{rule}_" in f"_{column}_":
            return unit
    return None


#: Case parameters that are whole numbers: written as integers, not 4194304.0 (a column with gaps reads as float).
INTEGER_AXES = ("io_size", "threads", "iodepth", "file_size", "checkpoint_size", "world_size", "n")


def records(frame: pd.DataFrame | None) -> list[dict[str, Any]]:
    """A frame as a list of JSON objects, NaN as null, whole-number axes as integers."""
    if frame is None or frame.empty:
        return []
    frame = frame.copy()
    for column in INTEGER_AXES:
        if column in frame and _whole(frame[column]):
            frame[column] = frame[column].astype("Int64")
    return list(json.loads(frame.to_json(orient="records")))


def _whole(values: pd.Series) -> bool:
    """True for a numeric column whose every value is a whole number (gaps allowed)."""
    import pandas as pd

    numbers = pd.to_numeric(values, errors="coerce")
    present = numbers.dropna()
    return bool(numbers.notna().sum() == values.notna().sum() and (present == present.round()).all())


@register("json")
def render(report: Report) -> str:
    """Every figure of the report as one JSON document."""
    document = {
        "schema": SCHEMA,
        "groups": list(report.groups),
        "runs": dict(report.runs.items) if report.runs else {},
        "summary": records(report.summary),
        **{derived.name: records(derived.frame) for derived in report.derived},
        "status": [{"group": title, "line": line} for title, line in report.status.items],
        "problems": list(report.notes.problems),
        "warnings": list(report.notes.warnings),
    }
    tables = ("summary", *(derived.name for derived in report.derived))
    columns = dict.fromkeys(c for name in tables for record in document[name] for c in record)
    document["units"] = {c: unit for c in columns if (unit := unit_of(c))}
    return json.dumps(document, indent=2) + "\n"
