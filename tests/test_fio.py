"""The fio runner's parser against real fio 3.33 output recorded on this kind of machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gdsbench import runners
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.report.fio_style import status_line
from gdsbench.runners import fio, fio_job, fio_output
from gdsbench.runners.base import RunContext
from tests.conftest import DATA

FIXTURES = sorted(p for p in (DATA / "fio").glob("*.txt") if not p.name.startswith(("error", "run-status")))


def recorded(path):
    """(fio's stdout as a CompletedProcess, its JSON document, its run-status line)."""
    text = path.read_text()
    proc = subprocess.CompletedProcess(["fio"], 0, text, "")
    document, _ = json.JSONDecoder().raw_decode(text[text.index("{") :])
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(("READ:", "WRITE:")))
    return proc, document, line


def pattern_of(document):
    return Pattern(document["jobs"][0]["job options"]["rw"])


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_totals_equal_what_fio_reported(path):
    proc, document, _ = recorded(path)
    m = fio_output.measure(fio_output.parse_json(proc), pattern_of(document))
    jobs = [j[fio_output.direction(pattern_of(document))] for j in document["jobs"]]
    assert m.bytes == sum(j["io_bytes"] for j in jobs)
    assert m.seconds == max(j["runtime"] for j in jobs) / 1000
    assert m.iops == pytest.approx(sum(j["iops"] for j in jobs))
    if len(jobs) == 1:  # one job: every figure is fio's own
        assert m.bw_bytes == jobs[0]["bw_bytes"]
        clat = jobs[0]["clat_ns"]
        assert m.lat_mean_us == pytest.approx(clat["mean"] / 1000)
        assert m.lat_stdev_us == pytest.approx(clat["stddev"] / 1000)
        assert m.lat_p50_us == clat["percentile"]["50.000000"] / 1000
        assert m.lat_p99_us == clat["percentile"]["99.000000"] / 1000
        assert m.lat_p999_us == clat["percentile"]["99.900000"] / 1000


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_run_status_line_is_byte_exact(path):
    proc, document, line = recorded(path)
    m = fio_output.measure(fio_output.parse_json(proc), pattern_of(document))
    assert status_line({**m.row(), "pattern": pattern_of(document).value}) == line


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_percentiles_from_bins_follow_fios_rule(path):
    _, document, _ = recorded(path)
    for job in document["jobs"]:
        clat = job[fio_output.direction(pattern_of(document))]["clat_ns"]
        picked = fio_output.percentiles_from_bins({int(k): v for k, v in clat["bins"].items()})
        assert picked == {name: clat["percentile"][f"{p:f}"] for name, p in fio_output.PERCENTILES.items()}


def test_multi_job_latency_is_pooled():
    proc, document, _ = recorded(DATA / "fio" / "randwrite-128k-iouring-4jobs.txt")
    m = fio_output.measure(fio_output.parse_json(proc), Pattern.RANDWRITE)
    clats = [j["write"]["clat_ns"] for j in document["jobs"]]
    n = sum(c["N"] for c in clats)
    assert m.lat_mean_us == pytest.approx(sum(c["N"] * c["mean"] for c in clats) / n / 1000)
    assert min(c["min"] for c in clats) / 1000 <= m.lat_p50_us <= max(c["max"] for c in clats) / 1000
    assert m.figures["bw_min_bytes"] < m.figures["bw_max_bytes"]


def test_failed_job_raises_with_fios_message():
    text = (DATA / "fio" / "error-direct-unaligned.txt").read_text()
    stderr = (DATA / "fio" / "error-direct-unaligned.stderr").read_text()
    with pytest.raises(ToolError, match="Invalid argument"):
        fio_output.parse_json(subprocess.CompletedProcess(["fio"], 1, text, stderr))


def test_no_json_at_all_is_a_tool_error():
    with pytest.raises(ToolError, match="fio failed: fio: option bs out of range"):
        fio_output.parse_json(subprocess.CompletedProcess(["fio"], 1, "", "fio: option bs out of range\n"))


def test_warning_lines_before_json_are_skipped():
    text = "fio: this platform does not support process shared mutexes\n" + FIXTURES[0].read_text()
    document = fio_output.parse_json(subprocess.CompletedProcess(["fio"], 0, text, ""))
    assert document["fio version"] == "fio-3.33"


def _case(**params):
    base = {
        "pattern": Pattern.READ,
        "transfer": Transfer.CPU_ONLY,
        "io_size": 1 << 20,
        "threads": 2,
        "iodepth": 8,
        "ioengine": "io_uring",
        "iomem": "malloc",
        "end_fsync": False,
        "unlink": False,
        "gpu": "0",
    }
    base.update(params)
    return Case("fio", tuple(base.items()))


def test_argv_translates_the_case(tmp_path):
    ctx = RunContext(directory=tmp_path, file_size=64 << 20, runtime=5.0)
    argv = fio_job.fio_argv(_case(), ctx)
    assert argv[0] == "fio"
    for arg in (
        "--bs=1048576",
        "--rw=read",
        "--numjobs=2",
        "--iodepth=8",
        "--direct=1",
        "--ioengine=io_uring",
        "--size=67108864",
        f"--directory={tmp_path}",
        "--time_based",
        "--runtime=5",
        "--output-format=json+",
    ):
        assert arg in argv
    cached = fio_job.fio_argv(_case(transfer=Transfer.CPU_CACHED, pattern=Pattern.WRITE, end_fsync=True), ctx)
    assert "--direct=0" in cached and "--end_fsync=1" in cached and "--unlink=1" not in cached
    assert "--unlink=1" in fio_job.fio_argv(_case(pattern=Pattern.WRITE, unlink=True), ctx)
    gds = fio_job.fio_argv(_case(transfer=Transfer.GDS, gpu="1"), ctx)
    assert {"--ioengine=libcufile", "--cuda_io=cufile", "--gpu_dev_ids=1"} <= set(gds)


def test_gpu_transfer_skipped_without_libcufile(tmp_path):
    ctx = RunContext(directory=tmp_path, file_size=1 << 20)
    reason = fio.FioRunner().unavailable(_case(transfer=Transfer.GDS), ctx)
    if "libcufile" in fio.engines("fio"):
        pytest.skip("this fio has libcufile")
    assert reason is not None and "libcufile" in reason


def test_missing_fio_is_a_skip_reason(tmp_path):
    ctx = RunContext(directory=tmp_path, file_size=1 << 20, options={"fio": str(tmp_path / "no-such-fio")})
    assert "fio not found" in fio.FioRunner().unavailable(_case(), ctx)


def test_colon_in_directory_is_escaped_for_fio(tmp_path):
    ctx = RunContext(directory=tmp_path / "a:b", file_size=1 << 20)
    assert f"--directory={tmp_path}/a\\:b" in fio_job.fio_argv(_case(), ctx)


def test_hugetlb_buffers_need_reserved_pages(tmp_path, monkeypatch):
    from gdsbench.sysinfo import storage

    case = _case(iomem="shmhuge", io_size=16 << 20, iodepth=8, threads=1)
    monkeypatch.setattr(storage, "huge_pages", lambda: (0, 2 << 20))
    reason = fio.huge_pages_missing(case)
    assert reason == (
        "iomem=shmhuge needs 65 free huge pages (0 free); reserve them as root: echo 65 > /proc/sys/vm/nr_hugepages"
    )
    monkeypatch.setattr(storage, "huge_pages", lambda: (65, 2 << 20))
    assert fio.huge_pages_missing(case) is None
    assert fio.huge_pages_missing(_case(iomem="malloc")) is None


def test_huge_pages_reads_meminfo():
    from gdsbench import sysinfo

    facts = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    assert sysinfo.huge_pages() == (int(facts["HugePages_Free"]), int(facts["Hugepagesize"].split()[0]) * 1024)


@pytest.mark.needs_fio
@pytest.mark.needs_odirect
def test_unlink_cases_never_delete_the_shared_file(tmp_path):
    """A new-file (unlink) write uses files of its own, so the overwrite case after it really overwrites:
    real fio runs, the shared file keeps its inode across the unlink case."""
    ctx = RunContext(directory=tmp_path, file_size=8 << 20)
    overwrite = _case(pattern=Pattern.WRITE, threads=1, io_size=1 << 20, iodepth=1, ioengine="psync")
    new_file = _case(pattern=Pattern.WRITE, threads=1, io_size=1 << 20, iodepth=1, ioengine="psync", unlink=True)
    [shared] = fio_job.job_files(overwrite, ctx)
    assert fio_job.job_files(new_file, ctx) != [shared]
    runner = runners.get("fio")
    runner.run(overwrite, ctx)
    inode = shared.stat().st_ino
    runner.run(new_file, ctx)
    assert shared.stat().st_ino == inode and not fio_job.job_files(new_file, ctx)[0].exists()


def test_a_runtime_under_a_second_runs_that_long_not_a_few_milliseconds(tmp_path):
    """fio reads a bare `--runtime=0.6` as 0 (23 ms here): sub-second runtimes go as milliseconds, and a real
    600 ms run lasts 600 ms (it was flagged too_short, its figure fio's start-up)."""
    assert [fio_job.fio_time(s) for s in (3.0, 0.6, 1.25, 0.0004)] == ["3", "600ms", "1250ms", "1ms"]
    ctx = RunContext(directory=tmp_path, file_size=16 << 20, runtime=0.6)
    case = _case(pattern=Pattern.WRITE)
    measured = fio.FioRunner().run(case, ctx)
    assert 0.55 <= measured.seconds <= 2.0, measured.seconds
