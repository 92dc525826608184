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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench.cases import Pattern
from gdsbench.errors import GdsbenchError
from gdsbench.hosts import AGGREGATE, HostKind
from gdsbench.runners.base import Measurement, run_tool
from gdsbench.runners.fio import direction, measure
from gdsbench.runners.fio_jobfile import HostJob, write_job_files

ALL_CLIENTS = "All clients"
#: Runs argv[1:] with SIGPIPE ignored (kept across exec); run_tool's Popen restores its default otherwise.
_NO_SIGPIPE = (
    "import os, signal, sys; signal.signal(signal.SIGPIPE, signal.SIG_IGN); os.execvp(sys.argv[1], sys.argv[1:])"
)
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
        return max(times) - min(times) if times else None

    @property
    def straggler(self) -> str | None:
        """The aggregate's slowest host, by its slowest job."""
        return max(self.host_seconds, key=lambda pair: pair[1])[0] if self.host_seconds else None

    def row(self) -> dict[str, Any]:
        """Result columns: host, status, error, the measurement's figures, spread and straggler."""
        figures = self.measurement.row() if self.measurement else {}
        status = "ok" if self.ok else "failed"
        extra = {"spread_seconds": self.spread_seconds, "straggler": self.straggler, "bw_sum_bytes": self.bw_sum_bytes}
        return {"host": self.host, "status": status, "error": self.error, **figures, **extra}


@dataclass(frozen=True)
class ClientRun:
    """One client-mode fio run: the exact command, fio's output, and a result per host plus the aggregate."""

    command: tuple[str, ...]
    raw: str
    results: tuple[HostResult, ...]


def client_argv(binary: str, job_files: Sequence[tuple[HostJob, Path]]) -> list[str]:
    """`fio --output-format=json+ --client=<h1> <job1> --client=<h2> <job2> ...` as an argument list."""
    argv = [binary, "--output-format=json+"]
    for job, path in job_files:
        argv += [f"--client={job.host.spec}", str(path)]
    return argv


def run_clients(
    binary: str, jobs: Sequence[HostJob], pattern: Pattern, folder: Path, timeout: float, stem: str = "case"
) -> ClientRun:
    """Write each host's job file into `folder`, run fio once for all hosts, and measure every host.

    A failure of one host is that host's failed result; a failure of the whole run (fio missing,
    timeout) fails every host. Ctrl-C propagates (fio's client stops every server's job on SIGINT).
    """
    paths = write_job_files(jobs, folder, stem)
    argv = client_argv(binary, list(zip(jobs, paths)))
    if shutil.which(binary) is None:
        return ClientRun(tuple(argv), "", failed_all(jobs, f"cannot start {binary}: not found"))
    try:
        proc = run_tool(ignoring_sigpipe(argv), timeout=timeout)
    except GdsbenchError as exc:  # the message names the shim's python: name fio instead
        message = str(exc).replace(Path(sys.executable).name, Path(binary).name, 1)
        return ClientRun(tuple(argv), "", failed_all(jobs, message))
    return ClientRun(tuple(argv), proc.stdout + proc.stderr, tuple(results_of(proc, jobs, pattern)))


def results_of(proc: subprocess.CompletedProcess, jobs: Sequence[HostJob], pattern: Pattern) -> list[HostResult]:
    """Each host's result and the aggregate from a finished client-mode fio run."""
    document = parse_document(proc.stdout)
    lines = output_lines(proc) + ([] if document else [exit_line(proc.returncode)])
    return client_stats(document, jobs, pattern, lines)


def ignoring_sigpipe(argv: list[str]) -> list[str]:
    """argv run through a Python exec shim that ignores SIGPIPE (until run_tool can do it itself)."""
    return [sys.executable, "-I", "-S", "-c", _NO_SIGPIPE, *argv]


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
