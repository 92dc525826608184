"""fio's periodic status while a case runs (`--status-interval` with JSON output): live figures for the display.

With `--status-interval=N --output-format=json+`, standalone fio prints a whole JSON document every N
seconds (each job's figures so far: io_bytes, runtime, total_ios) and the final one at the end, each
from a `{` line to a `}` line at column 0 (fio 3.33, tests/data/fio/live/status-interval.txt).
`StatusStream` parses each document as it arrives and reports the rates over the last interval;
`final_only` keeps the last document (the results) and fio's other lines, so the raw output kept and
the parser see what a run without periodic status prints.

fio's client (multi-host) prints no periodic status in JSON mode: the servers' periodic figures reach
it only when a server itself was started with --status-interval, and then only at the end, as extra
`client_stats` entries; its ETA line (`--eta=always`) sums the hosts. So a multi-host run also asks
for fio's normal output (`--output-format=json+,normal`), which the client prints for each host's jobs
as their results arrive, before the JSON document at the end: `ClientStream` reports each host's
jobs as they finish (`<name>.h<i>: (groupid=...` then `  write: IOPS=452, BW=...(907MiB/2004msec)`).
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Callable
from typing import Any, NamedTuple

from gdsbench.cases import Pattern
from gdsbench.runners.base import LiveStatus
from gdsbench.units import parse_size

#: A top-level JSON document of fio's output: fio indents everything but its outer braces.
_DOCUMENT = re.compile(r"^\{\n.*?^\}$\n?", re.MULTILINE | re.DOTALL)
#: fio's normal output: a job's header (`name: (groupid=0, jobs=1): err= 0: ...`) and its figures line.
_JOB_HEADER = re.compile(r"^(\S+): \(groupid=\d+, jobs=\d+\)")
_FIGURES = re.compile(r"^\s+(read|write): IOPS=([\d.]+)([kMG]?), BW=.*?\((\d+(?:\.\d+)?[KMGTP]?i?B)/(\d+)msec\)")
_SCALE = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}


def final_only(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    """fio's output with every JSON document but the last (the final results) left out."""
    documents = list(_DOCUMENT.finditer(proc.stdout))
    if len(documents) < 2:
        return proc
    kept, start = [], 0
    for match in documents[:-1]:
        kept.append(proc.stdout[start : match.start()])
        start = match.end()
    kept.append(proc.stdout[start:])
    return subprocess.CompletedProcess(proc.args, proc.returncode, "".join(kept), proc.stderr)


class Totals(NamedTuple):
    """What a status document says the jobs have done so far: the longest runtime, bytes and I/Os."""

    seconds: float
    bytes: int
    ios: int


def totals(document: dict[str, Any], pattern: Pattern) -> Totals | None:
    """The jobs' figures so far in one status document (None before any I/O)."""
    section = "write" if pattern.is_write else "read"
    stats = [job.get(section, {}) for job in document.get("jobs", [])]
    runtime = max((s.get("runtime", 0) for s in stats), default=0) / 1000
    if runtime <= 0:
        return None
    return Totals(
        runtime, sum(int(s.get("io_bytes", 0)) for s in stats), sum(int(s.get("total_ios", 0)) for s in stats)
    )


def live_status(now: Totals, before: Totals | None) -> LiveStatus:
    """Bytes so far, and bandwidth and IOPS over the interval since `before` (since the start without one)."""
    start = before if before is not None and now.seconds > before.seconds else Totals(0.0, 0, 0)
    elapsed = now.seconds - start.seconds
    return LiveStatus(
        seconds=now.seconds,
        bytes=now.bytes,
        bw_bytes=(now.bytes - start.bytes) / elapsed,
        iops=(now.ios - start.ios) / elapsed,
    )


class _Lines:
    """Feeds on a tool's stdout as it arrives and hands each complete line to `_line` (nothing without a
    listener: the output is parsed only for the live display)."""

    def __init__(self, on_status: Callable[[LiveStatus], None] | None) -> None:
        self.on_status = on_status
        self.pending = ""

    def feed(self, text: str) -> None:
        """Take the next piece of stdout."""
        if self.on_status is None:
            return
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self._line(line)

    def _line(self, line: str) -> None:
        """One complete line."""


class StatusStream(_Lines):
    """Calls `on_status` with each of standalone fio's periodic status documents' figures."""

    def __init__(self, on_status: Callable[[LiveStatus], None] | None, pattern: Pattern) -> None:
        super().__init__(on_status)
        self.pattern = pattern
        self.lines: list[str] | None = None
        self.last: Totals | None = None

    def _line(self, line: str) -> None:
        """Collect a document's lines from `{` to `}` (column 0)."""
        if line == "{":
            self.lines = [line]
        elif self.lines is not None:
            self.lines.append(line)
            if line == "}":
                text, self.lines = "\n".join(self.lines), None
                self._document(text)

    def _document(self, text: str) -> None:
        """Report one status document (unparsable text is fio's business, not the display's)."""
        try:
            now = totals(json.loads(text), self.pattern)
        except (ValueError, AttributeError, TypeError):
            return
        if now is None or self.on_status is None:
            return
        self.on_status(live_status(now, self.last))
        self.last = now


class ClientStream(_Lines):
    """Reports each host's jobs of a multi-host run as their results arrive (fio's normal output before
    the JSON), by job name (`<name>.h<index>` is host `index`)."""

    def __init__(self, on_status: Callable[[LiveStatus], None] | None, names: dict[str, str]) -> None:
        super().__init__(on_status)
        self.names = names  # job name -> host label
        self.host: str | None = None

    def _line(self, line: str) -> None:
        """Remember whose job a header names; report the figures line under it."""
        header = _JOB_HEADER.match(line)
        if header:
            self.host = self.names.get(header.group(1))
            return
        figures = _FIGURES.match(line)
        if figures and self.host is not None and self.on_status is not None:
            _, iops, scale, moved, msec = figures.groups()
            with contextlib.suppress(ValueError):
                seconds, done = int(msec) / 1000, parse_size(moved)
                rate = done / seconds if seconds else 0.0
                self.on_status(LiveStatus(seconds, done, rate, float(iops) * _SCALE[scale], self.host, done=True))
            self.host = None
