"""Sizes, durations and fio's num2str, checked against strings fio itself printed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdsbench.units import format_bandwidth, num2str, parse_duration, parse_size, size_label
from tests.conftest import DATA

SIZES = [
    ("4K", 4096),
    ("4k", 4096),
    ("512k", 512 * 1024),
    ("1M", 1 << 20),
    ("16M", 16 << 20),
    ("1G", 1 << 30),
    ("1GiB", 1 << 30),
    ("128KiB", 128 << 10),
    ("1GB", 10**9),
    ("4KB", 4000),
    ("4096", 4096),
    (4096, 4096),
    ("1.5M", 3 << 19),
    ("4Ki", 4096),
    ("2T", 2 << 40),
    (" 8M ", 8 << 20),
]


@pytest.mark.parametrize("text,expected", SIZES)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "K", "4X", "-4K", "1.1", "four", "4iB", "1e3", True, -1])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    "text,seconds",
    [("5s", 5.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), (30, 30.0), ("1.5", 1.5), ("250us", 0.00025)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@given(st.integers(min_value=1, max_value=1 << 20), st.sampled_from(["", "K", "M", "G", "T"]))
def test_size_label_round_trips(count, suffix):
    value = parse_size(f"{count}{suffix}")
    assert parse_size(size_label(value)) == value


# (number, pow2, unit, what fio printed) taken from fio 3.33's run-status lines in tests/data/fio.
NUM2STR = [
    (1977614336, True, "B/s", "1886MiB/s"),
    (63941405, True, "B/s", "61.0MiB/s"),
    (63941405, False, "B/s", "63.9MB/s"),
    (8388608, True, "B", "8192KiB"),
    (8388608, False, "B", "8389kB"),
    (16777216, True, "B", "16.0MiB"),
    (16777216, False, "B", "16.8MB"),
    (104857600, False, "B", "105MB"),
]


@pytest.mark.parametrize("number,pow2,unit,printed", NUM2STR)
def test_num2str_matches_fio(number, pow2, unit, printed):
    assert num2str(number, pow2=pow2, unit=unit) == printed


# fio --group_reporting runs recorded in tests/data/fio/run-status-lines.txt: per-job size x jobs.
GROUP_RUNS = [8 << 20, 16 << 20, 144 << 20, 80 << 20, 6 << 20, 200 << 20, 96 << 20, 12 << 20, 96 << 20, 40 << 20]


def test_run_status_lines_rebuilt_byte_exact():
    lines = (DATA / "fio" / "run-status-lines.txt").read_text().splitlines()
    assert len(lines) == len(GROUP_RUNS)
    for line, io_bytes in zip(lines, GROUP_RUNS):
        run_ms = int(re.search(r"run=(\d+)-", line).group(1))
        bw = io_bytes * 1000 // run_ms
        io = f"io={num2str(io_bytes, unit='B')} ({num2str(io_bytes, pow2=False, unit='B')})"
        p2, p10 = num2str(bw, unit="B/s"), num2str(bw, pow2=False, unit="B/s")
        expected = f"bw={format_bandwidth(bw)}, {p2}-{p2} ({p10}-{p10}), {io}, run={run_ms}-{run_ms}msec"
        assert line.split(": ", 1)[1] == expected


def _value(text: str) -> float:
    """Read a num2str string back into a number."""
    match = re.fullmatch(r"([\d.]+)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?", text)
    scale = {
        None: 1,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "P": 1e15,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
    }[match.group(2)]
    return float(match.group(1)) * scale


@given(st.integers(min_value=0, max_value=2**60), st.booleans())
def test_num2str_keeps_four_digits_and_the_value(number, pow2):
    text = num2str(number, pow2=pow2)
    digits = re.match(r"[\d.]+", text).group(0)
    assert len(digits.replace(".", "")) <= 4 or "." not in digits
    assert _value(text) == pytest.approx(number, rel=0.015, abs=1)
