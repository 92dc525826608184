"""One self-contained HTML page of a report: the answer first, then the evidence.

Reading order: the headline (fio's ceilings, each checkpoint engine against them, the flags raised:
report.headline), the results tables and notes, fio's run-status text, the runs' metadata, every result
row, the figures and the time series. Figures are embedded as base64 PNG and the CSS is inline, so the
page has no external URL and opens offline (attach it to a CI job, mail it). The tables are the same
Report value every --format renders (report.summary.build), so the page and the pull-request comment never
disagree. The Rows table (each row's case, bandwidth and flags first, then run, host, repetition,
straggler and spread; constant columns named once above it, empty ones left out) scrolls in its own box
and links each row to its case's time-series figure (the first report.series.HTML_LIMIT cases).
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from gdsbench import __version__, flags
from gdsbench.report import headline, plots, summary, tables
from gdsbench.report import series as series_plots
from gdsbench.report.sections import Legend, Lines, Notes, Report, Section, Table
from gdsbench.results import load_series, read_sidecar
from gdsbench.units import num2str

Progress = Callable[[int, int, str], None]  # (figures drawn, of how many, the last one's name)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1500px;color:#222;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.25rem .4rem;text-align:right;white-space:nowrap}th{background:#f4f4f4;white-space:normal}
td.w{white-space:normal;min-width:10rem}td.s{white-space:normal;min-width:5rem}.wide{overflow-x:auto}
td.l,th.l{text-align:left}pre{background:#f8f8f8;padding:.6rem;overflow-x:auto;font-size:.8rem}
figure{margin:1rem 0}figure img{max-width:100%;border:1px solid #eee}figcaption{font-size:.8rem;color:#555}
.warn{color:#a15c00}.bad{color:#b00020}.skip{color:#666}li{font-size:.85rem}
.scroll{max-height:32rem;overflow:auto;border:1px solid #ddd;margin:.5rem 0}.scroll table{margin:0}
.scroll thead th{position:sticky;top:0;z-index:1}pre.status{max-height:24rem;overflow:auto}
.headline li{font-size:.95rem;margin:.2rem 0}.caption{font-size:.8rem;color:#555}
.facts td+td{white-space:normal;overflow-wrap:anywhere;min-width:6rem}
"""
LEFT = {"engine", "pattern", "transfer", "host", "run_id", "run", "flags", "key", "run 1", "run 2", "run 3", "run 4"}
#: Sidecar facts shown per run: (section, key) in display order.
FACTS = (
    ("machine", "host"),
    ("machine", "os"),
    ("machine", "kernel"),
    ("machine", "cpu_model"),
    ("machine", "cpu_count"),
    ("machine", "memory_bytes"),
    ("target", "directory"),
    ("target", "device"),
    ("target", "fstype"),
    ("tools", "fio"),
    ("tools", "gdsio"),
)


def page(
    frame: pd.DataFrame,
    groups: list[str] | None = None,
    figures: Iterable[plots.Plot] | None = None,
    series: Iterable[plots.Plot] | None = None,
    progress: Progress | None = None,
    settings: Mapping[str, Any] | None = None,
) -> str:
    """The whole report as one HTML document, the answer first: headline, tables and notes, fio's status
    text, the runs' metadata, every row (linked to its time series), figures, time series. `progress` is
    told of each figure as it is drawn into the page; `settings` as summary.build takes them."""
    report = summary.build(frame, groups, settings)
    figures = plots.figures(frame) if figures is None else list(figures)
    if series is None:
        series = series_plots.figures(load_series(frame["source"].unique()), frame, series_plots.HTML_LIMIT)
    series = list(series)
    title = f"gdsbench report: {plots.run_title(plots.with_run(frame))}"
    evidence = [section for section in report.sections if isinstance(section, (Table, Notes))]
    drawn = _figures_html([*figures, *series], progress)
    body = [
        f"<h1>{_e(title)}</h1>",
        headline_section(report),
        *(section_html(section) for section in evidence),
        section_html(report.status),
        "<h2>Runs</h2>",
        metadata_section(frame),
        rows_section(frame, {p.case: p.name for p in series if p.case}, dict(report.labels)),
        "<h2>Figures</h2>",
        *drawn[: len(figures)],
        *(["<h2>Time series</h2>", *drawn[len(figures) :]] if series else []),
        f"<p><small>gdsbench {__version__}, generated {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
        "</small></p>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def headline_section(report: Report) -> str:
    """The answer in a few lines: fio's ceilings, the engines against them, the flags."""
    items = "".join(f"<li>{_e(line)}</li>" for line in headline.lines(report))
    return f'<h2>Headline</h2><ul class="headline">{items}</ul>'


def _figures_html(figures: list[plots.Plot], progress: Progress | None) -> list[str]:
    """Each figure as HTML, telling `progress` (done, total, name) as it goes: the slow part of a page."""
    out = []
    for index, plot in enumerate(figures, 1):
        out.append(figure_html(plot))
        if progress:
            progress(index, len(figures), plot.name)
    return out


def write(
    frame: pd.DataFrame,
    directory: Path,
    groups: list[str] | None = None,
    figures: Iterable[plots.Plot] | None = None,
    series: Iterable[plots.Plot] | None = None,
    progress: Progress | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Path:
    """Write <directory>/report.html; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "report.html"
    path.write_text(page(frame, groups, figures, series, progress, settings), encoding="utf-8")
    return path


def _e(value: Any) -> str:
    """HTML-escaped text."""
    return html.escape(str(value))


#: Columns whose cells may break at a space (a figure and its power-of-10 twin, a list of flags) to fit 1280 px.
SOFT = {"bw (median)", "flags"}


def _align(name: str) -> str:
    """A column's cell class: text columns left-aligned (engine names may wrap), SOFT ones may wrap."""
    classes = ("l w" if name == "engine" else "l") if name in LEFT else ""
    classes = f"{classes} s".strip() if name in SOFT else classes
    return f' class="{classes}"' if classes else ""


def html_table(
    header: list[str], rows: list[list[str]], links: list[str | None] | None = None, box: str = "wide"
) -> str:
    """An HTML table in a div of class `box` (wide: scrolls sideways; scroll: both ways, its header kept in
    view), text columns left-aligned; `links` makes each row's last cell a link to that anchor."""
    align = [_align(name) for name in header]
    head = "".join(f"<th{a}>{_e(h)}</th>" for a, h in zip(align, header))
    body = ""
    for index, row in enumerate(rows):
        cells = [f"<td{a}>{_e(c)}</td>" for a, c in zip(align, row)]
        anchor = links[index] if links else None
        if anchor:
            cells[-1] = f'<td{align[-1]}><a href="#{_e(anchor)}">{_e(row[-1])}</a></td>'
        body += "<tr>" + "".join(cells) + "</tr>"
    return f'<div class="{box}"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


#: The Rows table's columns after each row's case.
ROW_FIGURES = ("bw", "flags", "run", "host", "rep", "straggler", "spread s")


def rows_section(frame: pd.DataFrame, linked: dict[str, str], labels: dict[str, str]) -> str:
    """Every ok row: the parameters that tell its case apart, its bandwidth and flags, then run, host,
    repetition, straggler and spread, and a link to its case's time series where the page has one.
    A column with one value in every row is named once above the table; a column empty everywhere is left
    out. The table scrolls inside its own box. `labels` names the runs (`run 1`, ...) as the report does."""
    ok = flags.annotate(frame)[lambda f: f["status"] == "ok"]
    if ok.empty:
        return ""
    names, cells = tables.case_labels(list(ok["case"]), tables.unused(ok))
    header = [*names, *ROW_FIGURES, "series"]
    rows = [
        [*cell, *_row_figures(row, labels), "series" if row["case"] in linked else ""]
        for cell, (_, row) in zip(cells, ok.iterrows())
    ]
    linking = {"series"} if linked else set()  # a link column is kept even when every row has one
    keep = [
        i
        for i, name in enumerate(header)
        if i < len(names) or name in ("bw", *linking) or len({r[i] for r in rows}) > 1
    ]
    constant = [
        f"{name}={rows[0][i]}" for i, name in enumerate(header) if i not in keep and rows[0][i] not in ("", "-")
    ]
    links = [linked.get(str(case)) for case in ok["case"]] if header.index("series") in keep else None
    # One scrolling box (no sideways one inside it): the sticky header and both scroll bars stay in view.
    table = html_table([header[i] for i in keep], [[row[i] for i in keep] for row in rows], links, box="scroll")
    caption = f'<p class="caption">every row: {_e(", ".join(constant))}</p>' if constant else ""
    return f"<h2>Rows</h2>{caption}{table}"


def _row_figures(row: pd.Series, labels: dict[str, str]) -> list[str]:
    """A row's cells after its case: bandwidth, flags, run label, host, repetition, straggler, spread."""
    return [
        tables.bw_text(row["bw_bytes"]),
        tables.flags_cell(row.get("flags")),
        labels.get(str(row["run_id"]), "-"),
        str(row["host"]),
        str(row["repetition"]),
        _text(row.get("straggler")),
        tables.number(row.get("spread_seconds", float("nan")), 3),
    ]


def _text(value: Any) -> str:
    """A text cell: '-' for missing."""
    return "-" if value is None or (isinstance(value, float) and value != value) else str(value)


def run_facts(source: str, frame: pd.DataFrame) -> list[str]:
    """One run's facts from its sidecar (or from the rows when it has none), as table cells."""
    meta = read_sidecar(Path(source))
    rows = frame[frame["source"] == source]
    cells = [source, str(meta.get("run_id") or rows["run_id"].iloc[0]), str(meta.get("settings", {}).get("name", "-"))]
    for section, key in FACTS:
        value = meta.get(section, {}).get(key) if isinstance(meta.get(section), dict) else None
        if key == "host" and value is None:
            value = rows["host"].iloc[0]
        cells.append(num2str(int(value), unit="B") if key == "memory_bytes" and value else str(value or "-"))
    return cells


def metadata_section(frame: pd.DataFrame) -> str:
    """A table with one row per results file: run id, config, machine, target and tools."""
    names = ["file", "run_id", "config", *(key for _, key in FACTS)]
    runs = [run_facts(source, frame) for source in frame["source"].unique()]
    # One column per run, one row per fact: stays narrow however long the paths and kernel names are.
    rows = [[name, *(run[index] for run in runs)] for index, name in enumerate(names)]
    # Long paths and kernel names wrap (anywhere, when they must) so every run's column stays in view.
    return html_table(["key", *(f"run {i}" for i in range(1, len(runs) + 1))], rows, box="wide facts")


def _lines(section: Lines) -> str:
    """fio-style run-status lines, each under its group's title, in a <pre>."""
    text = "\n".join(f"# {title}\n{line}" for title, line in section.items)
    return f'<h2>{_e(section.title)}</h2><pre class="status">{_e(text)}</pre>'


def _table(section: Table) -> str:
    """A titled table, then what its columns mean (its legend)."""
    table = html_table(list(section.header), [list(row) for row in section.rows])
    lines = "<br>".join(f"<b>{_e(name)}</b>: {_e(meaning)}" for name, meaning in section.legend)
    return f"<h2>{_e(section.title)}</h2>{table}" + (f'<p class="caption">{lines}</p>' if lines else "")


def _notes(section: Notes) -> str:
    """Failed cases in red, skipped ones in grey, warnings in amber."""
    items = [
        f'<li class="{"bad" if line.startswith("failed") else "skip"}">{_e(line)}</li>' for line in section.problems
    ]
    items += [f'<li class="warn">warning: {_e(note)}</li>' for note in section.warnings]
    return f"<h2>{_e(section.title)}</h2><ul>{''.join(items)}</ul>"


def _legend(section: Legend) -> str:
    """The run labels: the Runs table above already numbers the runs alike, so nothing more is drawn."""
    return ""


SECTIONS = {Legend: _legend, Lines: _lines, Table: _table, Notes: _notes}


def section_html(section: Section) -> str:
    """One section of the report as HTML."""
    return SECTIONS[type(section)](section)  # type: ignore[operator]


def figure_html(plot: plots.Plot) -> str:
    """A figure as an inline base64 PNG with its file name as caption."""
    buffer = io.BytesIO()
    plot.figure.savefig(buffer, format="png", dpi=100)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return (
        f'<figure id="{_e(plot.name)}"><img alt="{_e(plot.name)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{_e(plot.name)}</figcaption></figure>"
    )
