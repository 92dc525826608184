"""Tables a person can read: the terminal's width honoured, cells wrapped and never cut, only the columns
that vary and apply, runs by short labels, numbers as people write them; JSON for machines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gdsbench import report, results
from gdsbench.cli import cli
from gdsbench.report import summary, tables, textout
from gdsbench.units import latency_text

SAMPLES = Path(__file__).parent.parent / "results" / "sample"
CHECKPOINT_RUNS = sorted((SAMPLES / "checkpoint").glob("*.csv"))
QUALIFY_RUN = next(SAMPLES.glob("qualify-local-*.csv"))
SAVES = sorted((SAMPLES / "checkpoint").glob("checkpoint-saves-*.csv"))


def table_lines(text: str) -> list[str]:
    """The lines of a text report that are not fio's run-status lines (those keep fio's exact format)."""
    status = re.compile(r"^\s*(READ|WRITE|SAVE|LOAD): bw=")
    return [line for line in text.splitlines() if not status.match(line) and not line.startswith("  ")]


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_text_report_fits_columns_and_cuts_nothing(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    frame = results.load(CHECKPOINT_RUNS)
    text = report.render(frame, None, "text")
    tabled = [line for line in table_lines(text) if not line.startswith(("failed:", "skipped:", "warning:", "run "))]
    assert max(map(len, tabled)) <= width
    assert "…" not in text and "nan" not in text
    built = summary.build(frame)
    words = " ".join(text.split())
    for section in built.results:  # every cell of every table is there, whole (wrapped cells rejoin)
        for row in section.rows:
            for cell in row:
                assert all(word in words for word in cell.split())


def test_columns_apply_to_the_rows_of_each_table() -> None:
    """fio rows never show checkpoint keys (no load_into), checkpoint rows never fio's (no iodepth,
    no io_size); a key constant in a table is not a column."""
    built = summary.build(results.load(CHECKPOINT_RUNS))
    io, checkpoints = built.results
    assert io.title.endswith("storage I/O") and checkpoints.title.endswith("checkpoints")
    assert {"load_into", "recycle", "mmap", "memory", "staging"}.isdisjoint(io.header)
    assert {"iodepth", "io_size", "iomem", "end_fsync"}.isdisjoint(checkpoints.header)
    assert "transfer" not in io.header  # every fio row is CPU_ONLY
    assert io.header[0] == checkpoints.header[0] == "run" and io.rows[0][0] == "run 1"
    assert "staging" in checkpoints.header
    staging = checkpoints.header.index("staging")
    assert {row[staging] for row in checkpoints.rows} == {"", "64M", "256M"}  # blank where it does not apply


def test_runs_are_labelled_with_a_legend() -> None:
    text = report.render(results.load(SAVES), None, "text")
    assert text.startswith("headline:\n") and "(run 2 threads=4" in text.split("\n\n")[0]  # the runs by their labels
    after = text.split("\n\n", 1)[1]
    assert after.startswith("Runs:\n  run 1: checkpoint-saves-20261122-052443 (run_id 20261122T052443Z-218b14)\n")
    assert "  run 2: checkpoint-saves-20261123-123704" in text
    body = text[text.index("Results") :]
    assert "20261122T" not in body and "run 1" in body and "run 2" in body
    one = report.render(results.load(SAVES[:1]), None, "text")
    assert "Runs:" not in one and "run 1" not in one


def row(**fields: object) -> dict[str, object]:
    """One ok fio row with the fields given."""
    base = {
        "run_id": "r",
        "host": "h",
        "engine": "fio",
        "transfer": "CPU_ONLY",
        "pattern": "read",
        "status": "ok",
        "io_size": 16 << 20,
        "threads": 4.0,
        "iodepth": 8,
        "bytes": 1 << 30,
        "seconds": 1.0,
        "bw_bytes": 1 << 30,
        "iops": 64.0,
        "lat_mean_us": 63_100.0,
        "lat_p99_us": 850.0,
        "repetition": 1,
    }
    base.update(fields)
    base["case"] = f"engine=fio,pattern={base['pattern']},io_size={base['io_size']},threads={base['threads']}"
    return base


def test_numbers_as_people_write_them() -> None:
    frame = pd.DataFrame(
        [
            row(io_size=size, threads=threads, repetition=rep)
            for size in (4096, 16 << 20)
            for threads in (1.0, 4.0)
            for rep in (1, 2, 3)
        ]
    )
    built = summary.build(frame)
    header, cells = built.results[0].header, built.results[0].rows
    assert header[:2] == ("io_size", "threads")
    assert [r[:2] for r in cells] == [("4K", "1"), ("4K", "4"), ("16M", "1"), ("16M", "4")]
    assert cells[0][header.index("lat mean")] == "63.1ms" and cells[0][header.index("lat p99")] == "850us"
    assert all(title.startswith("io_size=") and "16777216" not in title for title, _ in built.status.items)
    assert [latency_text(v) for v in (0.5, 87.5, 9_999.0, 10_000.0, 2.5e7)] == [
        "500ns",
        "87.5us",
        "9999us",
        "10.0ms",
        "25.0s",
    ]


def test_a_table_too_wide_splits_into_blocks_repeating_the_identity() -> None:
    header = ["engine", "pattern", "bw (median)", "min-max", "flags"]
    rows = [["fastpersist", "save", "2821MiB/s (2958MB/s)", "2806-2914MiB/s", "unstable, throttled"]]
    text = textout.text_table("Results", header, rows, keys=2, width=44)
    blocks = text.split("Results (continued):")
    assert len(blocks) >= 2 and all("fastpersist" in block and "save" in block for block in blocks)
    assert max(map(len, text.splitlines())) <= 44
    assert "(2958MB/s)" in text and "throttled" in text


@settings(max_examples=60, deadline=None)
@given(
    cells=st.lists(
        st.lists(st.text("abcdef0123456789 ", min_size=0, max_size=30), min_size=4, max_size=4),
        min_size=1,
        max_size=5,
    ),
    width=st.integers(min_value=40, max_value=200),
)
def test_every_word_survives_at_any_width(cells: list[list[str]], width: int) -> None:
    """Whatever the cells and the width: no line wider than the width, every word of every cell drawn."""
    header = ["name", "a", "b", "c"]
    text = textout.text_table("T", header, cells, keys=1, width=width)
    assert max(map(len, text.splitlines())) <= width
    drawn = text.split()
    for word in (w for row in cells for cell in row for w in cell.split() if len(w) <= width // 2):
        assert any(word in piece for piece in drawn)  # a word wider than its column folds; others stay whole


def test_terminal_width_follows_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "97")
    assert textout.terminal_width() == 97
    monkeypatch.setenv("COLUMNS", "5")
    assert textout.terminal_width() == textout.NARROWEST
    monkeypatch.delenv("COLUMNS")
    assert textout.terminal_width() == textout.FILE_WIDTH  # pytest's stdout is not a terminal


def test_compare_at_80_columns_wraps_and_splits_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    run = CliRunner().invoke(cli, ["compare", *map(str, SAVES)])
    assert run.exit_code == 1  # the second run is slower: real regressions (its flagged cases inconclusive)
    lines = run.output.splitlines()
    assert "storage I/O:" in lines and "checkpoints:" in lines
    notes = ("NEW ", "only in", "... and", "left out", "warning", "inconclusive", "1 regression")  # prose: wrapped
    tabled = [ln for ln in lines if not ln.startswith(notes)]
    assert max(map(len, tabled)) <= 80 and "…" not in run.output
    assert "io_size=16M" in run.output and "16777216" not in run.output
    assert "world_size" not in run.output  # constant for the one engine that has it: says nothing


def test_report_json_holds_the_figures_in_base_units() -> None:
    run = CliRunner().invoke(cli, ["report", "--format", "json", str(QUALIFY_RUN)])
    assert run.exit_code == 0, run.output
    document = json.loads(run.output)
    frame = results.load([QUALIFY_RUN])
    ok = frame[frame["status"] == "ok"]
    assert document["schema"] == "gdsbench.report/1"
    assert sum(r["n"] for r in document["summary"]) == len(ok)
    assert max(r["bw_median"] for r in document["summary"]) == pytest.approx(
        ok.groupby(document["groups"])["bw_bytes"].median().max()
    )
    assert document["status"][0]["line"].lstrip().startswith(("READ", "WRITE"))
    assert all(isinstance(w, str) for w in document["warnings"])


def test_compare_json_lists_every_case_and_the_verdicts() -> None:
    run = CliRunner().invoke(cli, ["compare", "--format", "json", *map(str, SAVES)])
    assert run.exit_code == 1
    document = json.loads(run.output)
    assert document["regressions"] == sum(c["regression"] for c in document["cases"]) >= 1
    assert document["inconclusive"] == sum(c["verdict"] == "inconclusive" for c in document["cases"]) >= 4
    assert {c["parameters"]["engine"] for c in document["cases"]} >= {"fio", "fastpersist", "dcp"}
    assert document["threshold"] == 0.1 and len(document["only_base"]) == 4


def test_qualify_json_reports_each_check(tmp_path: Path) -> None:
    config = Path(__file__).parent.parent / "configs" / "qualify-local.yaml"
    run = CliRunner().invoke(cli, ["qualify", str(config), "--results", str(QUALIFY_RUN), "--format", "json"])
    document = json.loads(run.stdout)
    statuses = [c["status"] for c in document["checks"]]
    assert document["counts"] == {s: statuses.count(s) for s in ("pass", "fail", "inconclusive", "skip")}
    assert run.exit_code == (1 if "fail" in statuses else 0)
    assert all(c["failure"] is None for c in document["checks"] if c["status"] != "fail")
    assert document["results"] == str(QUALIFY_RUN) and document["suite"] == "qualify-local"


def test_case_text_writes_sizes_as_people_do() -> None:
    case = "engine=fio,pattern=write,io_size=16777216,threads=4,checkpoint_size=4294967296,staging=268435456"
    assert tables.case_text(case) == "engine=fio,pattern=write,io_size=16M,threads=4,checkpoint_size=4G,staging=256M"


def test_the_small_things_a_newcomer_hit_in_the_ladder_report() -> None:
    """Issue 43: train rows print no fio-style `TRAIN: bw=` line (a loop is not a storage run), a parameter a case
    does not have is left out of its label (no `kills=-`), and `--mtbf 7d` is printed as written."""
    from gdsbench.report.goodput import duration_text

    sample = sorted((Path(__file__).parent.parent / "results" / "sample" / "tiers").glob("tiers-2*.csv"))[-1]
    run = CliRunner().invoke(cli, ["report", str(sample), "--mtbf", "7d"])
    assert run.exit_code == 0, run.output
    assert "TRAIN:" not in run.output and "kills=-" not in run.output and "kills=20" in run.output
    assert " 7d " in run.output and "168h" not in run.output
    assert [duration_text(s) for s in (7 * 86400, 86400, 3600, 461)] == ["7d", "24h", "1h", "7m 41s"]
