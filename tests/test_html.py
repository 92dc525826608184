"""The self-contained HTML report and `report --plots/--html` on the real results sample."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench import results
from gdsbench.cli import cli
from gdsbench.report import html, plots
from tests.helpers import assert_exits

SAMPLE = sorted((Path(__file__).parents[1] / "results" / "sample").glob("*.csv"))


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
def page() -> str:
    return html.page(results.load(SAMPLE))


def test_page_is_self_contained_with_every_figure(page: str) -> None:
    parser = Tags()
    parser.feed(page)
    assert parser.open == []
    images = [attrs["src"] for tag, attrs in parser.starts if tag == "img"]
    frame = results.load(SAMPLE)
    assert len(images) == len(plots.figures(frame)) == 8
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
    assert "<th>bw (median)</th>" in page and "<th>min-max</th>" in page
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
