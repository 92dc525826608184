"""Figures of results: a DataFrame in, matplotlib Figures out (Agg canvas; no pyplot state, no runners).

One figure per group, each a `Plot(name, figure)` whose name is the file stem `save` writes:

- `heatmap-<pattern>-<transfer>`: median bandwidth over threads (rows) x IO size (columns), one panel
  per run (host, run_id) when several are merged; drawn only with at least 2 thread counts and 2 IO
  sizes (a 1 x N map is the bandwidth line figure, badly).
- `bandwidth-<pattern>`: median bandwidth vs IO size, a line per transfer type with a min-max band over
  repetitions, one panel per thread count; several runs get one line style each.
- `latency-<pattern>`: mean and p99 latency vs IO size (two panels), a line per transfer type and
  thread count (and run, when several are merged).
- `checkpoint-<pattern>` (save, load): median bandwidth per engine with min-max error bars, bars by run,
  and fio's best bandwidth of the same run and direction drawn as a dashed reference line.

IO sizes sit on a log-2 axis labelled 4K, 128K, 1M, 16M; bandwidths are in fio's power-of-2 units
(MiB/s, GiB/s); every figure's title names the pattern and the run(s): host, run_id and date.
Only `ok` rows are drawn; fio-style patterns need an io_size, checkpoint patterns do not.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from gdsbench.report.ceilings import CEILINGS, ceiling_ratios, engine_labels
from gdsbench.units import size_label

IO_PATTERNS = ("write", "read", "randwrite", "randread")
CHECKPOINT_PATTERNS = tuple(CEILINGS)
FORMATS = ("png", "svg")
#: (divisor, label) for bandwidth axes, largest first: fio's power-of-2 units.
BW_UNITS = ((2**40, "TiB/s"), (2**30, "GiB/s"), (2**20, "MiB/s"), (2**10, "KiB/s"), (1, "B/s"))
PANEL_WIDTH, PANEL_HEIGHT = 5.2, 3.8


@dataclass(frozen=True)
class Plot:
    """One figure and the deterministic file stem it is saved under."""

    name: str
    figure: Figure
    case: str | None = None  # the case a time-series figure shows (report.series)


def figures(frame: pd.DataFrame) -> list[Plot]:
    """Every figure the results allow, in a fixed order."""
    return [*heatmaps(frame), *bandwidth_lines(frame), *latency_lines(frame), *checkpoint_bars(frame)]


def save(
    plots: Iterable[Plot],
    directory: Path,
    formats: Iterable[str] = FORMATS,
    progress: Callable[[int, int, str], None] | None = None,
) -> list[Path]:
    """Write each figure as <directory>/<name>.<format>; return the paths written. `progress` is told
    (done, total, name) after each figure."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    plots = list(plots)
    for index, plot in enumerate(plots, 1):
        for fmt in formats:
            path = directory / f"{plot.name}.{fmt}"
            # No creation date in the SVG, so regenerated figures diff only where the data changed.
            metadata = {"Date": None} if fmt == "svg" else {}
            plot.figure.savefig(path, format=fmt, dpi=110, metadata=metadata)
            paths.append(path)
        if progress:
            progress(index, len(plots), plot.name)
    return paths


def io_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of block-IO patterns (fio, gdsio) that have an IO size, with a `run` label column."""
    rows = frame[(frame["status"] == "ok") & frame["pattern"].isin(IO_PATTERNS) & frame["io_size"].notna()]
    return with_run(rows)


def with_run(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy with a `run` column: 'host run_id' (the dimension several merged runs differ in)."""
    out = frame.copy()
    out["run"] = out["host"].astype(str) + " " + out["run_id"].astype(str)
    return out


def run_title(frame: pd.DataFrame) -> str:
    """Which machine and run the figure shows: 'host vm, run <id>, 2026-11-22' or 'N runs on a, b'."""
    runs = frame[["host", "run_id"]].drop_duplicates()
    started = frame["started_at"] if "started_at" in frame else pd.Series(dtype=object)  # old files may lack it
    dates = pd.to_datetime(started, errors="coerce", utc=True).dropna()
    when = f", {dates.min():%Y-%m-%d %H:%M} UTC" if len(dates) else ""
    if len(runs) == 1:
        host, run_id = runs.iloc[0]
        return f"host {host}, run {run_id}{when}"
    hosts = ", ".join(sorted(runs["host"].astype(str).unique()))
    return f"{len(runs)} runs on {hosts}{when}"


def slug(*parts: object) -> str:
    """A file-name-safe stem from parts: ('heatmap', 'read', 'CPU_ONLY') -> 'heatmap-read-CPU_ONLY'."""
    return "-".join(re.sub(r"[^A-Za-z0-9_.]+", "_", str(p)) for p in parts)


def bw_unit(max_bytes_per_s: float) -> tuple[float, str]:
    """The fio unit that shows the largest bandwidth with at most 4 integer digits."""
    for divisor, label in BW_UNITS:
        if max_bytes_per_s >= divisor:
            return float(divisor), label
    return 1.0, "B/s"


def new_figure(columns: int, rows: int = 1, width: float = PANEL_WIDTH, height: float = PANEL_HEIGHT) -> Figure:
    """A constrained-layout Figure on an Agg canvas, sized per panel so labels never overlap."""
    figure = Figure(figsize=(width * columns + 0.8, height * rows + 0.9), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def size_axis(axis, sizes: Iterable[float]) -> None:
    """A log-2 IO-size x axis ticked at the measured sizes, labelled 4K, 128K, 1M, 16M."""
    ticks = sorted({int(s) for s in sizes})
    axis.set_xscale("log", base=2)
    axis.set_xticks(ticks, [size_label(s) for s in ticks])
    axis.xaxis.set_minor_locator(NullLocator())
    axis.set_xlabel("IO size")
    if len(ticks) > 1:
        axis.set_xlim(ticks[0] / 1.4, ticks[-1] * 1.4)


def heatmaps(frame: pd.DataFrame) -> list[Plot]:
    """Median bandwidth over threads x IO size, one figure per pattern and transfer type."""
    rows = io_rows(frame)
    rows = rows[rows["threads"].notna()]
    plots = []
    for (pattern, transfer), group in rows.groupby(["pattern", "transfer"], sort=True):
        if group["threads"].nunique() >= 2 and group["io_size"].nunique() >= 2:  # a map needs 2 x 2 cells
            plots.append(Plot(slug("heatmap", pattern, transfer), _heatmap(group, pattern, transfer)))
    return plots


def _heatmap(group: pd.DataFrame, pattern: str, transfer: str) -> Figure:
    """One heatmap panel per run, sharing one colour scale in fio units."""
    runs = sorted(group["run"].unique())
    divisor, unit = bw_unit(group["bw_bytes"].max())
    medians = group.groupby(["run", "threads", "io_size"])["bw_bytes"].median() / divisor
    sizes = sorted(group["io_size"].unique())
    figure = new_figure(
        len(runs), width=max(4.2, 1.1 * len(sizes) + 1.8), height=max(2.6, 0.7 * group["threads"].nunique() + 1.6)
    )
    axes = figure.subplots(1, len(runs), squeeze=False)[0]
    vmax = medians.max()
    for axis, run in zip(axes, runs):
        grid = medians.loc[run].unstack("io_size").reindex(columns=sizes).sort_index(ascending=False)
        sns.heatmap(
            grid,
            ax=axis,
            annot=True,
            fmt=".0f" if vmax >= 10 else ".2f",
            cmap="viridis",
            vmin=0,
            vmax=vmax,
            cbar_kws={"label": f"bandwidth ({unit}, median)"},
            linewidths=0.5,
            annot_kws={"fontsize": 9},
        )
        axis.set_xticks(np.arange(len(sizes)) + 0.5, [size_label(int(s)) for s in sizes], rotation=0)
        axis.set_yticks(np.arange(len(grid.index)) + 0.5, [str(int(t)) for t in grid.index], rotation=0)
        axis.set_xlabel("IO size")
        axis.set_ylabel("threads")
        if len(runs) > 1:
            axis.set_title(run, fontsize=9)
    figure.suptitle(f"{pattern} {transfer}: bandwidth ({unit})\n{run_title(group)}", fontsize=11)
    return figure


def min_max(values: pd.Series) -> tuple[float, float]:
    """seaborn errorbar: the band from the slowest to the fastest repetition."""
    return values.min(), values.max()


def bandwidth_lines(frame: pd.DataFrame) -> list[Plot]:
    """Bandwidth vs IO size, a line per transfer type with a min-max band; one figure per pattern."""
    rows = io_rows(frame)
    return [
        Plot(slug("bandwidth", pattern), _bandwidth(group, pattern))
        for pattern, group in rows.groupby("pattern", sort=True)
    ]


def _bandwidth(group: pd.DataFrame, pattern: str) -> Figure:
    """One panel per thread count: lines by transfer (hue) and by run (style) when several runs."""
    group = group.assign(threads=group["threads"].fillna(0).astype(int))
    threads = sorted(group["threads"].unique())
    divisor, unit = bw_unit(group["bw_bytes"].max())
    data = group.assign(bw=group["bw_bytes"] / divisor)
    figure = new_figure(len(threads))
    axes = figure.subplots(1, len(threads), squeeze=False, sharey=True)[0]
    style = "run" if data["run"].nunique() > 1 else None
    for index, (axis, count) in enumerate(zip(axes, threads)):
        panel = data[data["threads"] == count]
        sns.lineplot(
            panel,
            x="io_size",
            y="bw",
            hue="transfer",
            style=style,
            ax=axis,
            marker="o",
            errorbar=min_max,
            estimator="median",
            hue_order=sorted(data["transfer"].unique()),
            legend=index == len(threads) - 1,
        )
        size_axis(axis, data["io_size"])
        axis.set_ylabel(f"bandwidth ({unit})")
        axis.set_ylim(bottom=0)
        axis.set_title(f"{count} thread{'s' if count != 1 else ''}", fontsize=10)
        axis.grid(True, alpha=0.3)
    _legend_outside(axes[-1])
    figure.suptitle(
        f"{pattern}: bandwidth vs IO size (median, band = min-max over repetitions)\n{run_title(group)}", fontsize=11
    )
    return figure


def _legend_outside(axis) -> None:
    """Move a panel's legend to the right of the plot so it never covers lines."""
    if axis.get_legend() is not None:
        sns.move_legend(axis, "upper left", bbox_to_anchor=(1.02, 1), frameon=False, fontsize=9, title_fontsize=9)


def latency_lines(frame: pd.DataFrame) -> list[Plot]:
    """Mean and p99 latency vs IO size, one figure per pattern."""
    rows = io_rows(frame)
    rows = rows[rows["lat_mean_us"].notna() | rows["lat_p99_us"].notna()]
    return [
        Plot(slug("latency", pattern), _latency(group, pattern))
        for pattern, group in rows.groupby("pattern", sort=True)
    ]


def _latency(group: pd.DataFrame, pattern: str) -> Figure:
    """Two panels (mean, p99) on a log latency axis; a line per transfer x threads (x run)."""
    parts = [group["transfer"].astype(str), group["threads"].fillna(0).astype(int).astype(str) + " thr"]
    if group["run"].nunique() > 1:
        parts.append(group["run"])
    legend = "transfer, threads" + (", run" if len(parts) > 2 else "")
    data = group.assign(**{legend: pd.concat(parts, axis=1).agg(" ".join, axis=1)})
    figure = new_figure(2)
    axes = figure.subplots(1, 2, sharey=True)
    for index, (axis, column, label) in enumerate(zip(axes, ("lat_mean_us", "lat_p99_us"), ("mean", "p99"))):
        sns.lineplot(
            data,
            x="io_size",
            y=column,
            hue=legend,
            ax=axis,
            marker="o",
            estimator="median",
            errorbar=None,
            hue_order=sorted(data[legend].unique()),
            legend=index == 1,
        )
        size_axis(axis, data["io_size"])
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(FuncFormatter(_latency_text))
        axis.set_ylabel("latency")
        axis.set_title(f"{label} latency (median over repetitions)", fontsize=10)
        axis.grid(True, which="major", alpha=0.3)
    _legend_outside(axes[-1])
    figure.suptitle(f"{pattern}: completion latency vs IO size\n{run_title(group)}", fontsize=11)
    return figure


def _latency_text(microseconds: float, _position: object = None) -> str:
    """A latency tick in the unit people read it in: 250us, 2ms, 1.5s."""
    if microseconds >= 1e6:
        return f"{microseconds / 1e6:g}s"
    if microseconds >= 1e3:
        return f"{microseconds / 1e3:g}ms"
    return f"{microseconds:g}us"


def checkpoint_bars(frame: pd.DataFrame) -> list[Plot]:
    """Checkpoint save/load bandwidth per engine with the fio ceiling as a reference line; a figure per pattern."""
    ok = frame[(frame["status"] == "ok") & frame["pattern"].isin(CHECKPOINT_PATTERNS)]
    if ok.empty:
        return []
    ratios = ceiling_ratios(frame)
    ceilings = with_run(ratios) if len(ratios) else pd.DataFrame()
    rows = with_run(ok.assign(engine=engine_labels(ok).map(wrap_label)))
    return [
        Plot(slug("checkpoint", pattern), _checkpoint(group, ceilings, pattern))
        for pattern, group in rows.groupby("pattern", sort=True)
    ]


def wrap_label(label: str, width: int = 20) -> str:
    """An engine label on several short lines (the engine, then its parameters), so bars' labels never overlap."""
    engine, _, params = label.partition(" (")
    return engine + ("\n" + textwrap.fill("(" + params, width, break_long_words=False) if params else "")


def _checkpoint(group: pd.DataFrame, ceilings: pd.DataFrame, pattern: str) -> Figure:
    """Bars per engine (hue = run), min-max error bars, dashed fio line per run."""
    limits = ceilings[ceilings["pattern"] == pattern].drop_duplicates("run") if len(ceilings) else ceilings
    top = max(group["bw_bytes"].max(), limits["fio_bw"].max() if len(limits) else 0)
    divisor, unit = bw_unit(top)
    data = group.assign(bw=group["bw_bytes"] / divisor)
    engines = sorted(data["engine"].unique())
    runs = sorted(data["run"].unique())
    figure = new_figure(1, width=max(5.5, 1.6 * len(engines) * max(1, len(runs) / 2) + 2.5))
    axis = figure.subplots()
    hue = "run" if len(runs) > 1 else None
    sns.barplot(
        data,
        x="engine",
        y="bw",
        hue=hue,
        order=engines,
        estimator="median",
        errorbar=min_max,
        capsize=0.15,
        ax=axis,
        color=None if hue else sns.color_palette()[0],
    )
    colours = dict(zip(runs, sns.color_palette(n_colors=len(runs))))
    for _, limit in limits.iterrows():
        if pd.notna(limit["fio_bw"]):
            label = f"{limit['ceiling']} limit" + (f" ({limit['run']})" if hue else "")
            axis.axhline(
                limit["fio_bw"] / divisor,
                linestyle="--",
                color=colours.get(limit["run"], "black") if hue else "black",
                linewidth=1.2,
                label=label,
            )
    axis.set_ylabel(f"bandwidth ({unit}, median)")
    axis.set_xlabel("engine")
    axis.set_ylim(bottom=0)
    axis.grid(True, axis="y", alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False, fontsize=9)
    figure.suptitle(f"checkpoint {pattern}: bandwidth per engine (bars = min-max)\n{run_title(group)}", fontsize=11)
    return figure
