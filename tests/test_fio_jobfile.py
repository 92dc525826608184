"""A case's fio options as pairs: the standalone argv and each host's job file render from the same list."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.hosts import parse_hosts
from gdsbench.runners import fio_job
from gdsbench.runners.base import RunContext
from gdsbench.runners.fio_job import job_options
from gdsbench.runners.fio_jobfile import host_jobs, render_args, render_section, write_job_files
from tests.helpers import fio_case


def standalone(**params: object) -> tuple[Case, RunContext]:
    defaults = {"pattern": Pattern.WRITE, "transfer": Transfer.CPU_ONLY, "io_size": 1 << 20, "threads": 2, "iodepth": 4}
    case = fio_case(**{**defaults, **params})
    return case, RunContext(directory=Path("/data/a:b"), file_size=16 << 20, runtime=2.0)


def test_job_file_holds_the_standalone_options():
    case, ctx = standalone(ioengine="libaio", unlink=True)
    argv = fio_job.fio_argv(case, ctx)
    options = job_options(case, ctx)
    assert argv == ["fio", *render_args(options), "--output-format=json+"]
    jobs = host_jobs(parse_hosts(["sock:/s0", "node2:9000"]), options)
    assert [j.name for j in jobs] == ["gdsbench.16777216.new.h0", "gdsbench.16777216.new.h1"]
    text = jobs[1].text()
    assert text.startswith("[gdsbench.16777216.new.h1]\ndirectory=/data/a\\:b\nsize=16777216\n")
    assert "time_based\nruntime=2\n" in text and text.endswith("unique_filename=0\n")
    assert "output-format" not in text and "\nname=" not in text
    assert jobs[1].files() == [
        Path("/data/a:b/gdsbench.16777216.new.h1.0.0"),
        Path("/data/a:b/gdsbench.16777216.new.h1.1.0"),
    ]


def test_a_job_keeps_its_logs_and_timing_out_of_its_layout_pass(tmp_path):
    """The measured run logs its series at the run's stem and is timed; the unmeasured layout pass is neither."""
    case = fio_case(pattern=Pattern.READ, threads=2)
    ctx = RunContext(tmp_path, 1 << 20, runtime=2.0, ramp_time=1.0, raw_dir=tmp_path, run_stem="r1", series_ms=100)
    job = fio_job.plan(case, ctx)
    prefix = tmp_path.resolve() / "series" / "r1"
    assert job.series == prefix and job.files == (tmp_path / "gdsbench.1048576.0.0", tmp_path / "gdsbench.1048576.1.0")
    logs = [f"--write_bw_log={prefix}", f"--write_lat_log={prefix}", "--log_avg_msec=100"]
    assert job.argv[-4:] == [*logs, "--output-format=json+"]
    assert "--time_based" in job.argv and "--ramp_time=1" in job.argv
    untimed = job_options(fio_case(pattern=Pattern.WRITE, threads=2), RunContext(tmp_path, 1 << 20))
    assert job.layout_argv == ["fio", *render_args(untimed), "--output-format=json"]


@pytest.mark.parametrize("value", ["/data\nexec_prerun=rm -rf /", "/data/${HOME}", "/data\0"])
def test_values_that_would_change_a_job_file_are_refused(value):
    with pytest.raises(ValueError, match="a job-file value without"):
        render_section("job", [("directory", value)])


def test_host_jobs_needs_one_name():
    with pytest.raises(ValueError, match="name the job exactly once"):
        host_jobs(parse_hosts(["a"]), [("rw", "read")])


def test_each_host_gets_a_job_file_of_its_own(tmp_path):
    jobs = host_jobs(parse_hosts(["a", "b"]), [("name", "x"), ("rw", "read"), ("unique_filename", "1")])
    paths = write_job_files(jobs, tmp_path / "jobs", "case")
    assert [p.name for p in paths] == ["case.h0.fio", "case.h1.fio"]
    assert paths[1].read_text() == "[x.h1]\nrw=read\nunique_filename=1\n"  # a given unique_filename is kept


def test_each_host_logs_under_a_name_of_its_own():
    case, ctx = standalone()
    ctx.series_ms, ctx.raw_dir = 100, Path("/r")
    jobs = host_jobs(parse_hosts(["127.0.0.1:9000", "127.0.0.1:9001"]), job_options(case, ctx, "run-1"))
    assert [job.get("write_bw_log") for job in jobs] == ["run-1.h0", "run-1.h1"]
    assert [job.get("write_lat_log") for job in jobs] == ["run-1.h0", "run-1.h1"]
    assert jobs[0].get("log_avg_msec") == "100"
