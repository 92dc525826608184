"""The runner contract: what a runner declares, the Measurement it returns, and run_tool (no shell)."""

from __future__ import annotations

import codecs
import contextlib
import errno
import io
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import TEXT, Column, Traits
from gdsbench.errors import ToolError
from gdsbench.hosts import Host
from gdsbench.keys import Key
from gdsbench.launchers.base import Launch


class Sample(NamedTuple):
    """One point of a run's time series: a job's bandwidth and mean completion latency over one window."""

    job: int  # 1-based, as fio numbers its log files
    time_s: float  # end of the window, from the job's start
    bw_bytes: float | None
    lat_us: float | None


@dataclass(frozen=True)
class LiveStatus:
    """A running case's progress for the live display: figures so far, per host (None: this machine)."""

    seconds: float
    bytes: int
    bw_bytes: float  # over the last status interval
    iops: float | None = None
    host: str | None = None
    done: bool = False  # this host has finished (its final figures)


#: Figures of a run of several jobs (fio's jobs, the s3 engine's slots), which the engines that run them declare.
JOB_SPREAD = (
    Column("seconds_min", "s", "the fastest job's runtime (fio's min_run)"),
    Column("bw_min_bytes", "bytes/s", "the slowest job's bandwidth"),
    Column("bw_max_bytes", "bytes/s", "the fastest job's bandwidth"),
    Column("spread_seconds", "s", "between the first and the last finished job (several jobs)"),
    Column("straggler", "", "the job that finished last, when jobs finished apart", TEXT),
)


@dataclass(frozen=True)
class Measurement:
    """What one run measured, in base units: bytes, seconds, bytes/s, microseconds. The core fields every engine's
    rows have; what only some engines measure is in `figures`, by the names the runner declares (Runner.columns)."""

    bytes: int
    seconds: float  # wall time of the slowest job (fio's max_run)
    bw_bytes: float  # aggregate bandwidth, bytes/s
    iops: float | None = None
    lat_mean_us: float | None = None
    lat_stdev_us: float | None = None
    lat_p50_us: float | None = None
    lat_p90_us: float | None = None
    lat_p99_us: float | None = None
    lat_p999_us: float | None = None
    peak_rss_bytes: int | None = None  # all processes of the measurement together (every rank's)
    cpu_seconds: float | None = None  # user + system CPU of the measurement's processes (every rank, fio's jobs)
    machine_cpu_seconds: float | None = None  # every CPU's busy time over the measured window (/proc/stat)
    blocking_seconds: float | None = None  # what the caller waited (an async save's staging), beside `seconds`
    cache: str | None = None  # cold | warm, where the runner controls it
    path: str | None = None  # GPU rows: gds | compat | posix | unknown (gdsbench.runners.gds_path)
    note: str | None = None  # how the measurement was taken, when it matters (cache method, fallback)
    raw: str | None = field(default=None, repr=False, compare=False)  # the tool's output, kept beside the CSV
    series: tuple[Sample, ...] = field(default=(), repr=False, compare=False)  # time series, stored apart
    figures: Mapping[str, Any] = field(default_factory=dict)  # the engine's declared columns (Runner.columns)
    # case parameters a config may leave to the engine's library (Runner.library_defaults): the values it ran with
    resolved: Mapping[str, Any] = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        """The measurement as flat result columns (the raw output and the series are stored apart), with the
        parameters the library chose (they replace the case's None)."""
        apart = ("raw", "series", "figures", "resolved")
        core = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in apart}
        return {**core, **self.resolved, **self.figures}


def check_figures(runner: Runner, measurement: Measurement) -> Measurement:
    """The measurement, once its figures are all columns its runner declares and what it resolved are parameters the
    runner leaves to its library; ToolError naming one that is not."""
    undeclared = sorted(set(measurement.figures) - {column.name for column in runner.columns})
    if undeclared:
        raise ToolError(f"{runner.name} measured {', '.join(undeclared)}, which it does not declare (Runner.columns)")
    unasked = sorted(set(measurement.resolved) - set(getattr(runner, "library_defaults", ())))
    if unasked:
        raise ToolError(f"{runner.name} resolved {', '.join(unasked)}, which it does not leave to its library")
    return measurement


@dataclass
class Resources:
    """The one registry of what a sweep must undo when it ends: the files and folders it created (removed
    newest first, a folder only once empty, never anything it did not create) and what runners keep across
    cases (closed first: Checkpointers, GPU copies, locked buffers)."""

    keep_files: bool = False  # leave the created files where they are
    created: list[Path] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def track_new(self, paths: list[Path]) -> None:
        """Remember which of `paths` do not exist yet (not even as a dangling link), so cleanup removes only files
        we created."""
        for path in paths:
            if not os.path.lexists(path) and path not in self.created:
                self.created.append(path)

    def close_at_end(self, closer: Callable[[], None]) -> None:
        """Call `closer` when the sweep ends (once, however often it is registered)."""
        if closer not in self.closers:
            self.closers.append(closer)

    def cleanup(self) -> list[Path]:
        """Remove what this sweep created (never anything else), newest first; return what was removed.

        Folders are removed only once empty (rmdir, never recursively), so a file someone else
        put inside one of ours survives; with keep_files only the folders left empty go.
        """
        while self.closers:
            self.closers.pop()()
        removed: list[Path] = []
        for path in reversed(self.created):
            folder = path.is_dir() and not path.is_symlink()
            if self.keep_files and not folder:
                continue
            try:
                path.rmdir() if folder else path.unlink()
                removed.append(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
        self.created.clear()
        return removed


@dataclass
class RunContext:
    """What a runner needs beyond the case: the target, sizes and time limits, a place for raw output, and
    the sweep's registry of what to undo at its end."""

    directory: Path
    file_size: int
    runtime: float | None = None
    ramp_time: float | None = None
    timeout: float = 3600.0
    raw_dir: Path | None = None
    options: Mapping[str, Any] = field(default_factory=dict)  # top-level runner options from the config
    hosts: tuple[Host, ...] = ()  # fio servers of a multi-host sweep (fio cases only); () = this machine
    series_ms: int | None = None  # fio's bandwidth/latency logs averaged over this many ms; None = no logs
    status_interval: float | None = None  # fio's periodic status (live figures) every this many seconds
    run_stem: str = "run"  # the current run's name for its raw files (<raw_dir>/<stem>.txt, jobs/, series/)
    on_status: Callable[[LiveStatus], None] | None = None  # the live display, while a run goes
    host_facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # what fio's servers told of themselves
    resources: Resources = field(default_factory=Resources)  # what the sweep must undo at its end
    fill_failures: dict[str, str] = field(default_factory=dict)  # engine -> why the sweep's fill step failed
    launch: Launch = field(default_factory=Launch)  # how distributed checkpoint cases start their ranks


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

    @property
    def traits(self) -> Traits:
        """What it stores on and which engine's best case bounds it (gdsbench.columns)."""

    @property
    def columns(self) -> tuple[Column, ...]:
        """The result columns it adds to its rows, beside the core ones (Measurement.figures)."""

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why this case cannot run on this machine, or None when it can."""

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The exact command (or API call) the case runs, for --dry-run and the results."""

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Run the case once and measure it; raise GdsbenchError on an expected failure."""


class HostsRun(Protocol):
    """A case's run on several hosts at once: its raw output and a result per host plus the aggregate `all`."""

    raw: str
    results: tuple[Any, ...]  # each with .host, .measurement and .row()


@runtime_checkable
class FleetRunner(Runner, Protocol):
    """A runner that takes the sweep's fleet (`hosts:`): it runs a case on every host at once, as fio's client
    runs its servers, where another engine runs on this machine only."""

    def run_hosts(self, case: Case, ctx: RunContext) -> HostsRun:
        """Run one case on every host of ctx.hosts at once: a result per host plus `all`."""


#: How long a stopped tool's process group gets to exit on SIGTERM before SIGKILL.
STOP_GRACE_S = 2.0
#: How long a tool gets to stop on SIGINT (fio's client then stops every server's job) before SIGTERM.
INTERRUPT_GRACE_S = 5.0
_READ_SIZE = 1 << 16


def run_tool(
    argv: list[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    *,
    keep_sigpipe_ignored: bool = False,
    cwd: Path | None = None,
    on_stdout: Callable[[str], None] | None = None,
    interrupt_grace: float = INTERRUPT_GRACE_S,
) -> subprocess.CompletedProcess:
    """Run a command as an argument list (never a shell); raise ToolError on failure or timeout.

    The child leads its own session and process group, so a timeout or Ctrl-C stops it with every
    process it started (fio's job processes, gdsio's helpers), not only the process we started: SIGINT
    first (fio's client then stops its servers' jobs, fio prints what it has), then SIGTERM and SIGKILL.
    `on_stdout` receives stdout text as it arrives (fio's periodic status); `keep_sigpipe_ignored`
    leaves SIGPIPE ignored in the child (Popen otherwise restores its default, and fio's client dies
    of it, silently, when a server closes the connection). `interrupt_grace`: how long a stopped tool may
    take to print its last output after SIGINT.
    """
    proc = _start(argv, env, cwd, keep_sigpipe_ignored)
    output = _Output(proc, on_stdout)
    try:
        output.drain(time.monotonic() + timeout)
    except subprocess.TimeoutExpired:
        interrupt_group(proc, output, interrupt_grace)
        raise ToolError(f"{Path(argv[0]).name} timed out after {timeout:g}s") from None
    except BaseException:  # Ctrl-C (in its own session the tool never saw the terminal's SIGINT), or a bug
        interrupt_group(proc, output, interrupt_grace)
        raise
    return subprocess.CompletedProcess(argv, proc.returncode, output.text(1), output.text(2))


def run_tools(
    argvs: list[list[str]],
    timeout: float,
    env: Mapping[str, str] | None = None,
    settle: float = 30.0,
    stdin: str = "",
) -> list[subprocess.CompletedProcess]:
    """Run several commands at once (a launcher on every node) as run_tool runs one: all by `timeout` (ToolError
    past it), each in a session of its own, `stdin` written to each one's standard input (then closed). Once one
    has failed the others get `settle` seconds to end (their peers' loss reaches them through the rendezvous),
    then are stopped; every one's result is returned."""
    procs: list[subprocess.Popen] = []
    try:
        for argv in argvs:
            procs.append(_start(argv, env, None, False, stdin))
        outputs = [_Output(proc, None) for proc in procs]
        _drain_all(outputs, time.monotonic() + timeout, settle)
    except BaseException as stopped:  # a timeout, a start that failed, Ctrl-C: stop every command still running
        for proc in procs:
            if proc.returncode is None:
                interrupt_group(proc)
        if isinstance(stopped, subprocess.TimeoutExpired):
            raise ToolError(f"{Path(str(stopped.cmd[0])).name} timed out after {timeout:g}s") from None
        raise
    return [subprocess.CompletedProcess(p.args, p.returncode, o.text(1), o.text(2)) for p, o in zip(procs, outputs)]


def _drain_all(outputs: list[_Output], deadline: float, settle: float) -> None:
    """Read every command's output until all have ended (TimeoutExpired past `deadline`); once one failed, stop
    the others `settle` seconds later."""
    pending, stop_at = list(outputs), deadline
    while pending:
        for output in list(pending):
            try:
                output.drain(min(stop_at, time.monotonic() + 0.05))
                pending.remove(output)
                if output.proc.returncode:
                    stop_at = min(stop_at, time.monotonic() + settle)
            except subprocess.TimeoutExpired:
                if time.monotonic() < stop_at:
                    continue
                if stop_at == deadline:
                    raise subprocess.TimeoutExpired(output.proc.args, 0) from None
                interrupt_group(output.proc, output)
                pending.remove(output)


def run_polled(
    argv: list[str], timeout: float, interval: float, env: Mapping[str, str] | None = None
) -> Iterator[tuple[int, subprocess.CompletedProcess | None]]:
    """run_tool that yields (pid, None) every `interval` seconds while the tool runs, then (pid, its result),
    so a caller can watch it (file sizes for progress, gds_stats -p PID) without a thread."""
    proc = _start(argv, env, None, False)
    output = _Output(proc, None)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                output.drain(min(deadline, time.monotonic() + interval))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    interrupt_group(proc, output)
                    raise ToolError(f"{Path(argv[0]).name} timed out after {timeout:.0f}s") from None
                yield proc.pid, None
    except (KeyboardInterrupt, GeneratorExit):
        interrupt_group(proc, output)
        raise
    yield proc.pid, subprocess.CompletedProcess(argv, proc.returncode, output.text(1), output.text(2))


def _start(
    argv: list[str], env: Mapping[str, str] | None, cwd: Path | None, keep_sigpipe_ignored: bool, stdin: str = ""
) -> subprocess.Popen:
    """Start a tool in a session of its own, its output piped (`stdin`, where given, written to it and closed);
    ToolError when it cannot start."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else None,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            restore_signals=not keep_sigpipe_ignored,
        )
    except OSError as exc:
        raise ToolError(f"cannot start {argv[0]}: {exc.strerror}") from None
    if proc.stdin is not None:
        try:
            proc.stdin.write(stdin.encode())  # a line or two: within the pipe's buffer, never blocking
            proc.stdin.close()
        except BrokenPipeError:  # a tool that ended at once: its exit status says why
            pass
    return proc


class _Output:
    """A child's stdout and stderr read as they come (UTF-8, never blocking the child on a full pipe)."""

    def __init__(self, proc: subprocess.Popen, on_stdout: Callable[[str], None] | None) -> None:
        self.proc, self.on_stdout = proc, on_stdout
        self.parts: dict[int, list[str]] = {1: [], 2: []}
        self.decoders = {n: _decoder() for n in (1, 2)}
        self.selector = selectors.DefaultSelector()
        for number, pipe in ((1, proc.stdout), (2, proc.stderr)):
            self.selector.register(pipe, selectors.EVENT_READ, number)  # type: ignore[arg-type]

    def drain(self, deadline: float, reap: bool = True) -> None:
        """Read both pipes until they close and the child exits (reaped, or with `reap=False` left a
        zombie that holds its group id); TimeoutExpired at `deadline`."""
        while self.selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.proc.args, 0)
            for key, _ in self.selector.select(left):
                self._read(key)
        self.selector.close()
        if reap:
            self.proc.wait(max(deadline - time.monotonic(), 0.001))
            return
        while not _exited(self.proc.pid):
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.proc.args, 0)
            time.sleep(0.02)

    def _read(self, key: selectors.SelectorKey) -> None:
        """One chunk of one pipe; at its end, close it."""
        chunk = os.read(key.fd, _READ_SIZE)
        number = key.data
        text = self.decoders[number].decode(chunk, final=not chunk)
        if not chunk:
            self.selector.unregister(key.fileobj)
            key.fileobj.close()  # type: ignore[union-attr]
        self.parts[number].append(text)
        if text and number == 1 and self.on_stdout is not None:
            self.on_stdout(text)

    def text(self, number: int) -> str:
        """All the text one pipe (1 stdout, 2 stderr) has given."""
        return "".join(self.parts[number])


def _decoder() -> io.IncrementalNewlineDecoder:
    """UTF-8 text with universal newlines, as Popen(text=True) reads it (undecodable bytes replaced)."""
    return io.IncrementalNewlineDecoder(codecs.getincrementaldecoder("utf-8")(errors="replace"), translate=True)


def interrupt_group(proc: subprocess.Popen, output: _Output | None = None, grace: float = INTERRUPT_GRACE_S) -> None:
    """SIGINT the child's process group and read its last output for up to `grace` seconds, then stop_group
    (at once, SIGKILL included, when `grace` is 0: a probe whose last words nobody needs)."""
    try:
        _signal_group(proc.pid, signal.SIGINT)
        if output is not None:
            output.on_stdout = None
            with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
                output.drain(time.monotonic() + grace, reap=False)
    finally:
        stop_group(proc, STOP_GRACE_S if grace else 0.0)


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
    for pipe in (proc.stdout, proc.stderr):  # a process that left the group (setsid) may still hold them
        if pipe is not None and not pipe.closed:
            pipe.close()
    proc.wait()  # reap the leader


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
