"""fio's periodic status while a case runs (`--status-interval` with JSON output): live figures for the display.

With `--status-interval=N --output-format=json+`, standalone fio prints a whole JSON document every N
seconds (each job's figures so far: io_bytes, runtime, total_ios) and the final one at the end, each
from a `{` line to a `}` line at column 0 (fio 3.33, tests/data/fio/status-interval.txt).
`StatusStream` parses each document as it arrives and reports the rates over the last interval;
`final_only` keeps the last document (the results) and fio's other lines, so the raw output kept and
the parser see what a run without periodic status prints.

fio's client (multi-host) prints no periodic status in JSON mode: the servers' periodic figures reach
it only when a server itself was started with --status-interval, and then only at the end, as extra
`client_stats` entries. Multi-host cases report each host when its results arrive (fio_client).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from collections.abc import Callable
from typing import Any, NamedTuple

from gdsbench.cases import Pattern
from gdsbench.runners.base import LiveStatus, RunContext

#: A top-level JSON document of fio's output: fio indents everything but its outer braces.
_DOCUMENT = re.compile(r"^\{\n.*?^\}$\n?", re.MULTILINE | re.DOTALL)


def status_args(ctx: RunContext) -> list[str]:
    """fio's `--status-interval` argument for a sweep that wants live figures (whole seconds, at least 1)."""
    if not ctx.status_interval:
        return []
    return [f"--status-interval={max(1, math.ceil(ctx.status_interval))}"]


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


class StatusStream:
    """Feeds on fio's stdout as it arrives; calls `on_status` with each periodic document's figures."""

    def __init__(self, on_status: Callable[[LiveStatus], None] | None, pattern: Pattern) -> None:
        self.on_status, self.pattern = on_status, pattern
        self.pending = ""
        self.lines: list[str] | None = None
        self.last: Totals | None = None

    def feed(self, text: str) -> None:
        """Take the next piece of stdout; report every document it completes."""
        if self.on_status is None:
            return
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            self._line(line)

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
