"""Live fio client/server runs: servers this test starts on unix sockets and loopback ports, real small cases."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from gdsbench.cases import Pattern, Transfer
from gdsbench.hosts import AGGREGATE, Host, HostKind
from gdsbench.runners import fio_job, fio_output
from gdsbench.runners.base import RunContext
from gdsbench.runners.fio_client import ClientRun, fio_aggregate, parse_document, run_clients
from gdsbench.runners.fio_jobfile import HostJob, host_jobs
from tests.fio_servers import SilentHost, free_port
from tests.helpers import fio_case

pytestmark = [pytest.mark.needs_fio, pytest.mark.needs_odirect]
MiB = 1 << 20


def case_jobs(hosts: list[Host], directory: Path, pattern: Pattern, threads: int, runtime: float | None = None):
    """A real small case (16 MiB per job, 1 MiB blocks, psync) as each host's job, from fio's own argv."""
    case = fio_case(
        pattern=pattern, transfer=Transfer.CPU_ONLY, io_size=MiB, threads=threads, iodepth=1, ioengine="psync"
    )
    ctx = RunContext(directory=directory, file_size=16 * MiB, runtime=runtime)
    return host_jobs(hosts, fio_job.job_options(case, ctx))


def run(jobs: tuple[HostJob, ...], pattern: Pattern, tmp_path: Path, timeout: float = 60) -> ClientRun:
    return run_clients("fio", jobs, pattern, tmp_path / "jobs", timeout=timeout)


@pytest.mark.parametrize(("kind", "count", "threads"), [("sock", 2, 1), ("sock", 3, 2), ("tcp", 2, 2), ("tcp", 3, 1)])
def test_every_host_and_the_aggregate_match_fio(servers, tmp_path, kind, count, threads):
    hosts = [host for host, _ in servers(kind, count)]
    data = tmp_path / "data"
    data.mkdir()
    for pattern in (Pattern.WRITE, Pattern.READ):
        jobs = case_jobs(hosts, data, pattern, threads)
        outcome = run(jobs, pattern, tmp_path)
        document = parse_document(outcome.raw)
        section = fio_output.direction(pattern)
        *per_host, total = outcome.results
        for job, result in zip(jobs, per_host):
            entries = [e for e in document["client_stats"] if e["jobname"] == job.name]
            own = [e[section] for e in entries]
            assert result.ok, result.error
            assert len(own) == threads and all(e["hostname"] == job.host.address for e in entries)
            assert result.measurement.bytes == sum(s["io_bytes"] for s in own) == threads * 16 * MiB
            assert result.measurement.seconds == max(s["runtime"] for s in own) / 1000
            if threads == 1:
                assert result.measurement.bw_bytes == own[0]["bw_bytes"]
        fios = fio_aggregate(document)[section]
        assert total.host == AGGREGATE and total.ok
        assert (total.measurement.bytes, total.measurement.bw_bytes) == (fios["io_bytes"], fios["bw_bytes"])
        assert total.measurement.seconds == fios["runtime"] / 1000
    files = sorted(p for job in jobs for p in job.files())
    assert sorted(data.iterdir()) == files  # every host wrote files of its own in the shared folder
    assert all(p.stat().st_size == 16 * MiB for p in files)


@pytest.mark.parametrize("kind", ["sock", "tcp"])
def test_a_dead_host_fails_alone(servers, tmp_path, short_dir, kind):
    live = [host for host, _ in servers(kind, 2)]
    dead = Host(HostKind.SOCK, str(short_dir / "nobody.sock"))
    if kind == "tcp":
        dead = Host(HostKind.TCP, "127.0.0.1", free_port())
    hosts = [live[0], dead, live[1]]
    (tmp_path / "data").mkdir()
    outcome = run(case_jobs(hosts, tmp_path / "data", Pattern.WRITE, 1), Pattern.WRITE, tmp_path)
    assert [r.host for r in outcome.results] == [h.label for h in hosts] + [AGGREGATE]
    assert [r.ok for r in outcome.results] == [True, False, True, False]
    reason = "No such file or directory" if kind == "sock" else f"failed to connect to 127.0.0.1:{dead.port}"
    assert outcome.results[1].error.startswith(f"no results from {dead.label}: ")
    assert reason in outcome.results[1].error
    assert outcome.results[3].error == f"aggregate incomplete: 1 of 3 hosts failed ({dead.label})"


@pytest.mark.parametrize("kind", ["sock", "tcp"])
def test_a_server_killed_mid_run_is_a_failed_host_not_a_crash(servers, tmp_path, kind):
    started = servers(kind, 2)
    hosts = [host for host, _ in started]
    (tmp_path / "data").mkdir()
    jobs = case_jobs(hosts, tmp_path / "data", Pattern.READ, 1, runtime=3)
    killer = threading.Timer(1.0, os.killpg, (started[1][1].pid, signal.SIGKILL))
    killer.start()
    try:
        outcome = run(jobs, Pattern.READ, tmp_path)
    finally:
        killer.cancel()
    first, second, total = outcome.results
    assert first.ok and first.measurement.seconds == pytest.approx(3.0, abs=0.2)
    assert not second.ok and "disconnected" in second.error and not total.ok


def test_a_timeout_fails_every_host(servers, tmp_path):
    hosts = [host for host, _ in servers("sock", 2)]
    (tmp_path / "data").mkdir()
    outcome = run(case_jobs(hosts, tmp_path / "data", Pattern.READ, 1, runtime=30), Pattern.READ, tmp_path, timeout=1)
    assert [r.error for r in outcome.results] == ["fio timed out after 1s"] * 3


def test_fio_missing(tmp_path):
    jobs = host_jobs([Host(HostKind.SOCK, "/nonexistent.sock")], [("name", "x"), ("rw", "read")])
    outcome = run_clients(str(tmp_path / "no-fio"), jobs, Pattern.READ, tmp_path / "jobs", timeout=10)
    assert [r.error for r in outcome.results] == [f"cannot start {tmp_path / 'no-fio'}: not found"] * 2


@pytest.mark.parametrize("kind", ["sock", "tcp"])
def test_a_silent_host_is_named_within_the_handshake_deadline_and_the_others_run(servers, tmp_path, short_dir, kind):
    """A host that accepts the connection and never answers used to hold the case for its whole timeout and
    fail every host; now it fails alone, named, after the handshake deadline, and the live host measures."""
    import time

    from gdsbench.runners.fio_client import run_case

    [(live, _)] = servers(kind, 1)
    silent = SilentHost(kind, short_dir)
    data = tmp_path / "data"
    data.mkdir()
    case = fio_case(pattern=Pattern.WRITE, transfer=Transfer.CPU_ONLY, io_size=MiB, iodepth=1, ioengine="psync")
    ctx = RunContext(
        directory=data,
        file_size=16 * MiB,
        timeout=120,
        raw_dir=tmp_path / "raw",
        options={"handshake_timeout": 2.0},
        hosts=(silent.host, live),
    )
    try:
        started = time.monotonic()
        outcome = run_case("fio", case, ctx, fio_job.job_options(case, ctx))
        took = time.monotonic() - started
    finally:
        silent.stop()
    assert took < 30, f"the case waited {took:.0f}s"
    assert silent.accepted, "fio connected to the silent host"
    by_host = {r.host: r for r in outcome.results}
    assert list(by_host) == [silent.host.label, live.label, AGGREGATE]
    assert not by_host[silent.host.label].ok
    assert (
        f"fio server {silent.host.label} did not answer fio's handshake within 2s" in by_host[silent.host.label].error
    )
    assert by_host[live.label].ok and by_host[live.label].measurement.bytes == 16 * MiB
    assert not by_host[AGGREGATE].ok and silent.host.label in by_host[AGGREGATE].error


def test_when_no_host_answers_every_row_says_so(tmp_path, short_dir):
    from gdsbench.runners.fio_client import run_case

    silent = SilentHost("tcp", short_dir)
    case = fio_case(pattern=Pattern.READ, transfer=Transfer.CPU_ONLY, io_size=MiB, iodepth=1, ioengine="psync")
    ctx = RunContext(
        directory=tmp_path,
        file_size=16 * MiB,
        raw_dir=tmp_path / "raw",
        options={"handshake_timeout": 1.0},
        hosts=(silent.host,),
    )
    try:
        outcome = run_case("fio", case, ctx, fio_job.job_options(case, ctx))
    finally:
        silent.stop()
    message = f"no fio server answered fio's handshake within 1s: {silent.host.label}"
    assert [(r.host, r.ok, r.error) for r in outcome.results] == [
        (silent.host.label, False, message),
        (AGGREGATE, False, message),
    ]
