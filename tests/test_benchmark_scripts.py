"""The probe scripts behind docs/benchmarks.md run on a small size, print every way they measure and
leave nothing behind in the directory they were given."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.needs_torch


def run(*argv: str) -> str:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_save_pipeline_measures_four_ways_and_cleans_up(disk_tmp: Path) -> None:
    out = run("benchmarks/save_pipeline.py", "--dir", str(disk_tmp), "--size", "96M", "--reps", "2")
    medians = dict(re.findall(r"^  (save|recycled|raw write|raw copy)\s+([\d.]+)", out, re.M))
    assert set(medians) == {"save", "recycled", "raw write", "raw copy"}
    assert all(float(v) > 0 for v in medians.values())
    assert re.search(r"^  raw write\s+[\d.]+\s+x1\.00$", out, re.M)
    assert list(disk_tmp.iterdir()) == []


def test_first_touch_measures_every_way(disk_tmp: Path) -> None:
    sample = disk_tmp / "sample.bin"
    sample.write_bytes(b"\x5a" * (32 << 20))
    out = run("benchmarks/first_touch.py", str(sample), "--idle", "0", "--reps", "1")
    lines = re.findall(r"^idle\s+0\.0 s  (.+?)\s+([\d.]+) GB/s$", out, re.M)
    assert [name for name, _ in lines] == [
        "anon 1 thread",
        "anon 2 threads",
        "anon 4K 2 threads",
        "page cache",
        "O_DIRECT",
    ]
    assert sample.read_bytes() == b"\x5a" * (32 << 20)  # read, never written


def test_dcp_ab_compares_two_checkouts_and_cleans_up(disk_tmp: Path) -> None:
    out = run(
        "benchmarks/dcp_ab.py", "--old", ".", "--new", ".", "--dir", str(disk_tmp), "--size", "32M", "--pairs", "1"
    )
    ratios = dict(re.findall(r"^  (save|load)  old [\d.]+ .+ new/old x([\d.]+)$", out, re.M))
    assert set(ratios) == {"save", "load"} and all(float(r) > 0 for r in ratios.values())
    assert list(disk_tmp.iterdir()) == []


# a single file of ours saved; a DCP folder of torch's loaded (its save runs in the script's child process)
@pytest.mark.parametrize(("engine", "pattern"), [("fastpersist", "save"), ("dcp", "load")])
def test_cpu_profile_runs_each_engine_each_way_and_cleans_up(disk_tmp: Path, engine: str, pattern: str) -> None:
    out = run(
        "benchmarks/cpu_profile.py",
        "run",
        pattern,
        "--engine",
        engine,
        "--dir",
        str(disk_tmp),
        "--size",
        "16M",
        "--reps",
        "1",
    )
    reps = re.findall(rf"^{engine} {pattern} rep (\d): ([\d.]+) s, ([\d.]+) CPU-s$", out, re.M)
    assert [r[0] for r in reps] == ["1"] and all(float(r[1]) > 0 for r in reps)
    assert list(disk_tmp.iterdir()) == []


def test_cpu_profile_ranks_a_recorded_profile(tmp_path: Path) -> None:
    """A py-spy raw profile ranked by leaf and by category, counting only the measured calls' 100 samples."""
    profile = tmp_path / "p.txt"
    profile.write_text(
        "main (x.py:1);save_with (cpu_profile.py:9);XXH3_64bits (libxxhash.so) 50\n"
        "main (x.py:1);save_with (cpu_profile.py:9);__memmove_avx_unaligned_erms (libc.so.6) 30\n"
        "main (x.py:1);save_with (cpu_profile.py:9);__libc_pwrite64 (libc.so.6) 20\n"
        "main (x.py:1);state_dict (cpu_profile.py:40);normal_kernel (libtorch_cpu.so) 70\n"  # the workload: not counted
    )
    out = run("benchmarks/cpu_profile.py", "top", str(profile))
    assert "100 samples of busy threads inside" in out
    assert re.search(r"^ 50\.0%  checksum", out, re.M) and re.search(r"^ 30\.0%  copy", out, re.M)
    assert re.search(r"^ 20\.0%  write syscalls", out, re.M)


def test_async_blocking_times_each_part_against_the_copy_and_cleans_up(disk_tmp: Path) -> None:
    out = run("benchmarks/async_blocking.py", "--dir", str(disk_tmp), "--size", "8M", "--rounds", "1", "--idle", "0")
    medians = dict(re.findall(r"^  (blocking|before|stage\(\)|after|host copy)\s+([\d.]+) ms  x[\d.]+", out, re.M))
    assert set(medians) == {"blocking", "before", "stage()", "after", "host copy"}
    assert float(medians["blocking"]) >= float(medians["stage()"]) > 0
    assert re.search(r"^blocking / host copy: x[\d.]+ \(median of per-round ratios\)$", out, re.M)
    assert list(disk_tmp.iterdir()) == []


def test_load_phases_splits_a_dcp_load_in_every_condition_and_cleans_up(disk_tmp: Path) -> None:
    out = run("benchmarks/load_phases.py", "--dir", str(disk_tmp), "--size", "8M", "--reps", "1")
    for memory in ("fresh", "touched"):
        for verify in ("True", "False"):
            for phase in ("metadata", "planning", "reads", "total"):
                assert re.search(rf"^{memory} verify={verify} {phase}\s+[\d.]+\s+[\d.]+\s+[\d.]+$", out, re.M), out
    assert list(disk_tmp.iterdir()) == []


def test_fresh_pages_times_first_touch_with_each_page_size() -> None:
    out = run("benchmarks/fresh_pages.py", "--sizes", "4M", "8M")
    assert len(re.findall(r"^\d+ MiB: GB/s huge \[[\d., ]+\] small \[[\d., ]+\]$", out, re.M)) == 2


def test_memory_tier_times_each_way_against_the_copy_and_leaves_no_folder() -> None:
    out = run("benchmarks/memory_tier.py", "--size", "16M", "--rounds", "2")
    folder = re.search(r"memory tier (\S+)$", out, re.M)
    assert folder is not None and not Path(folder.group(1)).exists()
    ways = dict(
        re.findall(r"^(copy|save|async stall|async durable|load)\s+[\d.]+ s\s+[\d.]+ GB/s\s+([\d.]+)x", out, re.M)
    )
    assert set(ways) == {"copy", "save", "async stall", "async durable", "load"} and ways["copy"] == "1.00"
