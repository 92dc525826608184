"""Reports read results (never runners): aggregate repetitions, then render text, markdown or csv."""

from __future__ import annotations

from typing import Any

import pandas as pd

from gdsbench.errors import UsageError
from gdsbench.report import fio_style, tables
from gdsbench.results import parameters

FORMATS = ("text", "markdown", "csv")
#: Patterns of checkpoint engines and the fio pattern whose bandwidth is their ceiling.
CEILINGS = {"save": "write", "load": "read"}


def default_groups(frame: pd.DataFrame) -> list[str]:
    """Group by run (when several are merged) and by every parameter that varies."""
    runs = [c for c in ("host", "run_id") if c in frame and frame[c].nunique() > 1]
    varying = [c for c in parameters(frame.columns) if frame[c].nunique(dropna=True) > 1]
    return runs + (varying or ["engine", "pattern"])


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
    table = grouped.agg(
        n=("bw_bytes", "size"),
        bw_median=("bw_bytes", "median"),
        bw_min=("bw_bytes", "min"),
        bw_max=("bw_bytes", "max"),
        iops_median=("iops", "median"),
        lat_mean_us=("lat_mean_us", "median"),
        lat_p99_us=("lat_p99_us", "median"),
        bytes=("bytes", "median"),
    ).reset_index()
    table["spread"] = (table["bw_max"] - table["bw_min"]) / table["bw_median"]
    return table


def median_rows(frame: pd.DataFrame, groups: list[str]) -> list[tuple[tuple, dict[str, Any]]]:
    """Each group's median repetition (lower middle when even), as (group values, row)."""
    ok = frame[frame["status"] == "ok"]
    picked = []
    for values, group in ok.groupby(groups, dropna=False, sort=False):
        ordered = group.sort_values("bw_bytes", kind="stable")
        picked.append(
            (values if isinstance(values, tuple) else (values,), ordered.iloc[(len(ordered) - 1) // 2].to_dict())
        )
    return picked


def engine_labels(rows: pd.DataFrame) -> pd.Series:
    """Each checkpoint row's engine, with the parameters that tell apart its cases of the same pattern
    (e.g. 'fastpersist (load_into=True)'), so variants of one engine are never merged."""
    labels = rows["engine"].astype(str)
    params = [c for c in parameters(rows.columns) if c not in ("engine", "pattern")]
    for _, group in rows.groupby(["engine", "pattern"], sort=False):
        varying = [c for c in params if group[c].nunique(dropna=False) > 1]
        if varying:
            text = group[varying].apply(lambda r: ", ".join(f"{c}={_plain(v)}" for c, v in r.items()), axis=1)
            labels.loc[group.index] = group["engine"].astype(str) + " (" + text + ")"
    return labels


def _plain(value: object) -> str:
    """A parameter value as a config writes it: 4, not the 4.0 a column with gaps turns it into."""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def ceiling_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Each checkpoint engine's median bandwidth as a ratio to fio's best of the same run and direction.

    The ceiling is fio's best median over its direct-I/O cases of the same direction (sequential write
    for saves, read for loads); page-cache (CPU_CACHED) fio cases measure memory, not the disk.
    """
    ok = frame[frame["status"] == "ok"]
    rows = []
    for (run_id, host), run in ok.groupby(["run_id", "host"], sort=False):
        ckpt = run[run["pattern"].isin(list(CEILINGS))]
        if ckpt.empty:
            continue
        ckpt = ckpt.assign(label=engine_labels(ckpt))
        for (label, _engine, pattern), group in ckpt.groupby(["label", "engine", "pattern"], sort=False):
            fio = run[
                (run["engine"] == "fio") & (run["pattern"] == CEILINGS[pattern]) & (run["transfer"] != "CPU_CACHED")
            ]  # the disk's limit, not the page cache's
            ceiling = fio.groupby("case")["bw_bytes"].median().max() if not fio.empty else float("nan")
            base = _same_conditions(run[(run["engine"] == "torch_save") & (run["pattern"] == pattern)], group)
            base = base["bw_bytes"].median()
            median = group["bw_bytes"].median()
            rows.append(
                {
                    "host": host,
                    "run_id": run_id,
                    "engine": label,
                    "pattern": pattern,
                    "n": len(group),
                    "bw_median": median,
                    "x_fio": median / ceiling,
                    "x_torch_save": median / base,
                    "fio_bw": ceiling,
                }
            )
    return pd.DataFrame(rows)


CONDITIONS = ("cache", "memory")  # the state a load starts from: baselines are compared in the same one


def _same_conditions(baseline: pd.DataFrame, group: pd.DataFrame) -> pd.DataFrame:
    """The baseline rows measured in the group's page-cache and memory state, where the run has them."""
    for column in CONDITIONS:
        if column in group and column in baseline and group[column].nunique() == 1:
            same = baseline[baseline[column] == group[column].iloc[0]]
            baseline = same if not same.empty else baseline
    return baseline


def render(frame: pd.DataFrame, groups: list[str] | None, fmt: str) -> str:
    """The whole report in one format."""
    if fmt not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}")
    groups = groups or default_groups(frame)
    check_columns(frame, groups)
    table = aggregate(frame, groups)
    ratios = ceiling_ratios(frame)
    if fmt == "csv":
        return table.to_csv(index=False)
    lines = [fio_style.status_line(row) for _, row in median_rows(frame, groups)]
    return tables.render(fmt, frame, groups, table, lines, ratios, median_rows(frame, groups))
