"""A case's fio options as pairs: the standalone argv and each host's job file render from the same list."""

from __future__ import annotations

from pathlib import Path

import pytest

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.hosts import parse_hosts
from gdsbench.runners import fio
from gdsbench.runners.base import RunContext
from gdsbench.runners.fio_jobfile import argv_options, host_jobs, render_args, render_section, write_job_files
from tests.helpers import fio_case


def standalone(**params: object) -> tuple[Case, RunContext]:
    defaults = {"pattern": Pattern.WRITE, "transfer": Transfer.CPU_ONLY, "io_size": 1 << 20, "threads": 2, "iodepth": 4}
    case = fio_case(**{**defaults, **params})
    return case, RunContext(directory=Path("/data/a:b"), file_size=16 << 20, runtime=2.0)


def test_job_file_holds_the_standalone_options():
    case, ctx = standalone(ioengine="libaio", unlink=True)
    argv = fio.fio_argv(case, ctx)
    options = argv_options(argv)
    assert render_args(options) == [arg for arg in argv[1:] if not arg.startswith("--output-format")]
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
