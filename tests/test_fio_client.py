"""fio client mode against real fio 3.33 output (tests/data/fio-client): per-host and aggregate figures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gdsbench.cases import Pattern
from gdsbench.hosts import AGGREGATE, parse_hosts
from gdsbench.runners import fio_output
from gdsbench.runners.fio_client import (
    client_argv,
    exit_line,
    fio_aggregate,
    global_options,
    output_lines,
    parse_document,
    results_of,
)
from gdsbench.runners.fio_jobfile import HostJob, host_jobs, render_section
from tests.conftest import DATA

FIXTURES = DATA / "fio-client"
GOOD = [
    "sock2-write-1job",
    "sock2-read-2jobs",
    "sock3-write-2jobs",
    "sock3-read-1job",
    "tcp2-write-2jobs",
    "tcp2-read-1job",
    "tcp3-read-2jobs",
    "tcp3-write-1job",
    "tcp2-randread-timebased",
    "fio341-sock2-write-global",
]


def job_options(path: Path) -> tuple[str, tuple[tuple[str, str | None], ...]]:
    """The last section of a recorded job file: its name and its options in order."""
    sections = path.read_text().split("\n[")
    head, *lines = sections[-1].strip().splitlines()
    pairs = tuple((k, v if sep else None) for k, sep, v in (line.partition("=") for line in lines))
    return head.strip("[]"), pairs


def recorded(name: str) -> tuple[subprocess.CompletedProcess, list[HostJob], Pattern]:
    """A fixture as fio's finished process, the jobs it was sent (as HostJobs) and its pattern."""
    base = FIXTURES / name
    proc = subprocess.CompletedProcess(
        ["fio"],
        int(Path(f"{base}.rc").read_text()),
        Path(f"{base}.txt").read_text(),
        Path(f"{base}.stderr").read_text(),
    )
    jobs = []
    for index, host in enumerate(parse_hosts(f"{base}.hosts")):
        section, options = job_options(Path(f"{base}.h{index}.fio"))
        jobs.append(HostJob(host, section, options))
    return proc, jobs, Pattern(dict(jobs[0].options)["rw"])


def entries_of(document: dict, job: HostJob) -> list[dict]:
    return [e for e in document["client_stats"] if e["jobname"] == job.name]


@pytest.mark.parametrize("name", GOOD)
def test_each_host_gets_its_own_figures(name):
    proc, jobs, pattern = recorded(name)
    document = parse_document(proc.stdout)
    results = results_of(proc, jobs, pattern)
    assert [r.host for r in results] == [j.host.label for j in jobs] + [AGGREGATE]
    for job, result in zip(jobs, results):
        stats = [e[fio_output.direction(pattern)] for e in entries_of(document, job)]
        assert all(e["hostname"] == job.host.address for e in entries_of(document, job))
        m = result.measurement
        assert result.ok and result.error is None and m is not None
        assert m.bytes == sum(s["io_bytes"] for s in stats)
        assert m.seconds == max(s["runtime"] for s in stats) / 1000
        assert m.bw_bytes == sum(s["io_bytes"] for s in stats) * 1000 // max(s["runtime"] for s in stats)
        assert m.iops == pytest.approx(sum(s["iops"] for s in stats))
        assert result.job_seconds == tuple(s["runtime"] / 1000 for s in stats)
        if len(stats) == 1:  # one job: every figure is fio's own
            assert m.bw_bytes == stats[0]["bw_bytes"]
            assert m.lat_mean_us == pytest.approx(stats[0]["clat_ns"]["mean"] / 1000)
            assert m.lat_p99_us == stats[0]["clat_ns"]["percentile"]["99.000000"] / 1000


@pytest.mark.parametrize("name", GOOD)
def test_aggregate_equals_fios_all_clients(name):
    proc, jobs, pattern = recorded(name)
    *hosts, total = results_of(proc, jobs, pattern)
    fios = fio_aggregate(parse_document(proc.stdout))[fio_output.direction(pattern)]
    m = total.measurement
    assert total.host == AGGREGATE and m is not None
    assert m.bytes == fios["io_bytes"] == sum(h.measurement.bytes for h in hosts)
    assert m.bw_bytes == fios["bw_bytes"]  # total bytes over the longest runtime, fio's rule
    assert m.seconds == fios["runtime"] / 1000 == max(h.measurement.seconds for h in hosts)
    assert m.iops == pytest.approx(sum(h.measurement.iops for h in hosts))
    assert total.bw_sum_bytes == sum(h.measurement.bw_bytes for h in hosts)
    assert total.bw_sum_bytes >= m.bw_bytes  # equal only when every host ran as long as the slowest
    assert dict(total.host_seconds) == {h.host: h.measurement.seconds for h in hosts}
    assert total.straggler == max(hosts, key=lambda h: h.measurement.seconds).host
    assert total.spread_seconds == max(dict(total.host_seconds).values()) - min(dict(total.host_seconds).values())


def test_time_bound_hosts_add_up_to_the_aggregate():
    proc, jobs, pattern = recorded("tcp2-randread-timebased")
    total = results_of(proc, jobs, pattern)[-1]
    assert total.bw_sum_bytes == pytest.approx(total.measurement.bw_bytes, rel=0.03)


def test_banners_stand_before_the_json_and_are_not_problems():
    proc, _, _ = recorded("sock3-write-2jobs")
    assert proc.stdout.startswith("<vm> fixture.h")
    assert parse_document(proc.stdout)["fio version"] == "fio-3.33"
    lines = output_lines(proc)
    assert lines and all(not line.startswith(("{", "}", '"')) for line in lines)
    assert [r.ok for r in results_of(proc, *recorded("sock3-write-2jobs")[1:])] == [True] * 4


def test_global_options_object_before_339_and_list_after():
    assert global_options(parse_document(recorded("tcp2-read-1job")[0].stdout)) == {"": {}}
    proc, jobs, _ = recorded("fio341-sock2-write-global")
    per_host = global_options(parse_document(proc.stdout))
    assert per_host == {f"{j.host.address}:8765": {"thread": ""} for j in jobs}


def failed(name: str, index: int) -> tuple[list, str]:
    """The results of a failure fixture and the failed host's error."""
    proc, jobs, pattern = recorded(name)
    results = results_of(proc, jobs, pattern)
    return results, results[index].error or ""


def test_missing_socket_fails_that_host_only():
    results, error = failed("dead-sock", 1)
    assert [r.ok for r in results] == [True, False, False]
    assert error == f"no results from {results[1].host}: fio: connect; No such file or directory"
    assert results[2].error == f"aggregate incomplete: 1 of 2 hosts failed ({results[1].host})"


def test_refused_port_fails_that_host_and_fios_all_clients_is_short():
    results, error = failed("dead-tcp", 1)
    assert [r.ok for r in results] == [True, False, True, False]
    assert error == (
        "no results from 127.0.0.1:18768: fio: connect: Connection refused; fio: failed to connect to 127.0.0.1:18768"
    )
    document = parse_document(recorded("dead-tcp")[0].stdout)
    live = sum(r.measurement.bytes for r in results if r.ok)
    assert fio_aggregate(document)["write"]["io_bytes"] < live  # fio's aggregate missed a live job


def test_no_server_at_all():
    proc, jobs, pattern = recorded("all-dead")
    assert parse_document(proc.stdout) == {}
    results = results_of(proc, jobs, pattern)
    assert not any(r.ok for r in results)
    assert "fio: failed to connect to 127.0.0.1:18768" in results[0].error
    assert "fio: failed to connect" not in results[1].error  # that line names the other host
    assert "fio: connect; No such file or directory" in results[1].error  # lines naming no host go to each
    assert results[1].error.endswith("; fio failed: exit status 1")


def test_failed_job_on_one_host():
    results, error = failed("job-error", 1)
    assert [r.ok for r in results] == [True, False, False]
    assert error.startswith("fio job error 22 (Invalid argument) on 127.0.0.1:18766: <vm> fio: io_u error on file")
    assert "fixture.h1.0.0" in error and "fixture.h0" not in error


@pytest.mark.parametrize("name", ["killed-tcp", "killed-sock"])
def test_server_killed_mid_run(name):
    results, error = failed(name, 1)
    assert [r.ok for r in results] == [True, False, False]
    assert error.startswith(f"no results from {results[1].host}: client: host=")
    assert error.endswith(" disconnected")
    assert results[0].measurement.seconds == pytest.approx(3.0, abs=0.1)  # the survivor ran its full 3 s


def test_version_mismatch_fails_that_host():
    results, error = failed("version-mismatch", 1)
    assert [r.ok for r in results] == [True, False, False]
    assert "fio: client/server version mismatch (113 != 97)" in error


def test_client_killed_by_sigpipe_fails_every_host():
    _, jobs, pattern = recorded("sock2-write-1job")
    results = results_of(subprocess.CompletedProcess(["fio"], -13, "", ""), jobs, pattern)
    assert [r.error for r in results] == [
        f"no results from {j.host.label}: fio failed: killed by SIGPIPE" for j in jobs
    ] + ["aggregate incomplete: 2 of 2 hosts failed (" + ", ".join(j.host.label for j in jobs) + ")"]
    assert exit_line(1) == "fio failed: exit status 1"


def test_recorded_job_files_are_what_gdsbench_writes():
    for path in sorted(FIXTURES.glob("*.h?.fio")):
        name, options = job_options(path)
        assert path.read_text().endswith(render_section(name, options))


def test_client_argv_pairs_each_host_with_its_job_file():
    jobs = host_jobs(parse_hosts(["sock:/s0", "[::1]:9000"]), [("name", "x"), ("rw", "read")])
    argv = client_argv("fio", [(jobs[0], Path("a.fio")), (jobs[1], Path("b.fio"))])
    assert argv == [
        "fio",
        "--output-format=json+,normal",
        "--client=sock:/s0",
        "a.fio",
        "--client=ip6:::1,9000",
        "b.fio",
    ]
