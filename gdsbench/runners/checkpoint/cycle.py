"""A checkpoint cycle's phases: `checkpoints` saves in a row, or loads in a row, every rank timing its own part.

The MLPerf Storage checkpoint rules measure a phase of N checkpoints per rank: each checkpoint's duration on
the slowest rank, and each rank's throughput (its bytes over its own time), the slowest rank counting.
Here a phase is: a barrier, then for every checkpoint a barrier and this rank's save (or load) timed on its
own, then a closing barrier; the phase's wall time runs from the first barrier to the last (bytes of every
rank over it: the aggregate), less the time of a load's check against what was saved (between barriers, after
every rank's load). Checkpoint i of N lives in `checkpoint-i` of the case's directory (N = 1: the
directory itself, as a single save always has).
Per row, as the rules aggregate a run: `max_rank_seconds` is the mean over checkpoints of the longest rank's
duration, `min_rank_bw_bytes` the mean over checkpoints of the slowest rank's throughput. A rank's duration
for DCP engines includes DCP's collectives (planning, the commit): a rank is done when its save returns.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def checkpoint_dirs(path: Path, count: int) -> list[Path]:
    """Where each checkpoint of a phase of `count` lives."""
    return [path] if count == 1 else [path / f"checkpoint-{i}" for i in range(count)]


@dataclass(frozen=True)
class Phase:
    """What one rank measured over a phase."""

    seconds: float  # first barrier to last barrier
    durations: list[float]  # this rank's own time per checkpoint
    blocking: list[float]  # what the caller waited per checkpoint (an async save's staging; else its duration)

    def figures(self) -> dict[str, Any]:
        """The rank's figures as the launcher gathers them."""
        return {"seconds": self.seconds, "durations": self.durations, "blocking": self.blocking}


#: One checkpoint on this rank: (its own seconds, seconds the caller was blocked) for a directory.
One = Callable[[Path], tuple[float, float]]


def run_phase(
    directories: Sequence[Path],
    one: One,
    barrier: Callable[[], None],
    check: Callable[[Path], None] | None = None,
    untimed: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext,
) -> Phase:
    """Every checkpoint between barriers, each timed by `one`; `check` (a load's comparison with what was saved)
    runs after every rank's checkpoint, between two barriers, inside `untimed` (the CPU accounting's pause), and
    its time is left out of the phase's: the phase is the checkpoints' alone."""
    barrier()
    started = time.perf_counter()
    durations, blocking, left_out = [], [], 0.0
    for directory in directories:
        barrier()
        own, blocked = one(directory)
        durations.append(own)
        blocking.append(blocked)
        if check is not None:
            left_out += _checked(directory, check, barrier, untimed)
    barrier()
    return Phase(time.perf_counter() - started - left_out, durations, blocking)


def _checked(
    directory: Path, check: Callable[[Path], None], barrier: Callable[[], None], untimed: Callable[[], Any]
) -> float:
    """Run `check` once every rank is there, every rank leaving together (a failed check raises after the
    barrier, so no peer waits for it); the seconds from the first barrier's end to the second's."""
    barrier()
    with untimed():
        began = time.perf_counter()
        try:
            check(directory)
        finally:
            barrier()
        return time.perf_counter() - began


def timed(fn: Callable[[], float | None]) -> tuple[float, float]:
    """Run fn, which returns the seconds its caller was blocked (None: all of it); return (seconds, blocked)."""
    started = time.perf_counter()
    blocked = fn()
    seconds = time.perf_counter() - started
    return seconds, seconds if blocked is None else blocked


@dataclass(frozen=True)
class RankMetrics:
    """A phase in the rules' terms, from every rank's figures."""

    max_rank_seconds: float
    min_rank_bw_bytes: float | None  # None where no rank's bytes are its own alone (a replicated model)


def rank_metrics(ranks: Sequence[dict[str, Any]]) -> RankMetrics:
    """The mean over checkpoints of the longest rank's duration and of the slowest rank's throughput (ranks that
    move no bytes of their own, as a ZeRO-0 replica, left out of the throughput)."""
    per_checkpoint = list(zip(*(r["durations"] for r in ranks)))
    longest = statistics.fmean(max(durations) for durations in per_checkpoint)
    own = [r.get("own_bytes") for r in ranks]
    if None in own or not any(own):
        return RankMetrics(longest, None)
    slowest = [min(b / d for b, d in zip(own, durations) if b) for durations in per_checkpoint]
    return RankMetrics(longest, statistics.fmean(slowest))
