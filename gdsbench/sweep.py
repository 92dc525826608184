"""Run a SweepConfig: skip what cannot run, warm up, repeat, record one row per run as it finishes.

A failed run becomes a `failed` row and the sweep goes on; rows are flushed one by one, so an
interrupted sweep keeps every finished row and `--resume` runs only what is missing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shlex
import stat
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gdsbench import fill, flags, results, runners, sysinfo, trusted
from gdsbench.cases import Case
from gdsbench.columns import Column, records
from gdsbench.config import SweepConfig
from gdsbench.errors import GdsbenchError, TargetError
from gdsbench.hosts import AGGREGATE, Host
from gdsbench.runners.base import FleetRunner, Measurement, Resources, RunContext, check_figures
from gdsbench.runners.resources import busy_cpus


@dataclass(frozen=True)
class Step:
    """One scheduled run: a case, its repetition number (0 = warmup, not recorded) and, for a fio case
    of a multi-host sweep, the hosts it runs on (those still without an ok row when resuming)."""

    case: Case
    repetition: int
    hosts: tuple[Host, ...] = ()
    whole: bool = True  # every host of the sweep runs: the `all` row is the fleet's aggregate

    @property
    def stem(self) -> str:
        """The run's name for its raw files: engine, a digest of the case, repetition."""
        digest = hashlib.sha1(self.case.key.encode()).hexdigest()[:10]
        return f"{self.case.engine}-{digest}-r{self.repetition}"


def folder_problem(directory: Path, parents: bool = True) -> str | None:
    """Why a folder cannot take our files (it is made when missing, with its `parents`), or None when it can."""
    if directory.exists() and not directory.is_dir():
        return "exists and is not a directory"
    try:
        directory.mkdir(parents=parents, exist_ok=True)
    except OSError as exc:
        return f"cannot be made: {exc.strerror}"
    return None if os.access(directory, os.W_OK | os.X_OK) else "is not writable by this user"


def prepare_target(directory: Path, resources: Resources | None = None, private: bool = True) -> Path:
    """The folder a sweep's files go in: `directory`, made when missing and its parent exists (a mistyped path
    is refused, not made), and trusted (ours, writable by no one else); in a sticky folder others write (/tmp),
    a private folder made inside it (unless not `private`: every host of a multi-host sweep uses the path);
    refused where another user made it or can replace what is in it. What it makes goes in `resources`
    (removed at the end once empty)."""
    try:
        path = trusted.safe_path(directory)
    except trusted.UntrustedError as exc:
        raise TargetError(f"directory {directory}: {exc}; choose a directory of your own") from None
    if not os.path.lexists(path):
        return _make_target(path, resources)
    if path.is_symlink() and os.lstat(path).st_uid in (0, os.geteuid()):  # a link of ours: where it points
        return prepare_target(Path(os.path.realpath(path)), resources, private)
    problem = folder_problem(path, parents=False)
    if problem:
        raise TargetError(f"directory {directory} {problem}; choose another `directory`")
    return _trusted_target(path, resources, private)


def _make_target(path: Path, resources: Resources | None) -> Path:
    """A missing target made (mode 0755) in its existing parent, as this sweep's."""
    if not path.parent.is_dir():
        raise TargetError(
            f"directory {path} does not exist, nor does its parent {path.parent} (a mistyped "
            "path?): make it first, or correct `directory`"
        )
    try:
        os.mkdir(path, 0o755)
    except OSError as exc:
        raise TargetError(f"directory {path} cannot be made: {exc.strerror}; choose another `directory`") from None
    if resources is not None:
        resources.created.append(path)
    return path


def _trusted_target(path: Path, resources: Resources | None, private: bool) -> Path:
    """`path` when ours and writable by no one else; a private folder made inside it when it is a sticky folder
    of root's or ours (others cannot rename what we make there); else refused, naming what was found."""
    info = os.lstat(path)
    try:
        trusted.check_owned(path, info)
        return path
    except trusted.UntrustedError as exc:
        if not (private and info.st_mode & stat.S_ISVTX and info.st_uid in (0, os.geteuid())):
            raise TargetError(
                f"`directory` {exc} (another user could replace the test files in it with "
                "links); choose a directory of your own"
            ) from None
    folder = Path(tempfile.mkdtemp(prefix="gdsbench-", dir=path))
    if resources is not None:
        resources.created.append(folder)
    return folder


def context(config: SweepConfig, csv_path: Path | None) -> RunContext:
    """The RunContext every runner of this sweep shares."""
    runtime, ramp = config.runtime, config.ramp_time
    timeout = config.timeout or ((runtime or 0) + (ramp or 0)) * 3 + 600
    return RunContext(
        directory=Path(config.directory),
        file_size=config.file_size,
        runtime=runtime,
        ramp_time=ramp,
        timeout=timeout,
        resources=Resources(keep_files=config.keep_files),
        options=config.options,
        raw_dir=results.raw_dir(csv_path) if csv_path else None,
        series_ms=series_window_ms(config),
        status_interval=config.status_interval or None,
        launch=config.launch,
    )


def series_window_ms(config: SweepConfig) -> int | None:
    """fio's log window in ms: the config's `series`, else runtime / 20 within 0.1-1 s (1 s size-bound);
    None for `series: false`."""
    if config.series == 0:
        return None
    window = config.series or min(max((config.runtime or 20.0) / 20, 0.1), 1.0)
    return max(1, round(window * 1000))


def fleet(config: SweepConfig, case: Case) -> tuple[Host, ...]:
    """The hosts a case runs on: the sweep's hosts for an engine that takes a fleet (FleetRunner); () (this
    machine) otherwise."""
    return tuple(config.hosts) if config.hosts and isinstance(runners.get(case.engine), FleetRunner) else ()


def schedule(config: SweepConfig, done: frozenset[results.Key] = frozenset()) -> list[Step]:
    """The runs still to do, case-major or (interleave: true) repetition-major, warmups first.

    A run is done when this machine's row (any host name) or, for a multi-host case, every host's
    row is ok (or skipped); a multi-host run reruns only its hosts without one.
    """
    reps = range(1, config.repetitions + 1)
    pairs = {(case, rep) for case, rep, _ in done}
    todo = [c for c in config.cases if (c.key, 0) not in pairs]
    points = [(c, r) for r in reps for c in todo] if config.interleave else [(c, r) for c in todo for r in reps]
    steps: list[Step] = []
    warmed: set[str] = set()
    for case, rep in points:
        hosts = fleet(config, case)
        left = tuple(h for h in hosts if (case.key, rep, h.label) not in done)
        if (not hosts and (case.key, rep) in pairs) or (hosts and not left):
            continue
        if case.key not in warmed:
            warmed.add(case.key)
            steps += [Step(case, 0, left, left == hosts)] * config.warmup
        steps.append(Step(case, rep, left, left == hosts))
    return steps


def resume(config: SweepConfig, csv_path: Path, skip_failed: bool = False) -> frozenset[results.Key]:
    """--resume: the (case, repetition, host) rows to leave alone. Failed ones are run again unless
    `skip_failed`; their failed rows are removed first, so the file keeps one row per key. A multi-host
    run that reruns only some hosts keeps its failed `all` row (the rerun's aggregate is not the fleet's)."""
    done = results.done_keys(csv_path, skip_failed)
    redo = {key for step in schedule(config, done) for key in _keys(step)}
    redo |= {(case, 0, host) for case, _, host in redo}  # a failed warmup's rows go when its case runs again
    results.drop_failed(csv_path, redo | results.done_keys(csv_path))  # and failed duplicates of finished rows
    return done


def _keys(step: Step) -> list[results.Key]:
    """The row keys a step writes: this machine's (any host name), or each host's and, when whole, `all`."""
    if not step.hosts:
        return [(step.case.key, step.repetition, results.ANY_HOST)]
    labels = [h.label for h in step.hosts] + ([AGGREGATE] if step.whole else [])
    return [(step.case.key, step.repetition, label) for label in labels]


def skip_reason(case: Case, ctx: RunContext) -> str | None:
    """Why a case cannot run: its runner does not do the pattern or transfer, or lacks a tool here."""
    runner = runners.get(case.engine)
    if case.pattern not in runner.patterns:
        return f"{runner.name} does not do pattern {case.pattern.value}"
    if "transfer" in runner.axes and case.transfer not in runner.transfers:
        return f"{runner.name} has no {case.transfer.value} transfer"
    return runner.unavailable(case, ctx)


def run(
    config: SweepConfig,
    writer: results.ResultWriter,
    ctx: RunContext,
    run_id: str,
    done: frozenset[results.Key] = frozenset(),
) -> Iterator[dict[str, Any]]:
    """Run every step not in `done`; yield each row (warmups too, with status 'warmup') once written.

    Each yielded row says whether it ends its step (`step_done`): a multi-host run yields a row per
    host, then its `all` row.
    """
    ctx.directory = prepare_target(ctx.directory, ctx.resources, private=not config.hosts)
    skipped: dict[str, str | None] = {}
    failed_warmup: set[str] = set()
    series = _Series(writer.path)
    try:
        yield from fill.prepare(config, ctx, skip_reason)  # space and mount checks, then the reads' files, once
        for step in schedule(config, done):
            key = step.case.key
            if key not in skipped:
                skipped[key] = skip_reason(step.case, ctx)
                if skipped[key]:
                    host = {"host": AGGREGATE} if step.hosts else {}
                    row = _row(step.case, 0, run_id, status="skipped", error=f"skipped: {skipped[key]}", **host)
                    writer.write(row)
                    yield {**row, "step_done": True}
            if skipped[key] or key in failed_warmup:
                continue
            rows = _measure_step(step, ctx, run_id, series)
            if step.repetition == 0:
                rows = _warmup(rows, bool(step.hosts))
                if rows[-1]["status"] == "failed":
                    failed_warmup.add(key)
            for index, row in enumerate(rows):
                if row["status"] != "warmup":
                    writer.write(row)
                yield {**row, "step_done": index == len(rows) - 1}
    finally:
        series.close()
        ctx.resources.cleanup()


def _warmup(rows: list[dict[str, Any]], multi: bool) -> list[dict[str, Any]]:
    """A warmup's rows to record: its failed rows when it failed everywhere (every host), else one
    unrecorded `warmup` row (a warmup that failed on some hosts only does not stop the case)."""
    hosts = [r for r in rows if r.get("host") != AGGREGATE] if multi else rows
    if all(r["status"] == "failed" for r in hosts):
        return hosts
    return [{**rows[-1], "status": "warmup"}]


def _measure_step(step: Step, ctx: RunContext, run_id: str, series: _Series) -> list[dict[str, Any]]:
    """Run one step: its rows (one, or a row per host and `all`), row flags set, series stored."""
    ctx = replace(ctx, hosts=step.hosts, run_stem=step.stem)  # this step's values; the sweep's are shared
    outcomes = _measure_hosts(step, ctx, run_id) if step.hosts else [_measure(step, ctx, run_id)]
    rows = []
    for row, measurement in outcomes:
        samples = measurement.series if measurement else ()
        row["flags"] = flags.text(flags.row_flags(row, samples))
        if samples and step.repetition:
            series.write(row, samples)
        rows.append(row)
    return rows


def _measure(step: Step, ctx: RunContext, run_id: str) -> tuple[dict[str, Any], Measurement | None]:
    """Run one step on this machine and turn its Measurement, or its error, into a row."""
    runner = runners.get(step.case.engine)
    started = _now()
    command = " ".join([*overrides(getattr(runner, "environment", ())), shlex.join(runner.command(step.case, ctx))])
    busy_before = busy_cpus()  # the neighbours' load, for the busy_machine flag (flags.busy_machine)
    try:
        measurement = check_figures(runner, runner.run(step.case, ctx))
    except GdsbenchError as exc:
        failed = _row(
            step.case, step.repetition, run_id, status="failed", error=str(exc), started_at=started, command=command
        )
        return failed, None
    raw = _keep_raw(ctx, step, measurement.raw)
    fields = {
        "status": "ok",
        "started_at": started,
        "command": command,
        "raw_output": raw,
        "busy_cpus_before": busy_before,
    }
    return _row(step.case, step.repetition, run_id, **fields, **measurement.row()), measurement


def _measure_hosts(step: Step, ctx: RunContext, run_id: str) -> list[tuple[dict[str, Any], Measurement | None]]:
    """Run one fio case on its hosts at once: a row per host, then `all` (left out when only some hosts ran)."""
    runner = runners.get(step.case.engine)
    assert isinstance(runner, FleetRunner)  # only its cases get hosts (fleet)
    started = _now()
    command = shlex.join(runner.command(step.case, ctx))
    outcome = runner.run_hosts(step.case, ctx)
    raw = _keep_raw(ctx, step, outcome.raw)  # one file for the run, shared by its rows
    fields = {"started_at": started, "command": command, "raw_output": raw}
    kept = [r for r in outcome.results if r.host != AGGREGATE or step.whole]
    return [(_row(step.case, step.repetition, run_id, **fields, **r.row()), r.measurement) for r in kept]


def _now() -> str:
    """The time a run starts, UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _keep_raw(ctx: RunContext, step: Step, raw: str | None) -> str | None:
    """Store a run's raw tool output beside the CSV; return its path."""
    if not raw or ctx.raw_dir is None or step.repetition == 0:
        return None
    ctx.raw_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.raw_dir / f"{step.stem}.txt"
    path.write_text(raw)
    return str(path)


class _Series:
    """The sweep's time-series table, opened when the first samples come."""

    def __init__(self, csv_path: Path) -> None:
        self.path = results.series_path(csv_path)
        self.writer: results.SeriesWriter | None = None

    def write(self, row: dict[str, Any], samples: tuple) -> None:
        """One run's samples under its row's identity."""
        if self.writer is None:
            self.writer = results.SeriesWriter(self.path)
        self.writer.write(row, samples)

    def close(self) -> None:
        """Close the table if it was opened."""
        if self.writer is not None:
            self.writer.close()


def _row(case: Case, repetition: int, run_id: str, **fields: Any) -> dict[str, Any]:
    """A results row: identity, case parameters (blank where the engine does not use them), then what was
    measured."""
    params = case.row()
    params.update(dict.fromkeys(runners.unused_options(case.engine, params)))
    return {
        "run_id": run_id,
        "host": sysinfo.host_name(),
        "case": case.key,
        "repetition": repetition,
        **params,
        **runners.get(case.engine).traits.row(params),
        **fields,
    }


def new_run_id() -> str:
    """A short unique id for a sweep run: UTC timestamp plus random suffix."""
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def results_path(config: SweepConfig, output: Path) -> Path:
    """Where a new sweep writes: <output>/<name>-<timestamp>.csv."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return output / f"{config.name}-{stamp}.csv"


def columns(config: SweepConfig) -> tuple[str, ...]:
    """The CSV columns of a sweep: the core schema, the columns its engines declare, then the option parameters
    its cases use."""
    extra = []
    for case in config.cases:
        extra += [name for name, _ in case.params if name not in results.COLUMNS and name not in extra]
    return (*results.COLUMNS, *declared(config), *extra)


def declared(config: SweepConfig) -> dict[str, Column]:
    """The result columns the sweep's engines declare (Runner.columns), beyond the core schema, by name."""
    engines = dict.fromkeys(case.engine for case in config.cases)
    found = [column for engine in engines for column in runners.get(engine).columns]
    return {column.name: column for column in found if column.name not in results.COLUMNS}


def metadata(config: SweepConfig, run_id: str) -> dict[str, Any]:
    """What the sidecar records: the run, the machine and target, tools, the resolved config, and the
    topology fingerprint of every host rows may name (see `fingerprints`)."""
    facts = sysinfo.collect(Path(config.directory), config.options)
    return {
        "run_id": run_id,
        "schema_version": results.SCHEMA_VERSION,
        "config_file": str(Path(config.source).resolve()),
        "config": dict(config.raw),
        "settings": {
            **config.settings,
            "hosts": [host.label for host in config.hosts],
            "launch": config.launch.record(),
        },
        "cases": len(config.cases),
        "columns": records(declared(config).values()),
        "environment": environment(RECORDED_ENV),
        **{key: value for key, value in facts.items() if key != "topology"},
        "fingerprint": {"hosts": fingerprints(config.hosts, facts["topology"])},
    }


#: Environment variables that change what a run does (ckptio's IOOptions, cuFile, kvikio, threads, the S3 endpoint
#: the s3 engines fall back to; never the credentials).
RECORDED_ENV = ("GDSBENCH_", "CKPTIO_", "CUFILE_", "KVIKIO_", "OMP_NUM_THREADS", "AWS_ENDPOINT_URL", "SLURM_")


def environment(prefixes: tuple[str, ...]) -> dict[str, str]:
    """Every environment variable starting with one of `prefixes`, sorted by name."""
    return {k: v for k, v in sorted(os.environ.items()) if prefixes and k.startswith(prefixes)}


def overrides(prefixes: tuple[str, ...]) -> list[str]:
    """`NAME=value` words for those variables, as a shell spells them before a command (so a row's command
    runs again as it ran)."""
    return [f"{k}={shlex.quote(v)}" for k, v in environment(prefixes).items()]


#: What the sidecar says of a remote host before (or without) what its fio server tells.
REMOTE = "remote host: only what its fio server reports (its host name and the disks its jobs used)"


def fingerprints(hosts: tuple[Host, ...], local: dict[str, Any], told: dict[str, dict] | None = None) -> dict:
    """The fingerprint of each host label rows carry: this machine's (by its name, and for every local
    server: a unix socket or a loopback address), and for a remote one what its fio server told (`told`)."""
    found: dict[str, Any] = {sysinfo.host_name(): local}
    for host in hosts:
        if host.is_local:
            found[host.label] = {**local, "collected": "here (a server on this machine)"}
        else:
            found[host.label] = {"collected": REMOTE, **(told or {}).get(host.label, {})}
    return found


def record_told(csv_path: Path, ctx: RunContext) -> None:
    """Add what remote hosts' fio servers told of themselves (ctx.host_facts) to the sidecar's fingerprint."""
    meta = results.read_sidecar(csv_path)
    hosts = (meta.get("fingerprint") or {}).get("hosts")
    if not ctx.host_facts or not isinstance(hosts, dict):
        return
    for label, facts in ctx.host_facts.items():
        if isinstance(hosts.get(label), dict) and hosts[label].get("collected") == REMOTE:
            hosts[label].update(facts)
    results.write_sidecar(csv_path, meta)
