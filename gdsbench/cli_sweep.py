"""The sweep command's run, for the CLI: start-up (target, sidecar before the CSV), the cases under a progress
bar, Ctrl-C and SIGTERM (finished rows kept, the --resume line), the summary and its exit status, --dry-run's
plan. Only gdsbench.cli imports it."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape

from gdsbench import progress
from gdsbench.errors import GdsbenchError, UsageError
from gdsbench.report.tables import case_text

err = Console(stderr=True)


def say_resume(csv_path: Path, console: Console = err) -> None:
    """The command that continues a stopped sweep, whole on one line (never wrapped at the console's width, its
    path never read as markup), so it can be copied from a log."""
    console.print(
        f"continue with: gdsbench sweep --resume {shlex.quote(str(csv_path))}",
        soft_wrap=True,
        markup=False,
        highlight=False,
    )


def execute(
    config: Any, output: Path, resume: Path | None = None, skip_failed: bool = False
) -> tuple[Path, list[dict[str, Any]]]:
    """Run a sweep under a progress bar, writing results and sidecar; Ctrl-C keeps the rows and exits 130."""
    from gdsbench import results
    from gdsbench import sweep as sweep_mod

    if not resume:
        results_folder(output)
    csv_path = resume or sweep_mod.results_path(config, output)
    run_id = (results.read_sidecar(csv_path) if resume else {}).get("run_id") or sweep_mod.new_run_id()
    ctx = sweep_mod.context(config, csv_path)
    writer, done = start(config, csv_path, run_id, ctx, resume, skip_failed)
    rows: list[dict[str, Any]] = []
    try:  # the CSV and its sidecar exist: a stop from here on keeps them and says how to resume
        with terminate_as_interrupt():
            steps = Counter(step.case.key for step in sweep_mod.schedule(config, done))
            err.print(
                f"[bold]{config.name}[/]: {len(config.cases)} cases x {config.repetitions} repetitions -> {csv_path}"
            )
            if config.hosts:
                err.print("hosts: " + ", ".join(host.label for host in config.hosts) + " (fio cases)")
            for row in progress.rows_with_bar(sweep_mod.run(config, writer, ctx, run_id, done), steps, err, ctx):
                rows.append(row)
    except GdsbenchError:
        writer.close()
        if not resume and not rows:
            remove_refused(csv_path)
        raise
    except KeyboardInterrupt as stop:
        writer.close()
        sweep_mod.record_told(csv_path, ctx)
        kept = len(results.read_rows(csv_path)[1])
        err.print(f"\ninterrupted: kept {kept} finished rows in {csv_path}")
        say_resume(csv_path)
        sys.exit(interrupt_status(stop))
    writer.close()
    sweep_mod.record_told(csv_path, ctx)
    return csv_path, rows


def start(
    config: Any, csv_path: Path, run_id: str, ctx: Any, resume: Path | None, skip_failed: bool
) -> tuple[Any, frozenset]:
    """Before the first case: the target checked, the sidecar written (before the CSV: a results file never
    lacks its sidecar), a resumed file's torn row cut and finished rows found, the CSV opened. Ctrl-C here
    leaves a new run's files removed (they hold no row) and a resumed file as it was, and says so."""
    from gdsbench import results
    from gdsbench import sweep as sweep_mod

    try:
        with terminate_as_interrupt():
            ctx.directory = sweep_mod.prepare_target(ctx.directory, ctx.resources, private=not config.hosts)
            err.print(target_line(config, ctx.directory), markup=False, highlight=False, soft_wrap=True)
            if not resume:
                results.write_sidecar(csv_path, sweep_mod.metadata(config, run_id))
            torn = results.cut_torn_line(csv_path) if resume else 0
            if torn:
                err.print(f"[yellow]{csv_path}: its last row was torn ({torn} bytes cut off); it runs again[/]")
            done = sweep_mod.resume(config, csv_path, skip_failed) if resume else frozenset()
            return results.ResultWriter(csv_path, sweep_mod.columns(config)), done
    except GdsbenchError:
        ctx.resources.cleanup()  # a target folder it made, still empty
        if not resume:
            remove_refused(csv_path)
        raise
    except KeyboardInterrupt as stop:
        ctx.resources.cleanup()
        if resume:
            err.print(f"\ninterrupted before the first case: {csv_path} is as it was")
            say_resume(csv_path)
        else:
            remove_refused(csv_path)
            err.print("\ninterrupted before the first case: no row was measured and no file is left; run it again")
        sys.exit(interrupt_status(stop))


def target_line(config: Any, directory: Path) -> str:
    """What the sweep measures: its folder (a private one inside the configured `directory` where others write
    there) and the file system and device under it."""
    from gdsbench import filesets

    configured = Path(os.path.realpath(config.directory))
    private = (
        f" (a private folder in {configured}: others can write there)"
        if (directory.parent == configured and directory.name.startswith("gdsbench-"))
        else ""
    )
    return f"target: {directory}{private}: {filesets.mount_text(directory)}"


def interrupt_status(stop: KeyboardInterrupt) -> int:
    """130 for Ctrl-C, 143 for SIGTERM (128 + the signal, as shells report them)."""
    return 128 + signal.SIGTERM if isinstance(stop, Terminated) else 130


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived: stop as on Ctrl-C."""


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (kill, a batch scheduler, a CI timeout) stops a sweep as Ctrl-C does: the finished rows are
    kept and the files it made (its test files, a workload in /dev/shm) removed, not left behind."""

    def stop(signum: int, frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def config_of(resume: Path | None) -> Path:
    """The config file a results CSV was made from (recorded in its sidecar), for --resume alone."""
    from gdsbench import results

    if resume is None:
        raise UsageError("give a CONFIG_FILE, or --resume RESULTS.csv")
    source = results.read_sidecar(resume).get("config_file")
    if not source:
        raise UsageError(f"{resume}: no sidecar names its config; pass the CONFIG_FILE too")
    return Path(source)


def summary(rows: list[dict[str, Any]], csv_path: Path) -> int:
    """Print counts, failures and skip reasons (grouped); return the exit status: 1 if any run failed or
    nothing was measured (every case skipped)."""
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "failed", "skipped")}
    err.print(f"rows: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped -> {csv_path}")
    for row in rows:
        if row["status"] == "failed":
            err.print(f"[red]failed[/] {case_text(row['case'])} (rep {row['repetition']}): {escape(str(row['error']))}")
    for reason, n in Counter(r["error"] for r in rows if r["status"] == "skipped").most_common():
        err.print(f"[yellow]{n} case{'s' if n > 1 else ''}[/] {escape(reason)}", markup=True, highlight=False)
    nothing = counts["skipped"] and not counts["ok"] and not counts["failed"]
    if nothing:
        err.print("[red]nothing was measured[/]: every case was skipped (reasons above)")
    err.print(f"report: gdsbench report {shlex.quote(str(csv_path))}")
    return 1 if counts["failed"] or nothing else 0


def results_folder(output: Path) -> None:
    """Make the results folder (-o), or refuse it in one line: under a regular file, not writable."""
    from gdsbench.sweep import folder_problem

    problem = folder_problem(output)
    if problem:
        raise UsageError(f"-o {output}: the results folder {problem}")


def remove_refused(csv_path: Path) -> None:
    """A sweep refused before its first row leaves nothing: its header-only CSV and sidecar go (both its own)."""
    from gdsbench import results

    for path in (csv_path, results.sidecar_path(csv_path)):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        results.raw_dir(csv_path).rmdir()


def print_plan(config: Any) -> None:
    """--dry-run: each case, whether it would be skipped, and its exact command."""
    from gdsbench import runners
    from gdsbench import sweep as sweep_mod

    ctx = sweep_mod.context(config, None)
    click.echo(
        f"{config.name}: {len(config.cases)} cases x {config.repetitions} repetitions"
        f" (+{config.warmup} warmup) from {config.source}"
    )
    for index, case in enumerate(config.cases, 1):
        click.echo(f"[{index}] {case_text(case.key)}")
        case_ctx = replace(ctx, hosts=sweep_mod.fleet(config, case))  # a multi-host case: the client and its jobs
        reason = sweep_mod.skip_reason(case, case_ctx)
        if reason:
            click.echo(f"    skipped: {reason}")
        else:
            click.echo("    " + shlex.join(runners.get(case.engine).command(case, case_ctx)))
