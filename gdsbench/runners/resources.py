"""What a measured call cost the machine, read from the kernel around it, nothing running beside it.

- process CPU: user + system seconds of this process (every thread) and of the children it waited for
  (os.times), so a tool run as a subprocess is counted whole;
- machine CPU: busy seconds of every CPU from /proc/stat (user, nice, system, irq, softirq; steal and idle
  are not this machine's work), which includes what no process is charged for: kernel writeback threads
  flushing a buffered writer's pages, interrupts;
- the machine's load before a run: CPUs busy over a short window with nothing of gdsbench running (busy_cpus),
  so a report can tell a neighbour's work in the machine CPU from the run's own;
- peak RSS: the kernel's high-water mark of this process, reset on entry (`/proc/self/clear_refs` 5, Linux
  4.0+) and read on exit (VmHWM); where the reset is refused a thread samples RSS every 5 ms instead
  (`exact` is then False: the sampler shares the CPU with the call).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SAMPLE_SECONDS = 0.005
#: The window before a run in which the machine's load is sampled (busy_cpus): short, as it is paid per run.
IDLE_WINDOW_S = 0.2
#: /proc/stat's cpu fields counted as work: user, nice, system, (idle), (iowait), irq, softirq.
BUSY_FIELDS = (0, 1, 2, 5, 6)


class Usage:
    """CPU and memory a `with` block cost: `cpu_seconds` (this process and its waited-for children),
    `machine_cpu_seconds` (every CPU), `peak_rss` and `rss_before` (bytes)."""

    def __init__(self) -> None:
        self.rss_before = self.peak_rss = rss()
        self.cpu_seconds: float | None = None
        self.machine_cpu_seconds: float | None = None
        self.exact = False
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None

    def __enter__(self) -> Usage:
        self.exact = reset_peak_rss()
        if not self.exact:
            self._sampler = threading.Thread(target=self._sample, name="gdsbench-rss", daemon=True)
            self._sampler.start()
        self._cpu, self._machine = process_cpu(), machine_cpu()
        self._left_out = [0.0, 0.0]  # process and machine CPU seconds spent `paused`
        return self

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Leave a block's CPU out of the figures (a load's check against what was saved is not the load)."""
        cpu, machine = process_cpu(), machine_cpu()
        try:
            yield
        finally:
            self._left_out[0] += process_cpu() - cpu
            if machine is not None:
                self._left_out[1] += (machine_cpu() or machine) - machine

    def __exit__(self, *exc: object) -> None:
        cpu, machine = process_cpu(), machine_cpu()
        self.cpu_seconds = cpu - self._cpu - self._left_out[0]
        self.machine_cpu_seconds = (
            None if machine is None or self._machine is None else machine - self._machine - self._left_out[1]
        )
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
        self.peak_rss = max(self.peak_rss, peak_rss() if self.exact else rss())

    def columns(self) -> dict[str, Any]:
        """The cost as result columns."""
        return {
            "peak_rss_bytes": self.peak_rss,
            "cpu_seconds": self.cpu_seconds,
            "machine_cpu_seconds": self.machine_cpu_seconds,
        }

    def _sample(self) -> None:
        """Record the highest RSS until told to stop (the fallback)."""
        while not self._stop.wait(SAMPLE_SECONDS):
            self.peak_rss = max(self.peak_rss, rss())


def process_cpu() -> float:
    """User + system seconds of this process and of the children it has waited for."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def machine_cpu() -> float | None:
    """Busy seconds of every CPU since boot (/proc/stat), None where there is no /proc/stat."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    ticks = [int(first[1 + i]) for i in BUSY_FIELDS]
    return sum(ticks) / os.sysconf("SC_CLK_TCK")


def busy_cpus(window: float = IDLE_WINDOW_S) -> float | None:
    """How many CPUs were busy on average over `window` seconds from now (/proc/stat; None without it): taken
    before a run, with nothing of gdsbench running, it is the neighbours' load the run's machine CPU includes."""
    start, began = machine_cpu(), time.monotonic()
    time.sleep(window)
    end = machine_cpu()
    return None if start is None or end is None else (end - start) / (time.monotonic() - began)


def _status_bytes(field: str) -> int:
    """One `field: N kB` line of /proc/self/status, in bytes (0 where it is missing)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def rss() -> int:
    """This process's resident memory now."""
    return _status_bytes("VmRSS")


def peak_rss() -> int:
    """The most this process has had resident since the last reset."""
    return _status_bytes("VmHWM")


def reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark of this process to its current RSS; False where refused."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True
