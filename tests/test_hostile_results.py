"""Results files from elsewhere: `report` and `compare` read a torn row, bytes that are not UTF-8, an extra
field or a duplicated column as one error line naming the file and line (exit 2, no traceback), and render
hostile text literally (a mathtext label in figures; spreadsheet formulas neutralised in CSV and markdown)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from matplotlib.text import Text

from gdsbench import results
from gdsbench.cli import cli
from gdsbench.errors import UsageError
from gdsbench.report import plots, series, textout
from tests.helpers import assert_exits

ROOT = Path(__file__).parents[1]
SAMPLES = [
    ROOT / "results/sample/qualify-local-20261122-003621.csv",
    ROOT / "results/sample/checkpoint/checkpoint-20261122-050204.csv",
]


def records(path: Path, most: int = 6) -> list[list[str]]:
    """The header and first rows of a sample results file."""
    with path.open(newline="") as handle:
        return list(csv.reader(handle))[: most + 1]


def as_csv(rows: list[list[str]]) -> bytes:
    """Rows as a CSV file's bytes."""
    out = io.StringIO(newline="")
    csv.writer(out).writerows(rows)
    return out.getvalue().encode()


BASES = [records(path) for path in SAMPLES]
COLUMN_NAMES = st.sampled_from([*results.COLUMNS, "gpu", "workload", "source", "", "x"]) | st.text(max_size=6)
CELLS = st.sampled_from(["", "nan", "-1", "1e400", "$\\undefinedmacro{x}$", "=cmd|' /C calc'!A0", "a,b", '"', "\n"])


@st.composite
def hostile_files(draw) -> bytes:
    """A small results file torn, sprinkled with bytes, given another header, or a row one field longer or
    shorter, a cell replaced; or random bytes."""
    rows = [list(row) for row in draw(st.sampled_from(BASES))]
    kind = draw(st.sampled_from(["torn", "bytes", "header", "fields", "cell", "random"]))
    if kind == "random":
        return draw(st.binary(max_size=200))
    line = draw(st.integers(1, len(rows) - 1))
    if kind == "header":
        at, name = draw(st.integers(0, len(rows[0]) - 1)), draw(COLUMN_NAMES)
        rows[0][at : at + draw(st.integers(0, 1))] = [name]  # a name replaced, or one more
    elif kind == "fields":
        rows[line] = rows[line] + ["extra"] if draw(st.booleans()) else rows[line][:-1]
    elif kind == "cell":
        column = draw(st.integers(0, len(rows[0]) - 1))
        rows[line][column] = draw(CELLS | st.text(max_size=12))
    data = as_csv(rows)
    if kind == "torn":
        return data[: draw(st.integers(0, len(data) - 1))]
    if kind == "bytes":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]
    return data


def assert_clean(result, path: Path, codes: tuple[int, ...]) -> None:
    """The command ended by its own exit, and an exit 2 is one error line naming the file (or, for compare, no
    case in common)."""
    assert result.exit_code in codes, (result.exit_code, result.output)
    assert_exits(result, result.exit_code)
    if result.exit_code == 2:
        lines = result.output.strip().splitlines()
        assert lines[-1].startswith("gdsbench: error: "), result.output
        assert str(path) in lines[-1] or "no case in common" in lines[-1], result.output


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=hostile_files(), fmt=st.sampled_from(["text", "markdown", "csv", "json"]))
def test_report_and_compare_end_hostile_files_with_a_clear_error_or_a_report(tmp_path, data, fmt):
    path = tmp_path / "hostile.csv"
    path.write_bytes(data)
    runner = CliRunner()
    assert_clean(runner.invoke(cli, ["report", "--format", fmt, str(path)]), path, (0, 2))
    assert_clean(runner.invoke(cli, ["compare", str(SAMPLES[0]), str(path)]), path, (0, 1, 2))


def write(tmp_path: Path, rows: list[list[str]], tail: bytes = b"") -> Path:
    """A results file of these rows (and raw bytes after them)."""
    path = tmp_path / "r.csv"
    path.write_bytes(as_csv(rows) + tail)
    return path


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda rows: as_csv(rows) + b'x,y,"half', r"r.csv:8: not a CSV row \(unexpected end of data"),
        (lambda rows: as_csv(rows)[:-9], r"r.csv:7: \d+ fields where the header has"),
        (lambda rows: as_csv([*rows[:2], [*rows[2], "extra"]]), r"r.csv:3: \d+ fields where the header has"),
        (lambda rows: as_csv(rows).replace(b"ok", b"o\xffk", 2), r"r.csv:2: not UTF-8 text \(byte 0xff\)"),
        (lambda rows: as_csv([[*rows[0][:-1], "case"], *rows[1:]]), "r.csv:1: column 'case' appears more than"),
        (lambda rows: as_csv([rows[0], [*rows[1][:2], "", *rows[1][3:]]]), "r.csv:2: no case in this row"),
    ],
    ids=["unclosed-quote", "torn-last-row", "extra-field", "bad-utf8", "duplicated-column", "no-case"],
)
def test_each_hostile_shape_names_the_file_and_line(tmp_path, change, expected):
    path = tmp_path / "r.csv"
    path.write_bytes(change(BASES[0]))
    with pytest.raises(UsageError, match=expected):
        results.load([path])
    for args in (["report", str(path)], ["compare", str(path), str(SAMPLES[0])]):
        result = CliRunner().invoke(cli, args)
        assert_exits(result, 2, one_line_error=True)
        assert str(path) in result.output


def test_a_utf8_bom_and_blank_lines_still_load(tmp_path):
    path = tmp_path / "r.csv"
    path.write_bytes(b"\xef\xbb\xbf" + as_csv(BASES[0]).replace(b"\r\n", b"\r\n\r\n"))
    frame = results.load([path])
    assert len(frame) == len(BASES[0]) - 1 and frame.columns[0] == "run_id"


def test_text_columns_stay_text_when_they_look_like_numbers(tmp_path):
    rows = [list(row) for row in BASES[0]]
    for row in rows[1:]:
        row[rows[0].index("case")] = "1"
    frame = results.load([write(tmp_path, rows)])
    assert list(frame["case"].unique()) == ["1"]
    result = CliRunner().invoke(
        cli, ["compare", str(tmp_path / "r.csv"), str(tmp_path / "r.csv"), "--allow-flags", "unstable"]
    )
    assert_exits(result, 0)


MATH = "$\\undefinedmacro{x}$"


def relabelled(path: Path, tmp_path: Path, **values: str) -> Path:
    """A copy of a sample results file with these columns' cells replaced (the case too, for `transfer`)."""
    rows = [list(row) for row in records(path, most=12)]
    for row in rows[1:]:
        for name, value in values.items():
            at = rows[0].index(name)
            if name == "transfer":
                row[rows[0].index("case")] = row[rows[0].index("case")].replace(row[at], value)
            row[at] = value
    return write(tmp_path, rows)


def test_a_mathtext_label_is_drawn_as_written_in_figures_and_html(tmp_path):
    path = relabelled(SAMPLES[1], tmp_path, transfer=MATH, host="$\\badhost$")
    result = CliRunner().invoke(cli, ["report", "--html", str(tmp_path / "html"), str(path)])
    assert_exits(result, 0)
    assert (tmp_path / "html" / "report.html").stat().st_size > 0
    figure = next(p.figure for p in plots.figures(results.load([path])) if p.name.startswith("bandwidth"))
    figure.canvas.draw()
    drawn = [t._preprocess_math(t.get_text()) for t in figure.findobj(Text) if "$" in t.get_text()]
    assert (MATH, False) in drawn and all(not math for _, math in drawn)  # literal, never mathtext
    assert any("$\\badhost$" in text for text, _ in drawn)


def test_a_mathtext_case_and_host_are_drawn_as_written_in_time_series():
    table = pd.DataFrame(
        {
            "run_id": "r1",
            "case": f"engine=fio,pattern=write,transfer={MATH}",
            "host": MATH,
            "repetition": 1,
            "job": 1,
            "time_s": [0.5, 1.0],
            "bw_bytes": 1e9,
            "lat_us": 50.0,
            "source": "x.csv",
        }
    )
    (plot,) = series.figures(table)
    plot.figure.canvas.draw()
    drawn = [t._preprocess_math(t.get_text()) for t in plot.figure.findobj(Text) if "$" in t.get_text()]
    assert drawn and all(not math for _, math in drawn)
    assert any(MATH in text for text, _ in drawn)


FORMULAS = ['=HYPERLINK("http://x")', "+cmd", "-2+3", "@SUM(A1)", "\tx"]


@pytest.mark.parametrize("fmt", ["csv", "markdown"])
def test_spreadsheet_formulas_are_neutralised_and_numbers_kept(tmp_path, fmt):
    rows = [list(row) for row in BASES[1]]
    transfer = rows[0].index("transfer")
    for row, value in zip(rows[1:], [*FORMULAS, "-5"]):
        row[rows[0].index("case")] = row[rows[0].index("case")].replace(row[transfer], value)
        row[transfer] = value
    result = CliRunner().invoke(cli, ["report", "--format", fmt, str(write(tmp_path, rows))])
    assert_exits(result, 0)
    if fmt == "csv":
        cells = [row[0] for row in csv.reader(io.StringIO(result.output))][1:]
        numbers = [row[5] for row in csv.reader(io.StringIO(result.output))][1:]
        assert numbers == [str(float(row[rows[0].index("bw_bytes")])) for row in rows[1:]]
    else:
        table = [line for line in result.output.splitlines() if line.startswith("| ") and "MiB/s" in line]
        cells = [line[2:].split(" | ")[0] for line in table]
    mark = "'" if fmt == "csv" else "\\"  # markdown draws \= as =
    assert sorted(cells) == sorted([*(f"{mark}{v}" for v in FORMULAS), "-5"])


def test_formula_safe_keeps_numbers_and_the_empty_mark():
    assert [textout.formula_safe(t) for t in ["-5", "+1.5e3", "-12%", "-", "=A1", "-x", "@x", "ok"]] == [
        "-5",
        "+1.5e3",
        "-12%",
        "-",
        "'=A1",
        "'-x",
        "'@x",
        "ok",
    ]
    assert textout.md_cell("=a|b\nc") == "\\=a\\|b c"
