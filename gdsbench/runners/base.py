"""The runner contract: what a runner declares, the Measurement it returns, and run_tool (no shell)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.keys import Key


@dataclass(frozen=True)
class Measurement:
    """What one run measured, in base units: bytes, seconds, bytes/s, microseconds."""

    bytes: int
    seconds: float  # wall time of the slowest job (fio's max_run)
    bw_bytes: float  # aggregate bandwidth, bytes/s
    seconds_min: float | None = None  # fastest job's runtime (fio's min_run)
    iops: float | None = None
    lat_mean_us: float | None = None
    lat_stdev_us: float | None = None
    lat_p50_us: float | None = None
    lat_p90_us: float | None = None
    lat_p99_us: float | None = None
    lat_p999_us: float | None = None
    bw_min_bytes: float | None = None  # slowest job's bandwidth
    bw_max_bytes: float | None = None  # fastest job's bandwidth
    peak_rss_bytes: int | None = None
    bytes_on_disk: int | None = None
    blocking_seconds: float | None = None  # what the caller waited (an async save's staging), beside `seconds`
    compression_ratio: float | None = None  # bytes / bytes_on_disk, for engines that can compress
    cache: str | None = None  # cold | warm, where the runner controls it
    path: str | None = None  # GPU rows: gds | compat | posix | unknown (gdsbench.runners.gds_path)
    note: str | None = None  # how the measurement was taken, when it matters (cache method, fallback)
    raw: str | None = field(default=None, repr=False, compare=False)  # the tool's output, kept beside the CSV

    def row(self) -> dict[str, Any]:
        """The measurement as flat result columns (the raw output is stored apart)."""
        row = asdict(self)
        del row["raw"]
        return row


@dataclass
class RunContext:
    """What a runner needs beyond the case: the target, sizes and time limits, and a place for raw output."""

    directory: Path
    file_size: int
    runtime: float | None = None
    ramp_time: float | None = None
    timeout: float = 3600.0
    keep_files: bool = False
    raw_dir: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # top-level runner options from the config
    created: list[Path] = field(default_factory=list)  # files this sweep created, removed at the end
    closers: list[Callable[[], None]] = field(default_factory=list)  # runners' resources kept across cases
    fill_failures: dict[str, str] = field(default_factory=dict)  # engine -> why the sweep's fill step failed

    def track_new(self, paths: list[Path]) -> None:
        """Remember which of `paths` do not exist yet, so cleanup removes only files we created."""
        for path in paths:
            if not path.exists() and path not in self.created:
                self.created.append(path)

    def cleanup(self) -> list[Path]:
        """Remove what this sweep created (never anything else), newest first; return what was removed.

        Directories are removed only once empty (rmdir, never recursively), so a file someone else
        put inside one of ours survives.
        """
        while self.closers:
            self.closers.pop()()
        removed: list[Path] = []
        if self.keep_files:
            return removed
        for path in reversed(self.created):
            try:
                path.rmdir() if path.is_dir() else path.unlink()
                removed.append(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        self.created.clear()
        return removed


def axes_of(core: Iterable[str], options: Iterable[Key]) -> frozenset[str]:
    """A runner's case parameters: the core axes it uses plus its option keys that are axes (not settings)."""
    return frozenset(core) | {key.name for key in options if key.axis}


class Runner(Protocol):
    """A benchmark engine: declares what it can do; runs one case at a time."""

    @property
    def name(self) -> str:
        """The YAML name (`engine: fio`)."""

    @property
    def description(self) -> str:
        """One line: what it measures."""

    @property
    def patterns(self) -> frozenset[Pattern]:
        """The patterns it can run."""

    @property
    def transfers(self) -> frozenset[Transfer]:
        """The transfer types it can run."""

    @property
    def axes(self) -> frozenset[str]:
        """Case parameters it uses (core axes and its own options)."""

    @property
    def options(self) -> tuple[Key, ...]:
        """Its own YAML keys (matrix axes or top-level values)."""

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why this case cannot run on this machine, or None when it can."""

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The exact command (or API call) the case runs, for --dry-run and the results."""

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Run the case once and measure it; raise GdsbenchError on an expected failure."""


#: How long a stopped tool's process group gets to exit on SIGTERM before SIGKILL.
STOP_GRACE_S = 2.0


def run_tool(argv: list[str], timeout: float, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a command as an argument list (never a shell); raise ToolError on failure or timeout.

    The child leads its own session and process group, so a timeout or Ctrl-C stops it with every
    process it started (fio's job processes, gdsio's helpers), not only the process we started.
    """
    *_, (_, done) = run_polled(argv, timeout, timeout, env)  # ticks only on timeout, which raises
    assert done is not None
    return done


def run_polled(
    argv: list[str], timeout: float, interval: float, env: Mapping[str, str] | None = None
) -> Iterator[tuple[int, subprocess.CompletedProcess | None]]:
    """run_tool that yields (pid, None) every `interval` seconds while the tool runs, then (pid, its result),
    so a caller can watch it (file sizes for progress, gds_stats -p PID) without a thread."""
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    except OSError as exc:
        raise ToolError(f"cannot start {argv[0]}: {exc.strerror}") from None
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                stdout, stderr = proc.communicate(timeout=max(0.0, min(interval, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    stop_group(proc)
                    raise ToolError(f"{Path(argv[0]).name} timed out after {timeout:.0f}s") from None
                yield proc.pid, None
    except (KeyboardInterrupt, GeneratorExit):
        stop_group(proc)  # in its own session the tool never saw the terminal's SIGINT
        raise
    yield proc.pid, subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


def stop_group(proc: subprocess.Popen, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM the child's whole process group, give it `grace` seconds, SIGKILL what is left; reap the child.

    The leader is reaped only after both signals: until then its (zombie) pid holds the group id, so
    the signals can never reach a group that reused the id.
    """
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while not _exited(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    _signal_group(proc.pid, signal.SIGKILL)  # members that outlived the leader or ignored SIGTERM
    try:
        proc.communicate(timeout=grace)  # reap the leader; its pipes close once every member is dead
    except subprocess.TimeoutExpired:  # a process that left the group (setsid) still holds the pipes
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()


def _exited(pid: int) -> bool:
    """True once a child has exited, without reaping it (waitid WNOWAIT)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _signal_group(pgid: int, signum: int) -> None:
    """Send `signum` to every process of a group; a group that has already gone is fine."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def tool_message(proc: subprocess.CompletedProcess, limit: int = 400) -> str:
    """The most telling lines of a failed tool's output: its error lines, else its last lines.

    Only stderr and the text stdout printed before any JSON document are read: JSON keys such as
    `"error" : 0` are data, not messages.
    """
    stdout = proc.stdout or ""
    before_json = stdout[: stdout.find("{")] if "{" in stdout else stdout
    lines = [line.strip() for line in (proc.stderr or "").splitlines() + before_json.splitlines()]
    lines = [line for line in lines if line]
    errors = [line for line in lines if "error" in line.lower() or "fail" in line.lower()]
    text = "; ".join(dict.fromkeys(errors or lines[-3:])) or f"exit status {proc.returncode}"
    return text[:limit]
