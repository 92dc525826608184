"""The gdsbench command line: sweep, report, runners. The one place that prints errors and picks exit codes."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gdsbench import __version__
from gdsbench.errors import GdsbenchError, UsageError

err = Console(stderr=True)


class Gdsbench(click.Group):
    """A click group whose expected errors print as one line with their exit code, no traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GdsbenchError as exc:
            click.echo(f"gdsbench: error: {exc}", err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=Gdsbench, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gdsbench")
def cli() -> None:
    """Storage and checkpoint benchmarks: fio, gdsio and checkpoint engines over YAML sweeps."""


@cli.command()
@click.argument("config_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--output", "-o", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True, help="Folder for the results CSV and its sidecar.")
@click.option("--resume", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Append to this results CSV, running only the cases it does not have yet.")
@click.option("--dry-run", is_flag=True, help="Print the expanded cases and the exact command of each; run nothing.")
@click.option("--gdsio", "gdsio_path", default=None, metavar="PATH",
              help="The gdsio executable (else the config's `gdsio`, $GDSIO, PATH, /usr/local/cuda*/gds/tools).")
def sweep(config_file: Path | None, output: Path, resume: Path | None, dry_run: bool, gdsio_path: str | None) -> None:
    """Run the sweep described by CONFIG_FILE (a YAML file; see configs/)."""
    from gdsbench import config as config_mod, results, sweep as sweep_mod

    config_file = config_file or _config_of(resume)
    config = config_mod.load(config_file)
    if gdsio_path:
        config = dataclasses.replace(config, options={**config.options, "gdsio": gdsio_path})
    if dry_run:
        _print_plan(config)
        return
    csv_path = resume or sweep_mod.results_path(config, output)
    meta = results.read_sidecar(csv_path) if resume else {}
    run_id = meta.get("run_id") or sweep_mod.new_run_id()
    done = results.done_keys(csv_path) if resume else frozenset()
    ctx = sweep_mod.context(config, csv_path)
    sweep_mod.prepare_target(ctx.directory)
    writer = results.ResultWriter(csv_path, sweep_mod.columns(config))
    if not resume:
        results.write_sidecar(csv_path, sweep_mod.metadata(config, run_id))
    steps = Counter(step.case.key for step in sweep_mod.schedule(config, done))
    err.print(f"[bold]{config.name}[/]: {len(config.cases)} cases x {config.repetitions} repetitions -> {csv_path}")
    rows: list[dict[str, Any]] = []
    try:
        for row in _progress(sweep_mod.run(config, writer, ctx, run_id, done), steps):
            rows.append(row)
    except KeyboardInterrupt:
        writer.close()
        kept = sum(1 for r in rows if r["status"] != "warmup")
        err.print(f"\ninterrupted: kept {kept} finished rows in {csv_path}")
        err.print(f"continue with: gdsbench sweep --resume {shlex.quote(str(csv_path))}")
        sys.exit(130)
    writer.close()
    sys.exit(_summary(rows, csv_path))


def _config_of(resume: Path | None) -> Path:
    """The config file a results CSV was made from (recorded in its sidecar), for --resume alone."""
    from gdsbench import results

    if resume is None:
        raise UsageError("give a CONFIG_FILE, or --resume RESULTS.csv")
    source = results.read_sidecar(resume).get("config_file")
    if not source:
        raise UsageError(f"{resume}: no sidecar names its config; pass the CONFIG_FILE too")
    return Path(source)


def _progress(rows: Iterator[dict[str, Any]], steps: Counter) -> Iterator[dict[str, Any]]:
    """Wrap the sweep's rows in a rich progress bar with an ETA, counting scheduled runs per case."""
    columns = (TextColumn("{task.description:<28}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    seen: Counter = Counter()
    with Progress(*columns, console=err, transient=False) as progress:
        task = progress.add_task("sweep", total=sum(steps.values()))
        for row in rows:
            key = row["case"]
            # A skipped case, or one whose warmup failed, stands for all its scheduled runs.
            whole_case = row["status"] == "skipped" or (row["status"] == "failed" and row["repetition"] == 0)
            advance = steps[key] - seen[key] if whole_case else 1
            seen[key] += advance
            label = f"{row['engine']} {row.get('pattern')} {row['status']}"
            progress.update(task, advance=advance, description=label)
            yield row


def _summary(rows: list[dict[str, Any]], csv_path: Path) -> int:
    """Print counts and failures; return the exit status (1 if any run failed)."""
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("ok", "failed", "skipped")}
    err.print(f"rows: {counts['ok']} ok, {counts['failed']} failed, {counts['skipped']} skipped -> {csv_path}")
    for row in rows:
        if row["status"] == "failed":
            err.print(f"[red]failed[/] {row['case']} (rep {row['repetition']}): {row['error']}")
    err.print(f"report: gdsbench report {shlex.quote(str(csv_path))}")
    return 1 if counts["failed"] else 0


def _print_plan(config: Any) -> None:
    """--dry-run: each case, whether it would be skipped, and its exact command."""
    from gdsbench import runners, sweep as sweep_mod

    ctx = sweep_mod.context(config, None)
    click.echo(f"{config.name}: {len(config.cases)} cases x {config.repetitions} repetitions"
               f" (+{config.warmup} warmup) from {config.source}")
    for index, case in enumerate(config.cases, 1):
        click.echo(f"[{index}] {case.key}")
        reason = sweep_mod.skip_reason(case, ctx)
        if reason:
            click.echo(f"    skipped: {reason}")
        else:
            click.echo("    " + shlex.join(runners.get(case.engine).command(case, ctx)))


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--by", default=None, help="Group by these columns (comma-separated), e.g. transfer,io_size.")
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "csv"]), default="text", show_default=True)
def report(files: tuple[Path, ...], by: str | None, fmt: str) -> None:
    """Summarise results CSVs: fio-style run-status lines and a table of medians with min-max."""
    from gdsbench import report as report_mod, results

    frame = results.load(files)
    groups = [c.strip() for c in by.split(",") if c.strip()] if by else None
    click.echo(report_mod.render(frame, groups, fmt), nl=False)


@cli.command("runners")
def list_runners() -> None:
    """List the engines a sweep can use, what they do and their options."""
    from gdsbench import runners

    for runner in runners.RUNNERS.values():
        click.echo(f"{runner.name}: {runner.description}")
        click.echo("  patterns: " + ", ".join(sorted(p.value for p in runner.patterns)))
        click.echo("  transfers: " + ", ".join(sorted(t.value for t in runner.transfers)))
        for key in runner.options:
            click.echo(f"  {key.name} (default {key.default!r}): {key.help}")


@cli.command()
@click.option("--directory", "-d", type=click.Path(path_type=Path), default=Path("/tmp"), show_default=True,
              help="The directory whose filesystem, O_DIRECT support and block device to check.")
@click.option("--gdsio", "gdsio_path", default=None, metavar="PATH", help="The gdsio executable to check.")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON (the same facts every sweep's sidecar holds).")
def doctor(directory: Path, gdsio_path: str | None, as_json: bool) -> None:
    """What this machine can run: fio engines, gdsio, GPUs, nvidia-fs, cufile.json, kvikio, torch, the target."""
    from gdsbench import doctor as doctor_mod

    facts = doctor_mod.facts(directory, {"gdsio": gdsio_path} if gdsio_path else {})
    if as_json:
        click.echo(doctor_mod.to_json(facts))
    else:
        doctor_mod.render(facts, Console())


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="gdsbench")
