"""Figures of results: a DataFrame in, matplotlib Figures out (Agg canvas; no pyplot state, no runners).

One figure per group, each a `Plot(name, figure)` whose name is the file stem `save` writes:

- `heatmap-<pattern>-<transfer>`: median bandwidth over threads (rows) x IO size (columns), one panel
  per run (host, run_id) when several are merged; drawn only with at least 2 thread counts and 2 IO
  sizes (a 1 x N map is the bandwidth line figure, badly); durable writes (end_fsync) apart, in
  `heatmap-<pattern>-<transfer>-durable`.
- `bandwidth-<pattern>`: median bandwidth vs IO size, a line per transfer type with a min-max band over
  repetitions, one panel per thread count; several runs get one line style each.
- `latency-<pattern>`: mean and p99 latency vs IO size (two panels), a line per transfer type and
  thread count (and run, when several are merged).
- `checkpoint-<pattern>` (save, load): median bandwidth per engine with min-max error bars, bars by run,
  and fio's best bandwidth of the same run and direction drawn as a dashed reference line; more than
  FEW_BARS engines lie across (engines down the y axis, one bar per engine and run that measured it), so
  the figure grows down the page instead of past its width.

Durable writes (end_fsync) are told apart from writes without fsync everywhere: `CPU_ONLY durable` is their
transfer's label in line legends, map names and titles.

IO sizes sit on a log-2 axis labelled 4K, 128K, 1M, 16M; bandwidths are in fio's power-of-2 units
(MiB/s, GiB/s), latencies in 250us/20ms; every figure's title names the pattern and the run(s): host,
run_id and date, wrapped to the figure's width, and a legend beside the panels widens the figure by its
own width (constrained layout fits heights, never a title's width).
Only `ok` rows are drawn; fio-style patterns need an io_size, checkpoint patterns do not.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter, NullLocator

from gdsbench.ceilings import CEILINGS, durable
from gdsbench.flags import WRITES
from gdsbench.report.ceilings import ceiling_ratios, engine_labels
from gdsbench.units import size_label

IO_PATTERNS = ("write", "read", "randwrite", "randread")
CHECKPOINT_PATTERNS = tuple(CEILINGS)
FORMATS = ("png", "svg")
#: (divisor, label) for bandwidth axes, largest first: fio's power-of-2 units.
BW_UNITS = ((2**40, "TiB/s"), (2**30, "GiB/s"), (2**20, "MiB/s"), (2**10, "KiB/s"), (1, "B/s"))
PANEL_WIDTH, PANEL_HEIGHT = 5.2, 3.8
#: Inches per character of 9-11 pt text (DejaVu Sans, a little generous): titles are wrapped and legends
#: given room by it, so no text runs past the figure's edge.
CHAR_WIDTH = 0.0095
#: More checkpoint engines than this in one figure: bars lie across, one engine per line of the y axis.
FEW_BARS = 6
#: Characters per line of an engine's label beside bars that lie across (beneath upright bars: 20).
ACROSS_LABEL = 56


@dataclass(frozen=True)
class Plot:
    """One figure and the deterministic file stem it is saved under."""

    name: str
    figure: Figure
    case: str | None = None  # the case a time-series figure shows (report.series)


def figures(frame: pd.DataFrame) -> list[Plot]:
    """Every figure the results allow, in a fixed order; text from the results drawn as written (`literal`)."""
    frame = literal(frame)
    return [*heatmaps(frame), *bandwidth_lines(frame), *latency_lines(frame), *checkpoint_bars(frame)]


def literal(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy whose text cells matplotlib draws as written (`literal_text`): a label from a results file is
    never mathtext (`$\\undefinedmacro{x}$` would stop the figure)."""
    text = [c for c in frame if not pd.api.types.is_numeric_dtype(frame[c])]
    return frame.assign(**{c: frame[c].map(lambda v: literal_text(v) if isinstance(v, str) else v) for c in text})


def literal_text(text: str) -> str:
    """Text with each `$` escaped: matplotlib draws it as `$`, and parses no mathtext between two of them."""
    return text.replace("$", r"\$")


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
    """The ok rows of block-IO patterns (fio, gdsio) that have an IO size, with a `run` label column; durable
    writes (end_fsync) have `durable` after their transfer (CPU_ONLY durable), so no axis, line or map cell
    pools them with writes without fsync."""
    rows = with_run(frame[(frame["status"] == "ok") & frame["pattern"].isin(IO_PATTERNS) & frame["io_size"].notna()])
    synced = durable(rows) & rows["pattern"].isin(WRITES)
    return rows.assign(transfer=rows["transfer"].astype(str).where(~synced, rows["transfer"].astype(str) + DURABLE))


DURABLE = " durable"  # after a durable write's transfer in labels (io_rows)


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


def new_figure(
    columns: int, rows: int = 1, width: float = PANEL_WIDTH, height: float = PANEL_HEIGHT, extra: float = 0.0
) -> Figure:
    """A constrained-layout Figure on an Agg canvas, sized per panel (plus `extra` inches for a legend
    beside the panels) so labels never overlap."""
    figure = Figure(figsize=(width * columns + 0.8 + extra, height * rows + 0.9), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def legend_room(labels: Iterable[object], fontsize: float = 9) -> float:
    """Inches a legend of these labels needs beside the panels, beyond the figure's own margin."""
    longest = max((len(str(label)) for label in labels), default=0)
    return max(0.0, CHAR_WIDTH * fontsize * longest + 0.7 - 0.8)


def suptitle(figure: Figure, text: str, fontsize: float = 11) -> None:
    """The figure's title, each line wrapped to the figure's width (constrained layout makes room above the
    panels for its height, never for its width)."""
    width = max(20, int(figure.get_figwidth() / (CHAR_WIDTH * fontsize)))
    lines = [textwrap.fill(line, width, break_long_words=False) for line in text.split("\n")]
    figure.suptitle("\n".join(lines), fontsize=fontsize)


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
    """Median bandwidth over threads x IO size, one figure per pattern and transfer type (durable writes apart:
    `heatmap-write-CPU_ONLY-durable`, never a cell beside writes without fsync)."""
    rows = io_rows(frame)
    rows = rows[rows["threads"].notna()]
    plots = []
    for (pattern, transfer), group in rows.groupby(["pattern", "transfer"], sort=True):
        if group["threads"].nunique() >= 2 and group["io_size"].nunique() >= 2:  # a map needs 2 x 2 cells
            plots.append(Plot(slug("heatmap", pattern, *transfer.split(" ")), _heatmap(group, pattern, transfer)))
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
    suptitle(
        figure,
        f"{pattern} {transfer.replace(DURABLE, DURABLE + ' (end_fsync)')}: bandwidth ({unit})\n{run_title(group)}",
    )
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
    style = "run" if data["run"].nunique() > 1 else None
    figure = new_figure(len(threads), extra=legend_room([*data["transfer"].unique(), *(data["run"] if style else [])]))
    axes = figure.subplots(1, len(threads), squeeze=False, sharey=True)[0]
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
            style_order=sorted(data["run"].unique()) if style else None,  # the legend names every run
            legend=index == len(threads) - 1,
        )
        size_axis(axis, data["io_size"])
        axis.set_ylabel(f"bandwidth ({unit})")
        axis.set_ylim(bottom=0)
        axis.set_title(f"{count} thread{'s' if count != 1 else ''}", fontsize=10)
        axis.grid(True, alpha=0.3)
    _legend_outside(axes[-1])
    suptitle(figure, f"{pattern}: bandwidth vs IO size (median, band = min-max over repetitions)\n{run_title(group)}")
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
    figure = new_figure(2, extra=legend_room([legend, *data[legend].unique()]))
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
        axis.yaxis.set_major_formatter(LatencyTicks())
        axis.yaxis.set_minor_formatter(LatencyTicks(labelOnlyBase=False))  # a range under a decade: 20ms, 30ms
        axis.set_ylabel("latency")
        axis.set_title(f"{label} latency (median over repetitions)", fontsize=10)
        axis.grid(True, which="major", alpha=0.3)
    _legend_outside(axes[-1])
    suptitle(figure, f"{pattern}: completion latency vs IO size\n{run_title(group)}")
    return figure


class LatencyTicks(LogFormatter):
    """Log-axis tick labels in the unit people read latency in (250us, 2ms), on the ticks matplotlib's log
    formatter would label (decades; the minor ticks too where the axis spans less than a few decades)."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        """The tick's label, or '' where the log formatter leaves it unlabelled."""
        return _latency_text(x) if super().__call__(x, pos) else ""


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
    rows = with_run(ok.assign(engine=engine_labels(ok)))
    return [
        Plot(slug("checkpoint", pattern), _checkpoint(group, ceilings, pattern))
        for pattern, group in rows.groupby("pattern", sort=True)
    ]


def wrap_label(label: str, width: int = 20) -> str:
    """An engine label on several short lines (the engine, then its parameters), so bars' labels never overlap."""
    engine, _, params = label.partition(" (")
    return engine + ("\n" + textwrap.fill("(" + params, width, break_long_words=False) if params else "")


def _checkpoint(group: pd.DataFrame, ceilings: pd.DataFrame, pattern: str) -> Figure:
    """Bars per engine (colour = run), min-max error bars, a dashed fio line per run; more than FEW_BARS
    engines lie across, one bar per engine and run that measured it, so the figure grows down, never
    wider than a page."""
    limits = ceilings[ceilings["pattern"] == pattern].drop_duplicates("run") if len(ceilings) else ceilings
    top = max(group["bw_bytes"].max(), limits["fio_bw"].max() if len(limits) else 0)
    divisor, unit = bw_unit(top)
    across = group["engine"].nunique() > FEW_BARS
    data = group.assign(
        bw=group["bw_bytes"] / divisor,
        engine=group["engine"].map(lambda e: wrap_label(e, ACROSS_LABEL if across else 20)),
    )
    runs = sorted(data["run"].unique())
    colours = dict(zip(runs, sns.color_palette(n_colors=len(runs))))
    legend = [f"{c} limit ({r})" for c, r in zip(limits.get("ceiling", []), limits.get("run", []))] + runs
    axis = (_bars_across if across else _bars_upright)(data, colours, legend_room(legend if len(runs) > 1 else []))
    _fio_lines(axis, limits, colours, divisor, across)
    value, names = (axis.xaxis, axis.yaxis) if across else (axis.yaxis, axis.xaxis)
    value.set_label_text(f"bandwidth ({unit}, median)")
    names.set_label_text("engine")
    axis.grid(True, axis="x" if across else "y", alpha=0.3)
    if axis.get_legend_handles_labels()[0]:
        axis.legend(loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False, fontsize=9)
    suptitle(axis.figure, f"checkpoint {pattern}: bandwidth per engine (bars = min-max)\n{run_title(group)}")
    return axis.figure


def _fio_lines(axis, limits: pd.DataFrame, colours: dict[str, Any], divisor: float, across: bool) -> None:
    """fio's ceiling of each run as a dashed line across the bars (in the run's colour when several), the
    bandwidth axis from 0 to past the highest line or bar."""
    several = len(colours) > 1
    for _, limit in limits.iterrows():
        if pd.notna(limit["fio_bw"]):
            label = f"{limit['ceiling']} limit" + (f" ({limit['run']})" if several else "")
            colour = colours.get(limit["run"], "black") if several else "black"
            line = axis.axvline if across else axis.axhline
            line(limit["fio_bw"] / divisor, linestyle="--", color=colour, linewidth=1.2, label=label)
    if across:  # after the lines, which widen the scale
        axis.set_xlim(left=0)
    else:
        axis.set_ylim(bottom=0)


def _bars_upright(data: pd.DataFrame, colours: dict[str, Any], room: float):
    """A few engines side by side on the x axis, a bar per run (seaborn, median with min-max error bars)."""
    engines = sorted(data["engine"].unique())
    width = max(5.5, 1.6 * len(engines) * max(1, len(colours) / 2) + 2.5)
    axis = new_figure(1, width=width, extra=room).subplots()
    hue = "run" if len(colours) > 1 else None
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
        palette=colours if hue else None,
        color=None if hue else sns.color_palette()[0],
    )
    return axis


def _bars_across(data: pd.DataFrame, colours: dict[str, Any], room: float):
    """Many engines down the y axis (each named once, beside its bars), a bar per run that measured it:
    median with min-max whiskers, coloured by run."""
    stats = data.groupby(["engine", "run"], sort=True)["bw"].agg(["median", "min", "max"]).reset_index()
    stats["y"] = np.arange(len(stats)) + stats["engine"].ne(stats["engine"].shift()).cumsum() * 0.5  # a gap
    engines = stats.groupby("engine", sort=True).agg(bars=("y", "size"), centre=("y", "mean"))
    lines = engines.index.str.count("\n") + 1
    inches = max(0.28, float(((0.16 * lines + 0.05) / (engines["bars"] + 0.5)).max()))  # a slot's height
    axis = new_figure(
        1, width=5.0 + CHAR_WIDTH * 9 * ACROSS_LABEL, height=inches * (stats["y"].max() + 1.5), extra=room
    ).subplots()
    for run, bars in stats.groupby("run", sort=True):
        spread = [bars["median"] - bars["min"], bars["max"] - bars["median"]]
        axis.barh(
            bars["y"],
            bars["median"],
            xerr=spread,
            color=colours[run],
            capsize=3,
            height=0.8,
            label=run if len(colours) > 1 else None,
        )
    axis.set_yticks(engines["centre"].to_numpy(), list(engines.index), fontsize=9)
    axis.set_ylim(stats["y"].max() + 0.7, stats["y"].min() - 0.7)  # the first engine on top
    return axis
