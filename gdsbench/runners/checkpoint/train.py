"""`pattern: train`: a synthetic training loop that checkpoints, and what its checkpoints cost it.

A step is `step_time` of compute: matmuls on one thread, their count calibrated on this host before the
loop. Every `interval` steps the loop checkpoints with the engine (synchronously, or with DCP's async_save
where the case says `async: true`: then the next checkpoint first waits for the previous one). What is
measured, per checkpoint and per step:
- stall: wall time the loop could not step (the save call, and any wait for the previous background save);
- slowdown: the median step while a background save drains, over the median step with none, minus one;
- restore: loading the last checkpoint into the training state and taking the next step;
- cost C per checkpoint: the median stall plus the extra step time of the slowed steps per checkpoint.
Rows keep what was measured; Daly's optimal interval and the goodput there are a model of them, evaluated by
the report at the mean times between failures it is asked for (report.goodput; docs/benchmarks.md, "Goodput").
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gdsbench.columns import Column
from gdsbench.keys import Key, duration, positive_int
from gdsbench.runners.base import Measurement
from gdsbench.runners.resources import Usage

TRAIN = ("train",)
TRAIN_OPTIONS: tuple[Key, ...] = (
    Key("steps", positive_int, "a positive integer", 60, "training steps of a train case", patterns=TRAIN),
    Key(
        "step_time",
        duration,
        "a duration such as 200ms",
        0.2,
        "compute of one training step (matmuls on one thread, calibrated on this host)",
        patterns=TRAIN,
    ),
    Key("interval", positive_int, "a positive integer", 10, "checkpoint every this many steps", patterns=TRAIN),
)
#: What a train row measured beyond the core figures (its bandwidth: the checkpoint's bytes over its median time
#: until durable; blocking_seconds: the stall).
COLUMNS = (
    Column("stall_seconds", "s", "median wall time per checkpoint the loop could not step"),
    Column("slowdown", "ratio", "median step while a save drains / median step with none - 1"),
    Column("checkpoint_cost_seconds", "s", "the stall plus the slowed steps' extra time, per checkpoint"),
    Column("loop_seconds", "s", "the loop's wall time: every step and every checkpoint's stall (the slowest rank's)"),
    Column("restore_seconds", "s", "load the last checkpoint into the training state and take the next step"),
)
MATMUL = 256  # the side of the square fp32 matrices one step multiplies
CALIBRATION_SECONDS = 0.3


class Step:
    """One training step: `reps` matmuls on one thread, calibrated so that they take `seconds` here."""

    def __init__(self, seconds: float) -> None:
        import torch

        self._a, self._b = torch.rand(MATMUL, MATMUL), torch.rand(MATMUL, MATMUL)
        self.reps = 1
        started, done = time.perf_counter(), 0
        while time.perf_counter() - started < CALIBRATION_SECONDS:
            self()
            done += 1
        self.reps = max(1, round(seconds * done / (time.perf_counter() - started)))

    def __call__(self) -> None:
        """Compute one step on one torch thread (the engine's own threads keep theirs)."""
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for _ in range(self.reps):
                torch.mm(self._a, self._b)
        finally:
            torch.set_num_threads(threads)


@dataclass
class LoopTimes:
    """What one training loop measured: each step's seconds and whether a save drained behind it, each
    checkpoint's stall and its seconds until durable."""

    steps: list[float] = field(default_factory=list)
    draining: list[bool] = field(default_factory=list)
    stalls: list[float] = field(default_factory=list)
    durable: list[float] = field(default_factory=list)


class Pending:
    """A checkpoint still being written behind the loop: `done` once durable; `finished` is when."""

    def __init__(self, started: float, future: Any = None) -> None:
        self.started, self.finished = started, None if future is not None else time.perf_counter()
        self._future = future
        if future is not None:
            future.add_done_callback(lambda _: self._finish())

    def _finish(self) -> None:
        self.finished = time.perf_counter()

    @property
    def done(self) -> bool:
        """Whether the checkpoint is durable."""
        return self.finished is not None

    def wait(self) -> float:
        """Block until it is durable (raising its failure); the seconds it took from its start."""
        if self._future is not None:
            self._future.result()
        self.finished = self.finished or time.perf_counter()
        return self.finished - self.started


def run_loop(step: Callable[[], None], steps: int, interval: int, checkpoint: Callable[[], Any]) -> LoopTimes:
    """Train `steps` steps, calling `checkpoint()` after every `interval`-th: it returns a future of a
    background save, None once its save is durable, or a Pending of its own (what is still drained behind the loop,
    and what the next checkpoint waits for). One save is in flight at a time."""
    times, pending = LoopTimes(), None
    for index in range(1, steps + 1):
        draining = pending is not None and not pending.done
        started = time.perf_counter()
        step()
        times.steps.append(time.perf_counter() - started)
        times.draining.append(draining)
        if index % interval == 0:
            started = time.perf_counter()
            if pending is not None:
                times.durable.append(pending.wait())
            begun = time.perf_counter()  # the save's own time from here; the stall has the wait
            made = checkpoint()
            pending = made if isinstance(made, Pending) else Pending(begun, made)
            times.stalls.append(time.perf_counter() - started)
    if pending is not None:
        times.durable.append(pending.wait())
    return times


def summarize(times: LoopTimes, restore_seconds: float) -> dict[str, float]:
    """The row's figures of one loop: stall, slowdown, checkpoint cost and restore (COLUMNS), the median step and
    the median time until a checkpoint is durable."""
    quiet = [s for s, d in zip(times.steps, times.draining) if not d]
    slowed = [s for s, d in zip(times.steps, times.draining) if d]
    base = statistics.median(quiet) if quiet else statistics.median(times.steps)
    extra = sum(max(0.0, s - base) for s in slowed) / max(1, len(times.stalls))
    stall = statistics.median(times.stalls)
    return {
        "stall_seconds": stall,
        "slowdown": statistics.median(slowed) / base - 1 if slowed else 0.0,
        "checkpoint_cost_seconds": stall + extra,
        "loop_seconds": sum(times.steps) + sum(times.stalls),
        "restore_seconds": restore_seconds,
        "step_seconds": base,
        "durable_seconds": statistics.median(times.durable),
    }


def measurement(figures: dict[str, float], nbytes: int, notes: list[str], usage: Usage | None = None) -> Measurement:
    """A train row: the checkpoint's bytes over its median time until durable, the loop's figures (COLUMNS) and,
    for a loop in this process, what it cost (CPU and RSS of the whole loop, compute included)."""
    return Measurement(
        bytes=nbytes,
        seconds=figures["durable_seconds"],
        bw_bytes=nbytes / figures["durable_seconds"],
        blocking_seconds=figures["stall_seconds"],
        **(usage.columns() if usage is not None else {}),
        figures={column.name: figures[column.name] for column in COLUMNS},
        note="; ".join([f"step {figures['step_seconds'] * 1000:.0f} ms", *notes]),
    )
