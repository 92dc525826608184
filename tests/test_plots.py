"""Figures from the real results sample: one figure per documented group, titles, axes, ticks, no overlaps."""

from __future__ import annotations

import itertools
import re
import weakref
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from gdsbench import results
from gdsbench.report import plots

ROOT = Path(__file__).parents[1]
SAMPLE = sorted((ROOT / "results" / "sample").glob("*.csv"))


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """The sample sweep: fio write/read x CPU_ONLY/CPU_CACHED (GDS skipped) x 4 sizes x 1/4 threads, 2 reps."""
    return results.load(SAMPLE)


@pytest.fixture(scope="module")
def merged(frame: pd.DataFrame) -> dict[str, Figure]:
    """Figures of the sample merged with a relabelled copy of itself: two runs on two hosts."""
    other = relabelled(frame, "other", "20260101T000000Z-abcdef")
    return by_name(plots.figures(pd.concat([frame, other], ignore_index=True)))


def relabelled(frame: pd.DataFrame, host: str, run_id: str) -> pd.DataFrame:
    """The same measurements as if from another run on another host (for merged-run figures)."""
    return frame.assign(host=host, run_id=run_id, source="other.csv")


def by_name(plot_list: list[plots.Plot]) -> dict[str, Figure]:
    """name -> figure."""
    return {p.name: p.figure for p in plot_list}


def texts(figure: Figure) -> list:
    """Every label-like text artist of a figure: suptitle, titles, axis labels, tick labels, legend texts."""
    found = [figure._suptitle] if figure._suptitle else []
    for axis in figure.axes:
        found += [axis.title, axis.xaxis.label, axis.yaxis.label, *drawn_ticks(axis.xaxis), *drawn_ticks(axis.yaxis)]
        legend = axis.get_legend()
        if legend:
            found += [*legend.get_texts(), legend.get_title()]
    return [t for t in found if t.get_visible() and t.get_text().strip()]


def drawn_ticks(axis) -> list:
    """An axis' major tick labels within its range (matplotlib draws no others)."""
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-6
    return [label for label, at in zip(axis.get_ticklabels(), axis.get_ticklocs()) if low - slack <= at <= high + slack]


_drawn: weakref.WeakSet[Figure] = weakref.WeakSet()


def rendered(figure: Figure) -> Any:
    """The renderer of `figure`, drawn once (its layout is settled by that draw; drawing is most of a check's time)."""
    if figure not in _drawn:
        figure.canvas.draw()
        _drawn.add(figure)
    return figure.canvas.get_renderer()


def overlapping(figure: Figure) -> list[tuple[str, str]]:
    """Pairs of label texts whose drawn boxes intersect."""
    renderer = rendered(figure)
    boxes = [(t.get_text(), t.get_window_extent(renderer).shrunk(0.97, 0.9)) for t in texts(figure)]
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if box_a.overlaps(box_b)]


def outside(figure: Figure) -> list[str]:
    """What is drawn (partly) past the figure's edges, clipped in the PNG: the title, or a panel (its ticks,
    labels, title and legend: the ticks matplotlib draws, not those beyond the axis' range)."""
    renderer = rendered(figure)
    edge = figure.bbox.padded(1)
    drawn = [(f"panel {index}", axis.get_tightbbox(renderer)) for index, axis in enumerate(figure.axes)]
    if figure._suptitle:
        drawn.append((figure._suptitle.get_text(), figure._suptitle.get_window_extent(renderer)))
    return [
        name
        for name, box in drawn
        if box is not None and not (edge.x0 <= box.x0 and box.x1 <= edge.x1 and edge.y0 <= box.y0 and box.y1 <= edge.y1)
    ]


def test_one_figure_per_documented_group(frame: pd.DataFrame) -> None:
    names = [p.name for p in plots.figures(frame)]
    assert names == [
        "heatmap-read-CPU_CACHED",
        "heatmap-read-CPU_ONLY",
        "heatmap-write-CPU_CACHED",
        "heatmap-write-CPU_ONLY",
        "bandwidth-read",
        "bandwidth-write",
        "latency-read",
        "latency-write",
    ]


def test_bandwidth_figure_axes_ticks_title_and_bands(frame: pd.DataFrame) -> None:
    figure = by_name(plots.bandwidth_lines(frame))["bandwidth-read"]
    title = figure._suptitle.get_text()
    assert "read" in title and "host vm" in title and frame["run_id"].iloc[0] in title
    panels = figure.axes[:2]
    assert [a.get_title() for a in panels] == ["1 thread", "4 threads"]
    for axis in panels:
        assert axis.get_xscale() == "log"
        assert [t.get_text() for t in axis.get_xticklabels()] == ["4K", "128K", "1M", "16M"]
        assert axis.get_xlabel() == "IO size"
        assert axis.get_ylabel() in ("bandwidth (GiB/s)", "bandwidth (MiB/s)")
        # One min-max band per transfer type that ran (GDS rows are skipped, so not drawn).
        assert sum(isinstance(c, PolyCollection) for c in axis.collections) == 2
    legend = [t.get_text() for t in panels[-1].get_legend().get_texts()]
    assert legend == ["CPU_CACHED", "CPU_ONLY"]


def test_bandwidth_line_is_the_median_in_fio_units(frame: pd.DataFrame) -> None:
    figure = by_name(plots.bandwidth_lines(frame))["bandwidth-write"]
    axis = figure.axes[0]  # 1 thread
    divisor = {"bandwidth (GiB/s)": 2**30, "bandwidth (MiB/s)": 2**20}[axis.get_ylabel()]
    ok = frame[
        (frame["status"] == "ok")
        & (frame["pattern"] == "write")
        & (frame["threads"] == 1)
        & (frame["transfer"] == "CPU_ONLY")
    ]
    expected = ok.groupby("io_size")["bw_bytes"].median() / divisor
    lines = [line for line in axis.get_lines() if len(line.get_xdata()) == 4]
    assert any(
        list(line.get_xdata()) == list(expected.index)
        and pytest.approx(list(expected.values)) == list(line.get_ydata())
        for line in lines
    )


def test_heatmap_cells_are_medians(frame: pd.DataFrame) -> None:
    figure = by_name(plots.heatmaps(frame))["heatmap-read-CPU_ONLY"]
    axis = figure.axes[0]
    assert [t.get_text() for t in axis.get_xticklabels()] == ["4K", "128K", "1M", "16M"]
    assert [t.get_text() for t in axis.get_yticklabels()] == ["4", "1"]
    assert axis.get_ylabel() == "threads"
    assert "read CPU_ONLY" in figure._suptitle.get_text() and "host vm" in figure._suptitle.get_text()
    unit = figure._suptitle.get_text().split("(")[1].split(")")[0]
    divisor = {"GiB/s": 2**30, "MiB/s": 2**20}[unit]
    ok = frame[(frame["status"] == "ok") & (frame["pattern"] == "read") & (frame["transfer"] == "CPU_ONLY")]
    medians = ok.groupby(["threads", "io_size"])["bw_bytes"].median() / divisor
    cells = [float(t.get_text()) for t in axis.texts]
    expected = [medians[(4, s)] for s in (4096, 131072, 2**20, 2**24)] + [
        medians[(1, s)] for s in (4096, 131072, 2**20, 2**24)
    ]
    assert cells == pytest.approx(expected, abs=0.006)


def test_latency_figure_has_mean_and_p99_panels(frame: pd.DataFrame) -> None:
    figure = by_name(plots.latency_lines(frame))["latency-read"]
    assert [a.get_title() for a in figure.axes[:2]] == [
        "mean latency (median over repetitions)",
        "p99 latency (median over repetitions)",
    ]
    assert figure.axes[0].get_yscale() == "log"
    assert [t.get_text() for t in figure.axes[1].get_xticklabels()] == ["4K", "128K", "1M", "16M"]
    legend = [t.get_text() for t in figure.axes[1].get_legend().get_texts()]
    assert legend == ["CPU_CACHED 1 thr", "CPU_CACHED 4 thr", "CPU_ONLY 1 thr", "CPU_ONLY 4 thr"]


def test_no_label_overlaps(frame: pd.DataFrame) -> None:
    """The sample's figures; the merged runs' figures are checked by test_merged_runs_facet_and_style_by_run (this
    test is slow, run first on a worker of its own: `merged` here would be drawn twice)."""
    for name, figure in by_name(plots.figures(frame)).items():
        assert overlapping(figure) == [], name


def test_merged_runs_facet_and_style_by_run(frame: pd.DataFrame, merged: dict[str, Figure]) -> None:
    """Two runs on two hosts: facets and styles by run, and no label overlaps in any of their figures."""
    figures = merged
    for name, figure in figures.items():
        assert overlapping(figure) == [], name
    heatmap = figures["heatmap-write-CPU_ONLY"]
    titles = [a.get_title() for a in heatmap.axes if a.get_title()]
    assert titles == ["other 20260101T000000Z-abcdef", f"vm {frame['run_id'].iloc[0]}"]
    assert "2 runs on other, vm" in heatmap._suptitle.get_text()
    legend = [t.get_text() for t in figures["bandwidth-read"].axes[1].get_legend().get_texts()]
    assert "run" in legend and f"vm {frame['run_id'].iloc[0]}" in legend
    assert any("other" in t.get_text() for t in figures["latency-read"].axes[1].get_legend().get_texts())


def checkpoint_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Checkpoint-engine rows shaped as the checkpoint runner writes them (no io_size), beside the fio rows."""
    fio = frame[
        (frame["status"] == "ok")
        & (frame["transfer"] == "CPU_ONLY")
        & (frame["io_size"] == 2**20)
        & (frame["threads"] == 1)
    ]
    rows = []
    for engine, share in (("torch_save", 0.15), ("fastpersist", 0.4)):
        for pattern, fio_pattern in (("save", "write"), ("load", "read")):
            for rep, bw in enumerate(fio[fio["pattern"] == fio_pattern]["bw_bytes"], 1):
                rows.append(
                    {
                        **fio.iloc[0].to_dict(),
                        "engine": engine,
                        "pattern": pattern,
                        "ceiling": "fio",  # the checkpoint engines' declared trait (fio's own rows: none)
                        "io_size": float("nan"),
                        "threads": float("nan"),
                        "iodepth": float("nan"),
                        "repetition": rep,
                        "bw_bytes": bw * share,
                        "case": f"engine={engine},pattern={pattern}",
                    }
                )
    return pd.concat([frame, pd.DataFrame(rows)], ignore_index=True)


def test_checkpoint_bars_with_fio_reference_line(frame: pd.DataFrame) -> None:
    data = checkpoint_rows(frame)
    figures = by_name(plots.figures(data))
    assert [n for n in figures if n.startswith("checkpoint")] == ["checkpoint-load", "checkpoint-save"]
    assert not any(n.startswith("heatmap-save") or n.startswith("bandwidth-save") for n in figures)
    figure = figures["checkpoint-save"]
    axis = figure.axes[0]
    assert [t.get_text() for t in axis.get_xticklabels()] == ["fastpersist", "torch_save"]
    unit = axis.get_ylabel().split("(")[1].split(",")[0]
    divisor = {"GiB/s": 2**30, "MiB/s": 2**20}[unit]
    fio_best = (
        frame[(frame["status"] == "ok") & (frame["pattern"] == "write") & (frame["transfer"] != "CPU_CACHED")]
        .groupby("case")["bw_bytes"]
        .median()
        .max()
    )
    dashed = [line for line in axis.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_ydata()[0] == pytest.approx(fio_best / divisor)
    assert "fio write (no fsync) limit" in [t.get_text() for t in axis.get_legend().get_texts()]
    assert "checkpoint save" in figure._suptitle.get_text() and "host vm" in figure._suptitle.get_text()
    assert overlapping(figure) == []


def test_save_writes_png_and_svg_with_deterministic_names(frame: pd.DataFrame, tmp_path: Path) -> None:
    wanted = plots.bandwidth_lines(frame)
    paths = plots.save(wanted, tmp_path)
    assert sorted(p.name for p in paths) == [
        "bandwidth-read.png",
        "bandwidth-read.svg",
        "bandwidth-write.png",
        "bandwidth-write.svg",
    ]
    assert (tmp_path / "bandwidth-read.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (tmp_path / "bandwidth-read.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    again = plots.save(plots.bandwidth_lines(frame), tmp_path / "again", ("svg",))
    assert [p.name for p in again] == ["bandwidth-read.svg", "bandwidth-write.svg"]


def test_no_rows_to_draw_gives_no_figures(frame: pd.DataFrame) -> None:
    assert plots.figures(frame[frame["status"] == "skipped"]) == []


def test_checkpoint_bars_of_many_engine_variants_keep_their_labels_apart() -> None:
    """The committed checkpoint run (12 load variants, e.g. 'fastpersist (transfer=CPU_CACHED, threads=8,
    memory=idle, ...)'): more than FEW_BARS engines lie across, every variant named once down the y axis
    beside its own bar, the bandwidth along x, no two labels overlapping."""
    run = results.load([ROOT / "results" / "sample" / "checkpoint" / "checkpoint-20261122-050204.csv"])
    figure = by_name(plots.figures(run))["checkpoint-load"]
    axis = figure.axes[0]
    labels = [t.get_text() for t in axis.get_yticklabels()]
    assert len(labels) == len(set(labels)) == 12 > plots.FEW_BARS
    assert "fastpersist\n(transfer=CPU_ONLY, threads=4, memory=recent,\nload_into=True, mmap=False)" in labels
    assert labels[0] == "dcp" and axis.get_xlabel().startswith("bandwidth (") and axis.get_ylabel() == "engine"
    bars = sorted(axis.patches, key=lambda bar: bar.get_y())  # top to bottom: the y axis is inverted
    assert len(bars) == 12 and all(bar.get_x() == 0 for bar in bars)
    assert overlapping(figure) == [] and outside(figure) == []
    assert figure.get_figwidth() < 16 and figure.get_figheight() > figure.get_figwidth() / 2  # grows down


def test_checkpoint_bars_of_several_runs_put_one_bar_per_run_that_measured_an_engine() -> None:
    """The four committed checkpoint runs: a save variant measured by one run gets one bar (no empty slots
    for the other three), each run's bars in its colour, and every run's fio ceiling line within the axis."""
    frame = results.load(sorted((ROOT / "results" / "sample" / "checkpoint").glob("*.csv")))
    figure = by_name(plots.checkpoint_bars(frame))["checkpoint-save"]
    axis = figure.axes[0]
    ok = frame[(frame["status"] == "ok") & (frame["pattern"] == "save")]
    pairs = ok.assign(label=plots.engine_labels(ok))[["label", "run_id"]].drop_duplicates()
    assert len(axis.patches) == len(pairs) < ok["run_id"].nunique() * pairs["label"].nunique()
    lines = [line.get_xdata()[0] for line in axis.get_lines() if line.get_linestyle() == "--"]
    assert len(lines) == 4 and max(lines) <= axis.get_xlim()[1]
    assert overlapping(figure) == [] and outside(figure) == []


def test_wrap_label_keeps_the_engine_on_its_own_line() -> None:
    assert plots.wrap_label("torch_save") == "torch_save"
    assert plots.wrap_label("dcp (memory=idle)") == "dcp\n(memory=idle)"
    wrapped = plots.wrap_label("fastpersist (threads=4, memory=recent, load_into=False)")
    assert wrapped.split("\n") == ["fastpersist", "(threads=4,", "memory=recent,", "load_into=False)"]


def sample(folder: str) -> pd.DataFrame:
    """The committed sample runs of results/sample/<folder>."""
    return results.load(sorted((ROOT / "results" / "sample" / folder).glob("*.csv")))


def test_no_text_is_clipped_at_the_figures_edges(frame: pd.DataFrame, merged: dict[str, Figure]) -> None:
    """Every title, label and legend lies inside its figure, however long the run's names (the fleet's
    three hosts, a socket path among them) and however narrow the figure (a heatmap of 2 IO sizes)."""
    from gdsbench.report import series

    two_sizes = frame[frame["io_size"].isin([4096, 16 << 20])]
    drawn = {f"two sizes {p.name}": p.figure for p in plots.heatmaps(two_sizes)}
    for folder in ("fleet", "checkpoint", "distributed"):
        rows = sample(folder)
        drawn |= {f"{folder} {p.name}": p.figure for p in plots.figures(rows)}
        drawn |= {f"{folder} {p.name}": p.figure for p in series.figures(results.load_series(rows["source"]), rows)}
    assert len(drawn) > 20 and "fleet series-01-fio-write" in drawn and "two sizes heatmap-read-CPU_ONLY" in drawn
    assert {name: found for name, figure in {**merged, **drawn}.items() if (found := outside(figure))} == {}
    assert {name: found for name, figure in drawn.items() if (found := overlapping(figure))} == {}


def test_latency_ticks_read_in_latency_units_on_a_short_range() -> None:
    """A latency axis spanning less than a decade (one 16M read: 46-52 ms) is ticked 46ms, 48ms, never 4.6x10^4."""
    figure = by_name(plots.latency_lines(sample("checkpoint")))["latency-read"]
    axis = figure.axes[0]
    figure.canvas.draw()
    labels = [t.get_text() for t in [*axis.get_yticklabels(), *axis.get_yticklabels(minor=True)] if t.get_text()]
    assert len(labels) >= 2 and all(re.fullmatch(r"\d+(\.\d+)?(us|ms|s)", label) for label in labels), labels


def test_bandwidth_legend_names_every_run_though_the_last_panel_has_fewer() -> None:
    """The checkpoint runs' fio writes: the 4-thread panel (which carries the legend) has two of the runs,
    the legend still names every run the figure draws."""
    rows = plots.io_rows(sample("checkpoint"))
    figure = by_name(plots.bandwidth_lines(rows))["bandwidth-write"]
    runs = set(rows[rows["pattern"] == "write"]["run"])
    assert set(rows[(rows["pattern"] == "write") & (rows["threads"] == 4)]["run"]) < runs
    assert runs <= {t.get_text() for t in figure.axes[-1].get_legend().get_texts()}
