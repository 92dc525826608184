"""Multi-host sweeps end to end: fio servers started by the test (a unix socket and a loopback port), real
small cases through the sweep, rows per host and `all` against fio's own figures, a dead host, a server
stopped mid-sweep, --resume per host, and report, compare and qualify grouping by host."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench import compare, config, flags, qualify, report, results, sweep
from gdsbench.cases import Pattern
from gdsbench.cli import cli
from gdsbench.hosts import AGGREGATE, Host, HostKind
from gdsbench.runners import fio_output
from gdsbench.runners.fio_client import fio_aggregate, parse_document
from tests.fio_servers import SilentHost, free_port, stop_session
from tests.helpers import data_rows, write_config

pytestmark = [pytest.mark.needs_fio, pytest.mark.needs_odirect]
MiB = 1 << 20


def sweep_config(folder: Path, hosts: list[str], **overrides) -> Path:
    """A small real multi-host sweep: 16 MiB per job, write then read, size-bound."""
    matrix = {"engine": ["fio"], "pattern": ["write", "read"], "iodepth": [4], "threads": [2]}
    path = write_config(folder, **{"name": "fleet", "hosts": hosts, "matrix": matrix, **overrides})
    (folder / "target").mkdir(exist_ok=True)
    return path


def run_sweep(path: Path, csv_path: Path, done=frozenset(), between=None) -> list[dict]:
    """Run a sweep as the CLI does; `between(row)` runs after each yielded row."""
    loaded = config.load(path)
    ctx = sweep.context(loaded, csv_path)
    writer = results.ResultWriter(csv_path, sweep.columns(loaded))
    if not csv_path.with_suffix(".meta.json").exists():
        results.write_sidecar(csv_path, sweep.metadata(loaded, "run-1"))
    rows = []
    try:
        for row in sweep.run(loaded, writer, ctx, "run-1", done):
            if row["status"] == "fill":  # the fill step's progress, before the cases: not a run
                continue
            rows.append(row)
            if between:
                between(row)
    finally:
        writer.close()
    return rows


@pytest.fixture
def two(servers) -> list[tuple[Host, object]]:
    """A fio server on a unix socket and one on a loopback port."""
    return servers("sock", 1) + servers("tcp", 1)


def test_rows_per_host_and_all_match_fios_own_figures_and_report_compare_and_qualify_group_by_host(two, tmp_path):
    """One two-host sweep (the costly part) read three ways: its rows against fio's own figures; report, compare
    and qualify grouping by host; compare naming a host that a second, one-host run lacks."""
    hosts = [host.label for host, _ in two]
    csv_path = tmp_path / "r.csv"
    rows = run_sweep(sweep_config(tmp_path, hosts), csv_path)
    assert_rows_per_host_and_all_match_fios_own_figures(rows, csv_path, hosts)
    assert_report_compare_and_qualify_group_by_host(csv_path, hosts)
    assert_a_host_in_one_run_only_is_named_by_compare(csv_path, tmp_path, hosts)


def assert_rows_per_host_and_all_match_fios_own_figures(rows: list[dict], csv_path: Path, hosts: list[str]) -> None:
    """Each host's row and the `all` row of a run against the raw fio document they share."""
    assert [r["host"] for r in rows] == [*hosts, AGGREGATE] * 4
    assert [r["step_done"] for r in rows] == [False, False, True] * 4
    for start in range(0, 12, 3):
        run = rows[start : start + 3]
        assert len({r["raw_output"] for r in run}) == 1, "one raw file per run, shared by its rows"
        document = parse_document(Path(run[0]["raw_output"]).read_text())
        section = fio_output.direction(Pattern(run[0]["pattern"]))
        for index, row in enumerate(run[:2]):
            own = [e[section] for e in document["client_stats"] if e["jobname"].endswith(f".h{index}")]
            assert row["status"] == "ok" and row["bytes"] == sum(s["io_bytes"] for s in own) == 2 * 16 * MiB
            assert row["seconds"] == max(s["runtime"] for s in own) / 1000
            spread = (max(s["runtime"] for s in own) - min(s["runtime"] for s in own)) / 1000
            assert row["spread_seconds"] == pytest.approx(spread)
        total = fio_aggregate(document)[section]
        assert (run[2]["bytes"], run[2]["bw_bytes"]) == (total["io_bytes"], total["bw_bytes"])
        assert run[2]["straggler"] in hosts and run[2]["bw_sum_bytes"] == run[0]["bw_bytes"] + run[1]["bw_bytes"]
        assert run[2]["command"].startswith("fio --output-format=json+,normal --client=sock:")
    assert len(data_rows(csv_path)) == 12
    meta = json.loads(csv_path.with_suffix(".meta.json").read_text())
    assert meta["settings"]["hosts"] == hosts
    assert all(meta["fingerprint"]["hosts"][h]["collected"].startswith("here") for h in hosts)


def assert_report_compare_and_qualify_group_by_host(csv_path: Path, hosts: list[str]) -> None:
    """The text report titles and stragglers, compare's table and qualify's per-host checks, by host."""
    frame = results.load([csv_path])
    text = report.render(frame, None, "text")
    titles = [line.strip() for line in text.splitlines() if line.strip().startswith("host=")]
    assert titles[:3] == [f"host={h} pattern=write" for h in [*hosts, AGGREGATE]]
    for pattern, fleet in frame[frame["host"] == AGGREGATE].groupby("pattern"):
        spreads = sorted(fleet["spread_seconds"])
        named = f"straggler host=all pattern={pattern}: slowest host " in text
        assert named == (spreads[(len(spreads) - 1) // 2] > 0), "the median repetition's straggler, if any"
    same = compare.compare_files(csv_path, csv_path, allowed=frozenset(flags.RULES))  # judged whatever the suite did
    assert sorted(set(same.table["host"])) == sorted([*hosts, AGGREGATE]) and set(same.table["verdict"]) == {"same"}
    checks = qualify.parse_checks(
        "q",
        [
            {"name": "each host", "where": {"pattern": "read"}, "min_bw": "1MiB/s", "per_host": True},
            {"name": "fleet", "where": {"pattern": "read"}, "min_bw": "1MiB/s", "host": "all"},
        ],
        allow_flags=["too_short", "unstable", "busy_machine"],
    )
    outcomes = qualify.evaluate_all(checks, flags.annotate(frame))
    assert [o.name for o in outcomes] == [f"each host [{h}]" for h in hosts] + ["fleet"]
    assert [o.status for o in outcomes] == ["pass"] * 3


def assert_a_host_in_one_run_only_is_named_by_compare(base: Path, tmp_path: Path, hosts: list[str]) -> None:
    """A one-host run compared with the two-host `base`: the missing host is named."""
    new = tmp_path / "new.csv"
    run_sweep(sweep_config(tmp_path, hosts[:1], repetitions=1), new)
    result = compare.compare_files(base, new)
    assert f"host {hosts[1]} only in BASE" in result.warnings
    assert any(name.endswith(f" on {hosts[1]}") for name in result.only_base)


def test_each_host_has_its_time_series(two, tmp_path):
    hosts = [host.label for host, _ in two]
    path = sweep_config(
        tmp_path, hosts, runtime="1s", series="200ms", repetitions=1, matrix={"engine": ["fio"], "pattern": ["read"]}
    )
    run_sweep(path, tmp_path / "r.csv")
    table = results.load_series([tmp_path / "r.csv"])
    assert sorted(table["host"].unique()) == sorted(hosts), "every host's logs came back, socket or TCP"
    assert table.groupby("host")["bw_bytes"].count().min() >= 3 and (table["time_s"] <= 1.3).all()
    assert not [p for p in (tmp_path / "r.raw" / "series").rglob("*") if p.is_file()], (
        "fio's logs were read and removed"
    )


def test_a_dead_host_is_a_failed_row_and_the_sweep_goes_on(servers, short_dir, tmp_path):
    live = [host for host, _ in servers("sock", 1)]
    dead = f"127.0.0.1:{free_port()}"
    rows = run_sweep(sweep_config(tmp_path, [live[0].label, dead], repetitions=1), tmp_path / "r.csv")
    assert [(r["host"], r["status"]) for r in rows] == [(live[0].label, "ok"), (dead, "failed"), ("all", "failed")] * 2
    assert "Connection refused" in rows[1]["error"] or "failed to connect" in rows[1]["error"]
    assert rows[2]["error"] == f"aggregate incomplete: 1 of 2 hosts failed ({dead})"


def test_a_silent_host_fails_alone_named_within_the_configs_handshake_timeout(servers, short_dir, tmp_path):
    """A host that accepts and never answers (a hung server) is left out after the config's
    handshake_timeout: its row names it, the live host's row has fio's own figures, the sweep does not wait
    out the case timeout (60 s here, 603 s by default)."""
    live = servers("sock", 1)[0][0]
    silent = SilentHost("tcp", short_dir)
    hosts = [silent.host.label, live.label]
    matrix = {"engine": ["fio"], "pattern": ["write"]}
    path = sweep_config(tmp_path, hosts, repetitions=1, timeout="60s", handshake_timeout="2s", matrix=matrix)
    started = time.monotonic()
    try:
        rows = run_sweep(path, tmp_path / "r.csv")
    finally:
        silent.stop()
    assert time.monotonic() - started < 30, "the case did not wait for the silent host"
    assert silent.accepted, "the silent host was reached"
    assert [(r["host"], r["status"]) for r in rows] == [(hosts[0], "failed"), (hosts[1], "ok"), (AGGREGATE, "failed")]
    assert rows[0]["error"].startswith(f"fio server {hosts[0]} did not answer fio's handshake within 2s")
    assert hosts[0] in rows[2]["error"]
    document = parse_document(Path(rows[1]["raw_output"]).read_text())
    own = [e["write"] for e in document["client_stats"] if e["hostname"] == live.address]
    assert rows[1]["bytes"] == sum(s["io_bytes"] for s in own) == 16 * MiB
    assert rows[1]["bw_bytes"] > 0
    assert rows[1]["bw_bytes"] == pytest.approx(rows[1]["bytes"] / rows[1]["seconds"], rel=0.01)
    assert [(r["host"], r["status"]) for r in data_rows(tmp_path / "r.csv")] == [(r["host"], r["status"]) for r in rows]


def test_a_server_stopped_mid_sweep_fails_its_rows_only(two, tmp_path):
    hosts = [host.label for host, _ in two]
    victim = two[1][1]

    def stop_after_first_run(row):
        if row["host"] == AGGREGATE and row["pattern"] == "write" and row["repetition"] == 1:
            stop_session(victim)

    rows = run_sweep(sweep_config(tmp_path, hosts), tmp_path / "r.csv", between=stop_after_first_run)
    assert [r["status"] for r in rows[:3]] == ["ok", "ok", "ok"]
    later = rows[3:]
    assert len(later) == 9, "every later run still recorded"
    assert {r["status"] for r in later if r["host"] == hosts[0]} == {"ok"}
    assert {r["status"] for r in later if r["host"] != hosts[0]} == {"failed"}


def test_resume_reruns_only_the_hosts_without_an_ok_row(servers, short_dir, tmp_path):
    live = servers("tcp", 1)[0][0]
    missing = Host(HostKind.SOCK, str(short_dir / "late.sock"))
    hosts = [live.label, missing.label]
    path = sweep_config(tmp_path, hosts, repetitions=1, matrix={"engine": ["fio"], "pattern": ["write"]})
    csv_path = tmp_path / "r.csv"
    run_sweep(path, csv_path)
    first = [(r["host"], r["status"]) for r in data_rows(csv_path)]
    assert first == [(live.label, "ok"), (missing.label, "failed"), ("all", "failed")]
    before = data_rows(csv_path)[0]
    # The late server starts at the address the config names; --resume runs it alone.
    started = servers_at(missing)
    try:
        loaded = config.load(path)
        done = sweep.resume(loaded, csv_path)
        assert [(s.hosts, s.whole) for s in sweep.schedule(loaded, done)] == [((missing,), False)]
        rows = run_sweep(path, csv_path, done)
    finally:
        stop_session(started)
    assert [(r["host"], r["status"]) for r in rows] == [(missing.label, "ok")], "no `all` row for a partial rerun"
    after = data_rows(csv_path)
    assert [(r["host"], r["status"]) for r in after] == [(live.label, "ok"), ("all", "failed"), (missing.label, "ok")]
    assert after[0] == before, "the live host's row is kept as it was"
    assert sweep.schedule(config.load(path), results.done_keys(csv_path)) == [], "nothing left to run"


def servers_at(host: Host):
    """Start one fio server at a given host (for the resume test); the caller stops it."""
    import subprocess

    from gdsbench.serve import server_argv, wait_listening

    proc = subprocess.Popen(
        server_argv("fio", host), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    assert wait_listening(host, lambda: proc.poll() is None)
    return proc


def test_a_warmup_failing_everywhere_skips_the_case_failing_somewhere_does_not(servers, short_dir, tmp_path):
    live = servers("sock", 1)[0][0]
    dead = Host(HostKind.SOCK, str(short_dir / "never.sock")).label
    matrix = {"engine": ["fio"], "pattern": ["write"], "io_size": ["1000", "1M"]}  # 1000 B: EINVAL with O_DIRECT
    rows = run_sweep(
        sweep_config(tmp_path, [live.label, dead], repetitions=1, warmup=1, matrix=matrix), tmp_path / "r.csv"
    )
    einval = [r for r in rows if r["io_size"] == 1000]
    assert [(r["host"], r["repetition"], r["status"]) for r in einval] == [
        (live.label, 0, "failed"),
        (dead, 0, "failed"),
    ]
    fine = [(r["host"], r["repetition"], r["status"]) for r in rows if r["io_size"] == MiB]
    assert fine == [(AGGREGATE, 0, "warmup"), (live.label, 1, "ok"), (dead, 1, "failed"), (AGGREGATE, 1, "failed")]


def test_cli_sweep_with_hosts_and_a_config_error(two, tmp_path):
    hosts = [host.label for host, _ in two]
    path = sweep_config(tmp_path, hosts, repetitions=1, matrix={"engine": ["fio"], "pattern": ["read"]})
    result = CliRunner().invoke(cli, ["sweep", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    [csv_path] = (tmp_path / "out").glob("*.csv")
    assert [r["host"] for r in data_rows(csv_path)] == [*hosts, AGGREGATE]
    (tmp_path / "bad").mkdir()
    bad = sweep_config(tmp_path / "bad", ["node1", "all"])
    result = CliRunner().invoke(cli, ["sweep", str(bad), "--dry-run"])
    assert result.exit_code == 2 and "hosts[1]: expected a host other than 'all'" in result.output
    dry = CliRunner().invoke(cli, ["sweep", str(path), "--dry-run"])
    assert dry.exit_code == 0 and f"--client={two[0][0].spec}" in dry.output


def test_timeout_stops_the_servers_jobs(two, tmp_path):
    """A run past its timeout is SIGINTed: fio's client stops every server's job (it does not run on)."""
    hosts = [host.label for host, _ in two]
    path = sweep_config(
        tmp_path, hosts, runtime="60s", timeout="2s", repetitions=1, matrix={"engine": ["fio"], "pattern": ["read"]}
    )
    started = time.monotonic()
    rows = run_sweep(path, tmp_path / "r.csv")
    assert {r["status"] for r in rows} == {"failed"} and "timed out after 2s" in rows[0]["error"]
    # the whole sweep (start-up, fill, probes, 2 s, SIGINT's grace) on a loaded 2-core machine: far below 60 s
    assert time.monotonic() - started < 40, "the client stopped on SIGINT, not after its 60 s"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_children(proc.pid) for _, proc in two):
        time.sleep(0.1)
    assert not any(_children(proc.pid) for _, proc in two), "the servers' jobs stopped with the client"


def _children(pid: int) -> list[str]:
    """The processes whose parent is `pid` (a fio server's job processes)."""
    return [p for p in os.listdir("/proc") if p.isdigit() and _parent(p) == pid]


def _parent(pid: str) -> int:
    """The parent pid of a process (0 when it went away meanwhile)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0
