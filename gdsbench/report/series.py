"""Time-series figures: each case's bandwidth and latency over the run, from the `.series.tsv` tables.

One figure per case, named by its index and the parameters that tell it apart from the other cases
(`series-03-fio-write-threads4-io_size1M`) and titled by them (`#03 fio write: threads=4, io_size=1M`, the
case's other parameters on the next line), two panels (bandwidth summed over the
jobs of each log window, completion latency averaged over them) and a line per host and repetition, so
a throttling SSD or a write cliff after the SLC cache fills shows as a falling line, and a slow host
as a lower one. Bandwidth windows are binned on the log window (fio's jobs log at their own times).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import seaborn as sns

from gdsbench.report import tables
from gdsbench.report.plots import (
    Plot,
    bw_unit,
    legend_room,
    literal_text,
    new_figure,
    run_title,
    slug,
    suptitle,
    with_run,
)

#: At most this many series figures go into an HTML page (each is an embedded image).
HTML_LIMIT = 40


def varying(cases: list[str], blank: Mapping[str, set[str]] | None = None) -> dict[str, list[tuple[str, str]]]:
    """Each case's parameters that differ between the cases, beside engine and pattern: (name, 4K/16M value);
    `blank`: each case's options its rows leave blank (tables.unused)."""
    shown, cells = tables.case_labels(cases, blank)
    return {
        case: [(n, v) for n, v in zip(shown, cell) if v and n not in ("engine", "pattern")]
        for case, cell in zip(cases, cells)
    }


def names(cases: list[str], blank: Mapping[str, set[str]] | None = None) -> dict[str, str]:
    """Each case's figure name: its index, engine, pattern and the parameters that differ between the cases."""
    found = {}
    for index, (case, params) in enumerate(varying(cases, blank).items(), 1):
        parsed = tables.parse_case(case)
        words = [f"{n}{v}" for n, v in params]
        found[case] = slug("series", f"{index:02d}", parsed.get("engine", "case"), parsed.get("pattern", ""), *words)
    return found


def per_window(series: pd.DataFrame) -> pd.DataFrame:
    """Each run's (host, repetition) figures per log window: bandwidth summed over jobs, latency averaged."""
    step = _step(series)
    binned = series.assign(time_s=(series["time_s"] / step).round() * step)
    keys = ["source", "run_id", "case", "host", "repetition", "time_s"]
    return binned.groupby(keys, dropna=False, as_index=False).agg(
        bw_bytes=("bw_bytes", lambda v: v.sum(min_count=1)), lat_us=("lat_us", "mean")
    )


def _step(series: pd.DataFrame) -> float:
    """The log window: the most common gap between one job's consecutive bandwidth times (0.1 s unknown)."""
    gaps: list[float] = []
    for _, job in series.dropna(subset=["bw_bytes"]).groupby(["source", "case", "host", "repetition", "job"]):
        gaps += list(np.diff(np.sort(job["time_s"].to_numpy())))
    positive = pd.Series(gaps).round(3)
    positive = positive[positive > 0]
    return float(positive.mode().iloc[0]) if len(positive) else 0.1


def figures(series: pd.DataFrame, frame: pd.DataFrame | None = None, limit: int | None = None) -> list[Plot]:
    """One figure per case that has a series, in the order the cases first appear (at most `limit`)."""
    if series.empty:
        return []
    windows = per_window(series)
    cases = list(dict.fromkeys(series["case"]))  # the sweep's order (per_window sorts)
    blank = tables.unused(frame) if frame is not None else {}
    named, shown = names(cases, blank), varying(cases, blank)
    return [
        Plot(
            named[case],
            _figure(
                windows[windows["case"] == case],
                heading(index, case, shown[case], blank.get(case, set())),
                _title(windows, frame),
            ),
            case,
        )
        for index, case in enumerate(cases[:limit], 1)
    ]


def heading(
    index: int, case: str, params: list[tuple[str, str]], blank: set[str] | frozenset[str] = frozenset()
) -> str:
    """A figure's title above its run: its index, engine, pattern and the parameters that tell it apart from
    the other cases; then, on a line of their own, the case's other parameters it uses (sizes as 4K/16M)."""
    parsed = tables.parse_case(case)
    first = f"#{index:02d} {parsed.get('engine', 'case')} {parsed.get('pattern', '')}".rstrip()
    first += ": " + ", ".join(f"{n}={v}" for n, v in params) if params else ""
    told = {"engine", "pattern", *(n for n, _ in params), *blank}
    rest = [f"{n}={tables.cell(n, v)}" for n, v in parsed.items() if n not in told]
    return first + ("\nwith " + ", ".join(rest) if rest else "")


def _title(windows: pd.DataFrame, frame: pd.DataFrame | None) -> str:
    """Which run(s) a series figure shows: run id and date (from the results rows, when given)."""
    runs = ", ".join(dict.fromkeys(windows["run_id"].astype(str)))
    rows = frame[frame["run_id"].astype(str).isin(windows["run_id"].astype(str))] if frame is not None else None
    when = run_title(with_run(rows)).rsplit(", ", 1)[-1] if rows is not None and not rows.empty else ""
    return f"run {runs}" + (f", {when}" if "UTC" in when else "")


def _figure(windows: pd.DataFrame, case_title: str, title: str):
    """Bandwidth and latency over time for one case, a line per host x repetition (text drawn as written)."""
    run = windows["host"].astype(str) + " rep " + windows["repetition"].astype(str)
    data = windows.assign(run=run.map(literal_text))
    divisor, unit = bw_unit(float(data["bw_bytes"].max() or 1))
    data = data.assign(bw=data["bw_bytes"] / divisor, lat_ms=data["lat_us"] / 1000)
    figure = new_figure(2, extra=legend_room(data["run"].unique(), fontsize=8))
    axes = figure.subplots(1, 2, sharex=True)
    for index, (axis, column, label) in enumerate(
        zip(axes, ("bw", "lat_ms"), (f"bandwidth ({unit}, all jobs)", "completion latency (ms, mean of jobs)"))
    ):
        sns.lineplot(
            data.dropna(subset=[column]),
            x="time_s",
            y=column,
            hue="run",
            ax=axis,
            marker=".",
            estimator=None,
            legend=index == 1,
        )
        axis.set_xlabel("time in run (s)")
        axis.set_ylabel(label)
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
    if axes[1].get_legend() is not None:
        sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.02, 1), frameon=False, fontsize=8)
    suptitle(figure, literal_text(f"{case_title}\n{title}"), fontsize=10)
    return figure
