"""The self-contained HTML report and `report --plots/--html` on the real results sample."""

from __future__ import annotations

import base64
import json
import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench import results
from gdsbench.cli import cli
from gdsbench.report import html, plots
from tests.helpers import assert_exits

SAMPLE_ROOT = Path(__file__).parents[1] / "results" / "sample"
SAMPLE = sorted(SAMPLE_ROOT.glob("*.csv"))


class Tags(HTMLParser):
    """Collects start tags and their attributes, and checks every opened table/figure is closed."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: list[tuple[str, dict]] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.starts.append((tag, dict(attrs)))
        if tag in ("table", "figure", "pre", "ul"):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("table", "figure", "pre", "ul"):
            assert self.open.pop() == tag


@pytest.fixture(scope="module")
def figures() -> list[plots.Plot]:
    """The sample's figures, drawn once for every test of the page (drawing them is most of a page's cost)."""
    return plots.figures(results.load(SAMPLE))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory, figures: list[plots.Plot]) -> tuple[Path, list[tuple]]:
    """The sample's page written once as `report --html` writes it, and what its progress callback was told."""
    seen: list[tuple[int, int, str]] = []
    folder = tmp_path_factory.mktemp("page")
    path = html.write(results.load(SAMPLE), folder, figures=figures, progress=lambda *told: seen.append(told))
    return path, seen


@pytest.fixture(scope="module")
def page(written: tuple[Path, list[tuple]]) -> str:
    return written[0].read_text(encoding="utf-8")


def test_page_is_self_contained_with_every_figure(page: str, figures: list[plots.Plot]) -> None:
    parser = Tags()
    parser.feed(page)
    assert parser.open == []
    images = [attrs["src"] for tag, attrs in parser.starts if tag == "img"]
    assert len(images) == len(figures) == 8
    for src in images:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "://" not in page  # no external URL: opens offline
    assert not [attrs for tag, attrs in parser.starts if tag in ("link", "script")]
    assert "<style>" in page


def test_page_has_run_metadata_tables_and_status_lines(page: str) -> None:
    meta = json.loads(SAMPLE[0].with_suffix(".meta.json").read_text())
    for fact in (
        meta["run_id"],
        meta["machine"]["host"],
        meta["machine"]["kernel"],
        meta["tools"]["fio"],
        meta["target"]["fstype"],
        "qualify-local",
    ):
        assert fact in page
    assert '<th class="s">bw (median)</th>' in page and "<th>min-max</th>" in page
    assert re.search(r"READ: bw=\d+MiB/s", page) and re.search(r"WRITE: bw=\d+MiB/s", page)
    assert "skipped: engine=fio,pattern=write,transfer=GDS" in page  # skipped cases listed with reason
    assert "<h1>gdsbench report: host vm, run " in page


def test_cli_report_writes_plots_and_html(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "report",
            str(SAMPLE[0]),
            "--format",
            "markdown",
            "--plots",
            str(tmp_path / "fig"),
            "--html",
            str(tmp_path / "html"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| transfer | pattern | io_size | threads |" in result.output
    names = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert len(names) == 16 and "heatmap-read-CPU_ONLY.png" in names and "latency-write.svg" in names
    page = (tmp_path / "html" / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 8


def test_cli_report_refuses_unknown_group_column(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", str(SAMPLE[0]), "--by", "colour", "--html", str(tmp_path)])
    assert_exits(result, 2, one_line_error=True)
    assert "--by: no column colour" in result.output
    assert not (tmp_path / "report.html").exists()


FLEET = sorted((Path(__file__).parents[1] / "results" / "sample" / "fleet").glob("*.csv"))


def test_the_answer_comes_before_the_evidence(page: str) -> None:
    """Headline (storage ceilings, flags) first; fio's status text after the tables; then metadata and rows."""
    order = [
        "<h2>Headline</h2>",
        "<h2>Results: median",
        "<h2>Notes</h2>",
        "<h2>Run status",
        "<h2>Runs</h2>",
        "<h2>Rows</h2>",
        "<h2>Figures</h2>",
    ]
    where = [page.index(mark) for mark in order]
    assert where == sorted(where)
    headline = page[where[0] : where[1]]
    assert "storage write (direct): " in headline and "storage read (direct): " in headline
    assert "flags: " in headline and "unstable on " in headline


def rows_table(page: str) -> tuple[str, list[str]]:
    """The Rows section's HTML and its header cells."""
    section = page[page.index("<h2>Rows</h2>") : page.index("<h2>Figures</h2>")]
    return section, re.findall(r"<th[^>]*>([^<]*)</th>", section)


def test_rows_put_bandwidth_and_flags_after_the_case_and_drop_constant_columns(page: str) -> None:
    section, header = rows_table(page)
    assert header == ["pattern", "transfer", "io_size", "threads", "bw", "flags", "rep"]
    # one host, one run, no straggler, no spread and no series in this sample: constant or empty, left out
    assert '<p class="caption">every row: host=vm</p>' in section
    # scrolls inside one box of its own (a sideways box inside it would carry the sticky header away with it)
    assert '<div class="scroll"><table>' in section and 'class="wide"' not in section
    rules = {selector.strip(): rule for selector, rule in re.findall(r"([^{}]+)\{([^}]*)\}", html.CSS)}
    assert "max-height" in rules[".scroll"] and "overflow:auto" in rules[".scroll"]
    assert "position:sticky" in rules[".scroll thead th"]


def test_series_figures_are_named_by_index_and_parameters_and_rows_link_to_them() -> None:
    from gdsbench.report import series

    frame = results.load(FLEET)
    text = html.page(frame)
    names = series.names(list(dict.fromkeys(results.load_series(FLEET)["case"])))  # in the order the series has them
    assert list(names.values()) == ["series-01-fio-write", "series-02-fio-read", "series-03-fio-randread"]
    for name in names.values():
        assert f'<figure id="{name}">' in text and f'<a href="#{name}">series</a>' in text
    _, header = rows_table(text)
    assert header[:4] == ["pattern", "bw", "flags", "host"] and "series" in header
    assert series.names(
        ["engine=fio,pattern=read,io_size=4096,threads=1", "engine=fio,pattern=read,io_size=16777216,threads=4"]
    ) == {
        "engine=fio,pattern=read,io_size=4096,threads=1": "series-01-fio-read-io_size4K-threads1",
        "engine=fio,pattern=read,io_size=16777216,threads=4": "series-02-fio-read-io_size16M-threads4",
    }


def test_series_figures_are_titled_by_the_parameters_that_tell_them_apart() -> None:
    """The distributed sample's two series cases differ in pattern and end_fsync: the title's first line says
    so, the case's other parameters follow on their own line, then the run."""
    from gdsbench.report import series

    source = sorted((Path(__file__).parents[1] / "results" / "sample" / "distributed").glob("*.csv"))
    frame = results.load(source)
    drawn = series.figures(results.load_series(source), frame)
    titles = {plot.name: plot.figure._suptitle.get_text().split("\n") for plot in drawn}
    assert list(titles) == ["series-01-fio-write-end_fsyncTrue", "series-02-fio-read-end_fsyncFalse"]
    first, rest, run = titles["series-01-fio-write-end_fsyncTrue"]
    assert first == "#01 fio write: end_fsync=True"
    assert rest.startswith("with transfer=CPU_ONLY, io_size=16M,") and "end_fsync" not in rest
    assert run.startswith(f"run {frame['run_id'].iloc[0]}, ") and run.endswith(" UTC")


def test_runs_table_wraps_long_paths_so_every_run_stays_in_view(page: str) -> None:
    section = page[page.index("<h2>Runs</h2>") : page.index("<h2>Rows</h2>")]
    assert section.count("<table>") == 1 and '<div class="wide facts"><table>' in section
    rules = {selector.strip(): rule for selector, rule in re.findall(r"([^{}]+)\{([^}]*)\}", html.CSS)}
    assert "white-space:normal" in rules[".facts td+td"] and "overflow-wrap:anywhere" in rules[".facts td+td"]


def test_no_heatmap_for_fewer_than_two_by_two_cells() -> None:
    frame = results.load(SAMPLE)
    one_size = frame[frame["io_size"] == 16 << 20]
    assert one_size["threads"].nunique() == 2 and not plots.heatmaps(one_size)
    one_thread = frame[frame["threads"] == 1]
    assert one_thread["io_size"].nunique() == 4 and not plots.heatmaps(one_thread)
    assert [p.name for p in plots.heatmaps(frame)][:1] == ["heatmap-read-CPU_CACHED"]


def test_figure_progress_is_told_of_every_figure(written: tuple[Path, list[tuple]], figures: list[plots.Plot]) -> None:
    """The page's progress callback (the `written` page's) is told of each figure in turn; the sample has no series."""
    _, seen = written
    assert [done for done, _, _ in seen] == list(range(1, len(figures) + 1))
    assert {total for _, total, _ in seen} == {len(figures)} and seen[-1][2] == figures[-1].name


@pytest.mark.needs_chromium
def test_the_docs_screenshot_is_drawn_by_chromium(tmp_path: Path) -> None:
    """tools/html_screenshot.py (make docs-screenshot): a PNG of the page's top, the size asked for."""
    import subprocess
    import sys

    from PIL import Image

    out = tmp_path / "page.png"
    tool = Path(__file__).parents[1] / "tools" / "html_screenshot.py"
    subprocess.run(
        [sys.executable, str(tool), str(out), str(SAMPLE[0]), "--width", "900", "--height", "700"],
        check=True,
        timeout=180,
    )
    with Image.open(out) as image:
        assert image.size == (900, 700) and image.getextrema() != ((255, 255), (255, 255), (255, 255))


@pytest.mark.needs_chromium
def test_the_docs_screenshot_can_hold_the_whole_page(tmp_path: Path, written: tuple[Path, list[tuple]]) -> None:
    """`--full` (make docs-screenshot): the page down to its footer, cut a few pixels below it, in 256 colours.
    The tool's command line and screenshot in this process, on the sample's page as its main() writes it (the
    module's `written`: the figures are drawn once; the test above runs the tool whole)."""
    from PIL import Image, ImageChops

    from tools.html_screenshot import arguments, screenshot

    args = arguments([str(tmp_path / "page.png"), str(SAMPLE[0]), "--width", "900", "--full"])
    assert args.csvs == SAMPLE and args.height is None
    screenshot(written[0], args.out, args.width, args.height)
    out = args.out
    with Image.open(out) as image:
        assert image.mode == "P" and image.width == 900 and image.height > 5000  # 8 figures, one under another
        drawn = image.convert("RGB")
    bottom = ImageChops.difference(drawn, Image.new("RGB", drawn.size, "white")).getbbox()[3]
    assert 0 < drawn.height - bottom <= 30  # the footer line is kept, the white below it is not


@pytest.fixture(scope="module", params=["cpu-cost", "checkpoint"])
def laid_out(request: pytest.FixtureRequest) -> tuple[str, dict]:
    """A sample's page (its source) and Chromium's measurement of it 1280 pixels wide."""
    from tools.html_screenshot import measure

    with tempfile.TemporaryDirectory(prefix="gdsbench-page-") as folder:
        csvs = sorted((SAMPLE_ROOT / request.param).glob("*.csv"))
        path = html.write(results.load(csvs), Path(folder))
        return path.read_text(encoding="utf-8"), measure(path, 1280)


@pytest.mark.needs_chromium
@pytest.mark.slow
def test_in_chromium_1280_pixels_wide_nothing_overflows_and_every_table_and_figure_is_there(laid_out) -> None:
    """The page in a real browser: no console error, nothing wider than the window, no summary table wider than its
    box (the rows table and fio's status text scroll sideways by design), every table and image drawn."""
    source, seen = laid_out
    assert seen["errors"] == [] and seen["viewport"] == 1280
    assert seen["width"] <= 1280
    too_wide = [box for box in seen["scrolling"] if box["className"] not in ("scroll", "status")]
    assert too_wide == [], "wider than their box: " + "; ".join(f"{b['heading']}: {b['content']} px" for b in too_wide)
    assert seen["tables"] == source.count("<table>") > 0
    assert seen["images"] == source.count("<img ") > 0 and seen["broken"] == 0
