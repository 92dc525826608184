"""fio client/server runs: one `fio --client=h1 job1 --client=h2 job2` per case, a result per host plus `all`.

What fio 3.33 does (recorded in tests/data/fio-client/): banner lines (`<server> name: (g=0): rw=...`)
and client messages stand before the JSON on stdout; `client_stats` holds each host's jobs, tagged with
`hostname` and `port`, and an "All clients" entry (anywhere in the list, carrying some server's
hostname) only when more than one result was expected. A host that cannot be reached or speaks another
protocol version has no entries at all, and fio still exits 0; a server killed mid-run has none either
(exit 1). "All clients" is then wrong: a host dropped before it started lowers fio's expected count, so
the entry is emitted before the last result arrives and misses it. The aggregate is therefore computed
here from the hosts' entries (bytes summed, runtime the max: fio's rule), and only when every host
reported. A client writing to a server that closed the connection (other version, killed) dies of
SIGPIPE, printing nothing (half the runs against a mismatched host here), so fio runs with it ignored.

`run_case` is the sweep's entry: one case's job options -> each host's job file under
`<raw_dir>/jobs`, the client run in `<raw_dir>/series` (where the servers' logs land), each host's
time series read back. Files on remote hosts stay there (only local hosts' files are tracked for
cleanup; `unlink: true` has fio remove them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench.cases import Case, Pattern
from gdsbench.errors import GdsbenchError
from gdsbench.hosts import AGGREGATE, Host, HostKind
from gdsbench.runners import fio_series
from gdsbench.runners.base import LiveStatus, Measurement, RunContext, run_tool
from gdsbench.runners.fio_jobfile import HostJob, Option, host_jobs, write_job_files
from gdsbench.runners.fio_live import ClientStream
from gdsbench.runners.fio_output import direction, measure
from gdsbench.runners.fio_probe import HANDSHAKE_TIMEOUT, silent_hosts

ALL_CLIENTS = "All clients"
MESSAGE_LIMIT = 400
#: Lines of fio's client output that report a problem (the rest are banners: rw=..., Starting, Laying out).
_PROBLEM = re.compile(r"fio: |error|fail|mismatch|disconnect|timeout|timed out|refused|no such", re.IGNORECASE)


@dataclass(frozen=True)
class HostResult:
    """One host's figures (or the aggregate's, host `all`), or why there are none."""

    host: str
    measurement: Measurement | None = None
    error: str | None = None
    job_seconds: tuple[float, ...] = ()  # each job's runtime; the aggregate's are every host's jobs
    host_seconds: tuple[tuple[str, float], ...] = ()  # aggregate only: each host's slowest job
    bw_sum_bytes: float | None = None  # aggregate only: the hosts' bandwidths added up

    @property
    def ok(self) -> bool:
        """True when the host reported figures."""
        return self.measurement is not None

    @property
    def spread_seconds(self) -> float | None:
        """Time between the first and the last finished job (across hosts for the aggregate)."""
        times = [s for _, s in self.host_seconds] if self.host_seconds else list(self.job_seconds)
        return max(times) - min(times) if len(times) > 1 else None

    @property
    def straggler(self) -> str | None:
        """The aggregate's slowest host, by its slowest job."""
        return max(self.host_seconds, key=lambda pair: pair[1])[0] if self.host_seconds else None

    def row(self) -> dict[str, Any]:
        """Result columns: host, status, error, the measurement's figures, spread and straggler (the
        slowest host for the aggregate, the slowest job for a host)."""
        figures = self.measurement.row() if self.measurement else {}
        status = "ok" if self.ok else "failed"
        straggler = self.straggler or figures.get("straggler")
        extra = {"spread_seconds": self.spread_seconds, "straggler": straggler, "bw_sum_bytes": self.bw_sum_bytes}
        return {"host": self.host, "status": status, "error": self.error, **figures, **extra}


@dataclass(frozen=True)
class ClientRun:
    """One client-mode fio run: the exact command, fio's output, and a result per host plus the aggregate."""

    command: tuple[str, ...]
    raw: str
    results: tuple[HostResult, ...]


def client_argv(binary: str, job_files: Sequence[tuple[HostJob, Path]]) -> list[str]:
    """`fio --output-format=json+,normal --client=<h1> <job1> --client=<h2> <job2> ...` as an argument list
    (the normal output, before the JSON, shows each host's results as they arrive: fio_live.ClientStream)."""
    argv = [binary, "--output-format=json+,normal"]
    for job, path in job_files:
        argv += [f"--client={job.host.spec}", str(path)]
    return argv


def job_paths(jobs: Sequence[HostJob], folder: Path, stem: str) -> list[Path]:
    """Where each host's job file goes: `<folder>/<stem>.h<index>.fio` (absolute: the client may run elsewhere)."""
    return [folder.resolve() / f"{stem}.h{index}.fio" for index in range(len(jobs))]


def run_clients(
    binary: str,
    jobs: Sequence[HostJob],
    pattern: Pattern,
    folder: Path,
    timeout: float,
    stem: str = "case",
    cwd: Path | None = None,
    on_status: Callable[[LiveStatus], None] | None = None,
) -> ClientRun:
    """Write each host's job file into `folder`, run fio once for all hosts (in `cwd`), and measure every host.

    A failure of one host is that host's failed result; a failure of the whole run (fio missing,
    timeout) fails every host. Ctrl-C propagates (fio's client stops every server's job on SIGINT).
    """
    write_job_files(jobs, folder, stem)
    argv = client_argv(binary, list(zip(jobs, job_paths(jobs, folder, stem))))
    if shutil.which(binary) is None:
        return ClientRun(tuple(argv), "", failed_all(jobs, f"cannot start {binary}: not found"))
    stream = ClientStream(on_status, {job.name: job.host.label for job in jobs})
    try:
        proc = run_tool(argv, timeout=timeout, keep_sigpipe_ignored=True, cwd=cwd, on_stdout=stream.feed)
    except GdsbenchError as exc:
        return ClientRun(tuple(argv), "", failed_all(jobs, str(exc)))
    return ClientRun(tuple(argv), proc.stdout + proc.stderr, tuple(results_of(proc, jobs, pattern)))


def case_argv(binary: str, ctx: RunContext, options: Sequence[Option]) -> list[str]:
    """The client command one case runs (its job files under `<raw_dir>/jobs`), for --dry-run and the rows."""
    jobs = host_jobs(ctx.hosts, options)
    folder = (ctx.raw_dir or Path(".")) / "jobs"
    return client_argv(binary, list(zip(jobs, job_paths(jobs, folder, ctx.run_stem))))


def run_case(binary: str, case: Case, ctx: RunContext, options: Sequence[Option]) -> ClientRun:
    """Run one case on every host that answers fio's handshake in time (fio_probe): a silent host's rows
    fail naming it, and with it the aggregate (it is not the fleet's); the others' rows are kept."""
    folder = (ctx.raw_dir or Path(".")) / "jobs"
    deadline = float(ctx.options.get(HANDSHAKE_TIMEOUT.name) or HANDSHAKE_TIMEOUT.default)
    silent = silent_hosts(binary, ctx.hosts, deadline, folder)
    hosts = [host for host in ctx.hosts if host.label not in silent]
    if not hosts:
        message = f"no fio server answered fio's handshake within {deadline:g}s: {', '.join(silent)}"
        return ClientRun((), "", failed_all(host_jobs(ctx.hosts, options), message))
    run = _run_on(binary, case, ctx, options, hosts, folder)
    if not silent:
        return run
    kept = {result.host: result for result in run.results if result.host != AGGREGATE}
    results = [kept.get(host.label) or HostResult(host.label, error=silent[host.label]) for host in ctx.hosts]
    aggregate = HostResult(AGGREGATE, error=f"no aggregate: {', '.join(silent)} did not answer fio's handshake")
    return dataclasses.replace(run, results=(*results, aggregate))


def _run_on(
    binary: str, case: Case, ctx: RunContext, options: Sequence[Option], hosts: Sequence[Host], folder: Path
) -> ClientRun:
    """Run one case on these hosts: local hosts' files tracked for cleanup, each host's time series read back."""
    jobs = host_jobs(hosts, options)
    ctx.resources.track_new([path for job in jobs if job.host.is_local for path in job.files()])
    series = fio_series.client_folder(ctx)
    if series is not None:
        for job in jobs:
            fio_series.prepare_client(series, f"{ctx.run_stem}.h{jobs.index(job)}", case["threads"], job.host)
    try:
        run = run_clients(
            binary, jobs, case.pattern, folder, ctx.timeout, ctx.run_stem, cwd=series, on_status=ctx.on_status
        )
    finally:
        found = _series(ctx, series, jobs, case["threads"])
    for label, facts in server_facts(run.raw, jobs).items():
        ctx.host_facts.setdefault(label, {}).update(facts)
    return dataclasses.replace(run, results=tuple(_with_series(r, found.get(r.host, ())) for r in run.results))


def server_facts(raw: str, jobs: Sequence[HostJob]) -> dict[str, dict[str, Any]]:
    """What fio's servers say of themselves: each host's name (the `<name>` of its banner lines, found by
    its job name) and the disks its jobs used (`disk_util`, by hostname and port)."""
    document = parse_document(raw)
    facts: dict[str, dict[str, Any]] = {}
    for job in jobs:
        banner = re.search(rf"^<([^>]*)> {re.escape(job.name)}: ", raw, re.MULTILINE)
        disks = [
            str(d.get("name"))
            for d in document.get("disk_util", [])
            if job.host.reports_as(str(d.get("hostname")), int(d.get("port", 0)))
        ]
        if banner or disks:
            facts[job.host.label] = {"server_hostname": banner.group(1) if banner else None, "disks": disks}
    return facts


def _series(ctx: RunContext, folder: Path | None, jobs: Sequence[HostJob], threads: int) -> dict[str, tuple]:
    """Each host's samples from the logs its server sent (none when the sweep keeps no series)."""
    if folder is None:
        return {}
    return {
        job.host.label: fio_series.collect(folder / f"{ctx.run_stem}.h{index}", threads, job.host.address)
        for index, job in enumerate(jobs)
    }


def _with_series(result: HostResult, samples: tuple) -> HostResult:
    """A host's result carrying its time series."""
    if result.measurement is None or not samples:
        return result
    return dataclasses.replace(result, measurement=dataclasses.replace(result.measurement, series=samples))


def results_of(proc: subprocess.CompletedProcess, jobs: Sequence[HostJob], pattern: Pattern) -> list[HostResult]:
    """Each host's result and the aggregate from a finished client-mode fio run."""
    document = parse_document(proc.stdout)
    lines = output_lines(proc) + ([] if document else [exit_line(proc.returncode)])
    return client_stats(document, jobs, pattern, lines)


def exit_line(returncode: int) -> str:
    """fio's exit status as a message line: `fio failed: exit status 1`, `fio failed: killed by SIGPIPE`."""
    if returncode < 0:
        return f"fio failed: killed by {signal.Signals(-returncode).name}"
    return f"fio failed: exit status {returncode}"


def failed_all(jobs: Sequence[HostJob], message: str) -> tuple[HostResult, ...]:
    """Every host and the aggregate failed with one message."""
    return (*(HostResult(job.host.label, error=message) for job in jobs), HostResult(AGGREGATE, error=message))


def parse_document(stdout: str) -> dict[str, Any]:
    """fio's JSON document after the banner lines, or {} when fio printed none (every host failed)."""
    span = _json_span(stdout)
    if span is None:
        return {}
    document = json.loads(stdout[span[0] : span[1]])
    return document if isinstance(document, dict) else {}


def output_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """fio's non-JSON output lines: stderr, and stdout before and after the JSON document."""
    stdout = proc.stdout or ""
    start, end = _json_span(stdout) or (len(stdout), len(stdout))
    text = "\n".join((proc.stderr or "", stdout[:start], stdout[end:]))
    return [line.strip() for line in text.splitlines() if line.strip()]


def _json_span(stdout: str) -> tuple[int, int] | None:
    """Where fio's JSON document stands in stdout: from the first line that starts with '{' to its end."""
    match = re.search(r"^\{", stdout, re.MULTILINE)
    if match is None:
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(stdout, match.start())
    except json.JSONDecodeError:
        return None
    return match.start(), end


def client_stats(
    document: dict[str, Any], jobs: Sequence[HostJob], pattern: Pattern, lines: Sequence[str] = ()
) -> list[HostResult]:
    """A result per host, in the jobs' order, then the aggregate (`all`), from a client-mode JSON document."""
    entries = [e for e in document.get("client_stats", []) if e.get("jobname") != ALL_CLIENTS]
    problems = [line for line in lines if _PROBLEM.search(line)]
    per_host = [_entries_of(job, entries) for job in jobs]
    results = [host_result(job, own, pattern, problems, jobs) for job, own in zip(jobs, per_host)]
    return [*results, aggregate(results, per_host, pattern)]


def _entries_of(job: HostJob, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client_stats entries one host reported, by (hostname, port)."""
    return [e for e in entries if job.host.reports_as(str(e.get("hostname")), int(e.get("port", 0)))]


def host_result(
    job: HostJob, entries: list[dict[str, Any]], pattern: Pattern, problems: Sequence[str], jobs: Sequence[HostJob]
) -> HostResult:
    """One host's figures from its own entries (fio's group rule, as for standalone fio), or its failure."""
    label = job.host.label
    if not entries:
        return HostResult(label, error=f"no results from {label}: {host_message(job, problems, jobs)}")
    errors = sorted({int(e["error"]) for e in entries if e.get("error")})
    if errors:
        codes = ", ".join(f"{code} ({os.strerror(code)})" for code in errors)
        return HostResult(label, error=_limit(f"fio job error {codes} on {label}: {host_message(job, problems, jobs)}"))
    try:
        measurement = measure({"jobs": entries}, pattern)
    except GdsbenchError as exc:
        return HostResult(label, error=f"{label}: {exc}")
    return HostResult(label, measurement, job_seconds=runtimes(entries, pattern))


def runtimes(entries: list[dict[str, Any]], pattern: Pattern) -> tuple[float, ...]:
    """Each job's runtime in seconds (jobs that moved no data in this direction left out)."""
    runtimes = (e[direction(pattern)].get("runtime", 0) for e in entries)
    return tuple(ms / 1000 for ms in runtimes if ms > 0)


def aggregate(results: list[HostResult], entries: list[list[dict[str, Any]]], pattern: Pattern) -> HostResult:
    """The `all` result: every host's jobs as one group (bytes summed, runtime the max), if all hosts reported."""
    failed = [r.host for r in results if not r.ok]
    if failed:
        return HostResult(
            AGGREGATE, error=f"aggregate incomplete: {len(failed)} of {len(results)} hosts failed ({', '.join(failed)})"
        )
    measurement = measure({"jobs": [e for host in entries for e in host]}, pattern)
    return HostResult(
        AGGREGATE,
        measurement,
        job_seconds=tuple(s for r in results for s in r.job_seconds),
        host_seconds=tuple((r.host, r.measurement.seconds) for r in results if r.measurement),
        bw_sum_bytes=sum(r.measurement.bw_bytes for r in results if r.measurement),
    )


def host_message(job: HostJob, problems: Sequence[str], jobs: Sequence[HostJob]) -> str:
    """fio's lines about one host (its job name, address or socket) and those naming no host, in fio's order."""
    chosen = [line for line in problems if mentions(line, job) or not any(mentions(line, o) for o in jobs)]
    return _limit("; ".join(dict.fromkeys(chosen)) if chosen else "fio printed no error")


def mentions(line: str, job: HostJob) -> bool:
    """True when a line of fio's output names this host's job, socket, or address (and port, if given)."""
    if re.search(re.escape(job.name) + r"(?![\w])", line):
        return True
    host = job.host
    if host.kind is HostKind.SOCK:
        return host.address in line
    pattern = rf"(?<![\w.:]){re.escape(host.address)}(?::(\d+))?(?![\w.])"
    return any(m.group(1) is None or int(m.group(1)) == host.port for m in re.finditer(pattern, line))


def fio_aggregate(document: dict[str, Any]) -> dict[str, Any] | None:
    """fio's own "All clients" entry (found by job name, never by host), or None when fio printed none."""
    return next((e for e in document.get("client_stats", []) if e.get("jobname") == ALL_CLIENTS), None)


def global_options(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """`global options` per host label key `hostname:port`: fio <= 3.38 prints one object, >= 3.39 a list."""
    value = document.get("global options", {})
    if isinstance(value, dict):
        return {"": value}
    return {
        f"{o.get('hostname')}:{o.get('port')}": {k: v for k, v in o.items() if k not in ("hostname", "port")}
        for o in value
    }


def _limit(text: str) -> str:
    """A message cut to MESSAGE_LIMIT characters."""
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."
