"""A sweep's rows under a rich progress bar: runs counted per case, an ETA, and the running case's live
figures (fio's periodic status, each finished host) in its description."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gdsbench.units import num2str

HELD = (signal.SIGINT, signal.SIGTERM)  # what a bar's start and stop hold back


def rows_with_bar(
    rows: Iterator[dict[str, Any]], steps: Counter, console: Console, ctx: Any = None
) -> Iterator[dict[str, Any]]:
    """Wrap the sweep's rows in a rich progress bar with an ETA, counting scheduled runs per case; the
    running case's live figures (fio's periodic status) and each finished host show in its description."""
    columns = (
        TextColumn("{task.description:<44}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    seen: Counter = Counter()
    with live_bar(Progress(*columns, console=console, transient=False)) as progress:
        task = progress.add_task("sweep", total=sum(steps.values()))
        if ctx is not None:
            ctx.on_status = lambda status: progress.update(task, description=live_text(status))
        for row in rows:
            if row["status"] == "fill":  # the step before the cases: its progress, never a counted run
                progress.update(task, description=row["note"][:28])
                progress.console.print(row["note"])
                yield row
                continue
            if not row.get("step_done", True):  # one host of a multi-host run: its `all` row ends the step
                progress.update(task, description=f"{row['host']} {row['status']} {bandwidth(row)}")
                yield row
                continue
            key = row["case"]
            # A skipped case, or one whose warmup failed, stands for all its scheduled runs.
            whole_case = row["status"] == "skipped" or (row["status"] == "failed" and row["repetition"] == 0)
            advance = steps[key] - seen[key] if whole_case else 1
            seen[key] += advance
            label = f"{row['engine']} {row.get('pattern')} {row['status']} {bandwidth(row)}"
            progress.update(task, advance=advance, description=label)
            yield row


@contextlib.contextmanager
def live_bar(progress: Progress) -> Iterator[Progress]:
    """Run a bar whose refresh thread starts and stops with Ctrl-C and SIGTERM held back: one landing inside
    threading's start or join broke its lock ('release unlocked lock', exit 1) instead of stopping the sweep."""
    try:
        with signals_held():
            progress.start()
        yield progress
    finally:
        with signals_held():
            progress.stop()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back for a short section; one that came meanwhile is raised again at its end, to
    the handlers from before (Python runs handlers in the main thread whichever thread the kernel picked, so a
    thread's signal mask cannot hold them: the handlers are swapped). Outside the main thread: no holding."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    previous = {number: signal.signal(number, lambda n, _: came.append(n)) for number in HELD}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        for came_first in dict.fromkeys(came):
            signal.raise_signal(came_first)


def bandwidth(row: dict[str, Any]) -> str:
    """A finished row's bandwidth for the progress line ('' when it has none)."""
    bw = row.get("bw_bytes")
    return num2str(int(bw), unit="B/s") if isinstance(bw, (int, float)) and row["status"] == "ok" else ""


def live_text(status: Any) -> str:
    """A running case's figures so far: elapsed time, bandwidth and IOPS over the last interval."""
    who = f"{status.host} " + ("done " if status.done else "") if status.host else ""
    iops = f" {num2str(int(status.iops), pow2=False)} IOPS" if status.iops is not None else ""
    return f"{who}{status.seconds:.0f}s {num2str(int(status.bw_bytes), unit='B/s')}{iops}"
