"""The gdsbench command line: sweep, report, compare, qualify, doctor, runners, serve.

The one place that prints errors and picks exit codes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from gdsbench import __version__, cli_sweep
from gdsbench.errors import GdsbenchError, UsageError
from gdsbench.report import format_names as report_formats

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
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Folder for the results CSV and its sidecar.",
)
@click.option(
    "--resume",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Append to this results CSV, running only the (case, repetition) pairs it has not finished "
    "(failed ones run again, their rows replaced, unless --skip-failed).",
)
@click.option(
    "--skip-failed",
    is_flag=True,
    help="With --resume: count failed (case, repetition) pairs as done instead of running them again.",
)
@click.option("--dry-run", is_flag=True, help="Print the expanded cases and the exact command of each; run nothing.")
@click.option(
    "--gdsio",
    "gdsio_path",
    default=None,
    metavar="PATH",
    help="The gdsio executable (else the config's `gdsio`, $GDSIO, PATH, /usr/local/cuda*/gds/tools).",
)
@click.option(
    "--launcher",
    default=None,
    metavar="NAME",
    help="How distributed checkpoint cases start their ranks, over the config's `launcher:` name: "
    "local (torchrun here), torchrun, srun or mpirun.",
)
def sweep(
    config_file: Path | None,
    output: Path,
    resume: Path | None,
    skip_failed: bool,
    dry_run: bool,
    gdsio_path: str | None,
    launcher: str | None,
) -> None:
    """Run the sweep described by CONFIG_FILE (a YAML file; see configs/)."""
    from gdsbench import config as config_mod

    if skip_failed and resume is None:
        raise UsageError("--skip-failed: only with --resume RESULTS.csv")
    config_file = config_file or cli_sweep.config_of(resume)
    config = config_mod.load(config_file)
    if gdsio_path and not (Path(gdsio_path).is_file() and os.access(gdsio_path, os.X_OK)):
        raise UsageError(f"--gdsio {gdsio_path}: no executable file there")
    if gdsio_path:
        config = dataclasses.replace(config, options={**config.options, "gdsio": gdsio_path})
    if launcher:
        config = config_mod.with_launcher(config, launcher)
    if dry_run:
        cli_sweep.print_plan(config)
        return
    csv_path, rows = cli_sweep.execute(config, output, resume, skip_failed)
    sys.exit(cli_sweep.summary(rows, csv_path))


class ReportCommand(click.Command):
    """`gdsbench report`, whose options end with the report settings its derived tables declare (built when the
    command is parsed or its help shown: the tables import pandas, the CLI otherwise does not)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        """The command's own options, then one per declared report setting."""
        from gdsbench.report import summary

        declared = [click.Option([s.option, s.name], default=None, help=s.help) for s in summary.settings()]
        own = super().get_params(ctx)  # --help last
        return [*own[:-1], *declared, own[-1]]


@cli.command(cls=ReportCommand)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--by", default=None, help="Group by these columns (comma-separated), e.g. transfer,io_size.")
@click.option("--format", "fmt", type=click.Choice(report_formats()), default="text", show_default=True)
@click.option(
    "--plots",
    "plots_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write the figures (PNG and SVG) into this folder.",
)
@click.option(
    "--html",
    "html_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write a self-contained report.html (metadata, tables, figures, time series) into this folder.",
)
@click.option(
    "--series",
    "series_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also draw each case's bandwidth and latency over time (the .series.tsv beside each CSV) into this folder.",
)
def report(
    files: tuple[Path, ...],
    by: str | None,
    fmt: str,
    plots_dir: Path | None,
    html_dir: Path | None,
    series_dir: Path | None,
    **given: str | None,
) -> None:
    """Summarise results CSVs: fio-style run-status lines and a table of medians with min-max."""
    from gdsbench import report as report_mod
    from gdsbench import results
    from gdsbench.report import summary

    settings = {s.name: s.parse(text) for s in summary.settings() if (text := given.get(s.name)) is not None}
    frame = results.load(files)
    groups = [c.strip() for c in by.split(",") if c.strip()] if by else None
    click.echo(report_mod.render(frame, groups, fmt, settings), nl=False)
    if plots_dir or html_dir:
        _write_figures(frame, groups, plots_dir, html_dir, settings)
    if series_dir:
        _write_series(files, frame, series_dir)


def _write_figures(
    frame: Any,
    groups: list[str] | None,
    plots_dir: Path | None,
    html_dir: Path | None,
    settings: dict[str, Any],
) -> None:
    """report --plots / --html: draw the figures once, write files, say where they went."""
    from gdsbench.report import html, plots

    figures = plots.figures(frame)
    if plots_dir:
        with _figure_progress("figures") as tick:
            written = plots.save(figures, plots_dir, progress=tick)
        err.print(f"figures: {len(written)} files in {plots_dir}")
    if html_dir:
        with _figure_progress("html") as tick:
            err.print(f"html: {html.write(frame, html_dir, groups, figures, progress=tick, settings=settings)}")


def _write_series(files: tuple[Path, ...], frame: Any, folder: Path) -> None:
    """report --series: one figure per case from the time-series tables beside the CSVs."""
    from gdsbench import results
    from gdsbench.report import plots, series

    table = results.load_series(files)
    if table.empty:
        err.print(f"series: none beside {', '.join(map(str, files))} (fio cases record them; `series: false` did not)")
        return
    with _figure_progress("series") as tick:
        written = plots.save(series.figures(table, frame), folder, formats=("png",), progress=tick)
    err.print(f"series: {len(written)} figures in {folder}")


@contextlib.contextmanager
def _figure_progress(what: str) -> Iterator[Callable[[int, int, str], None] | None]:
    """A progress bar on stderr while figures are drawn, on a terminal only (logs get the summary line)."""
    if not err.is_terminal:
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err, transient=True) as bar:
        task = bar.add_task(what, total=None)

        def tick(done: int, total: int, name: str) -> None:
            bar.update(task, completed=done, total=total, description=f"{what}: {name}")

        yield tick


@cli.command("runners")
def list_runners() -> None:
    """List the engines a sweep can use, what they do and their options."""
    from gdsbench import runners

    for runner in runners.RUNNERS.values():
        click.echo(f"{runner.name}: {runner.description}")
        click.echo("  patterns: " + ", ".join(sorted(p.value for p in runner.patterns)))
        click.echo("  transfers: " + ", ".join(sorted(t.value for t in runner.transfers)))
        for key in runner.options:
            where = "" if key.axis else ", top level only"
            click.echo(f"  {key.name} (default {key.default!r}{where}): {key.help}")


@cli.command()
@click.option(
    "--directory",
    "-d",
    type=click.Path(path_type=Path),
    default=Path("/tmp"),
    show_default=True,
    help="The directory whose filesystem, O_DIRECT support and block device to check.",
)
@click.option("--gdsio", "gdsio_path", default=None, metavar="PATH", help="The gdsio executable to check.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the facts as JSON (the same facts every sweep's sidecar holds)."
)
def doctor(directory: Path, gdsio_path: str | None, as_json: bool) -> None:
    """What this machine can run: fio engines, gdsio, GPUs, nvidia-fs, cufile.json, kvikio, torch, the target."""
    from gdsbench import doctor as doctor_mod

    facts = doctor_mod.facts(directory, {"gdsio": gdsio_path} if gdsio_path else {})
    if as_json:
        click.echo(doctor_mod.to_json(facts))
    else:
        doctor_mod.render(facts, Console())


def _folder(name: str, short: str, default: str, text: str) -> Callable[[Any], Any]:
    """A click option naming a folder, with its default shown."""
    kind = click.Path(file_okay=False, path_type=Path)
    return click.option(name, short, type=kind, default=Path(default), show_default=True, help=text)


@cli.command()
@_folder("--output", "-o", "results/gpu-smoke", "The folder every file of the run goes to (00-summary.txt first).")
@_folder("--directory", "-d", "/var/tmp/gdsbench-smoke", "Where test files go: a real disk; ~12 GiB on a GPU host.")
@click.option("--gpu/--no-gpu", default=True, show_default=True, help="Run the GPU steps where a CUDA device is.")
@click.option("--quick", is_flag=True, help="Tiny sizes: checks the run end to end in well under a minute or two.")
def smoke(output: Path, directory: Path, gpu: bool, quick: bool) -> None:
    """The first run on a GPU server in one command: facts, doctor, GPU tests, sweeps, to one folder."""
    from gdsbench.testbeds import smoke as smoke_mod

    sys.exit(smoke_mod.run(output, directory, gpu=gpu, quick=quick))


@cli.command()
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--threshold",
    default="10%",
    show_default=True,
    help="A slower case fails the comparison when new/base is below 1 - threshold.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text", show_default=True)
@click.option("--strict", is_flag=True, help="Fail (exit 3) on a case left inconclusive by its rows' flags.")
@click.option(
    "--allow-flags",
    default="",
    metavar="NAMES",
    help="Comma-separated guard-rail flags to judge anyway (e.g. page_cache); others make a case inconclusive.",
)
def compare(base: Path, new: Path, threshold: str, fmt: str, strict: bool, allow_flags: str) -> None:
    """Compare NEW results with BASE case by case; exit 1 on a regression beyond --threshold, 3 when a case was
    inconclusive (its rows flagged) under --strict or when no case could be judged, else 0."""
    from gdsbench import compare as compare_mod
    from gdsbench import flags

    try:
        allowed = flags.parse_allowed(allow_flags)
    except ValueError as exc:
        raise UsageError(f"--allow-flags: {exc}") from None
    result = compare_mod.compare_files(base, new, compare_mod.parse_threshold(threshold), allowed)
    click.echo(compare_mod.render(result, fmt, str(base), str(new)), nl=False)
    sys.exit(result.exit_status(strict))


@cli.command()
@click.argument("config_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Folder for the results CSV and its sidecar (when running the sweep).",
)
@click.option(
    "--results",
    "results_files",
    multiple=True,
    type=click.Path(path_type=Path),
    help="Check these existing results CSVs instead of running the sweep (repeatable).",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Write the check outcomes as JUnit XML.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="How to print the outcomes on stdout (the sweep's progress goes to stderr).",
)
@click.option("--strict", is_flag=True, help="Fail (exit 3) on a check left inconclusive by its rows' flags.")
def qualify(
    config_file: Path, output: Path, results_files: tuple[Path, ...], junit: Path | None, fmt: str, strict: bool
) -> None:
    """Run CONFIG_FILE's sweep (or read --results) and judge its `checks:`; exit 1 if any check fails, 3 when one
    was inconclusive (its rows flagged) under --strict or when none passed, else 0."""
    from gdsbench import config as config_mod
    from gdsbench import flags, results
    from gdsbench import qualify as qualify_mod
    from gdsbench.report import junit as junit_mod

    config = config_mod.load(config_file)
    checks = qualify_mod.checks_of(config)
    if not results_files:
        csv_path, rows = cli_sweep.execute(config, output)
        cli_sweep.summary(rows, csv_path)
        results_files = (csv_path,)
    frame = flags.annotate(results.load(results_files))
    outcomes = qualify_mod.evaluate_all(checks, frame)
    props = {
        "config": str(config_file),
        "results": " ".join(map(str, results_files)),
        "run_id": ",".join(sorted(frame["run_id"].astype(str).unique())),
    }
    if fmt == "json":
        click.echo(qualify_mod.to_json(outcomes, config.name, props), nl=False)
    else:
        for line in qualify_mod.summary_lines(outcomes):
            click.echo(line)
    if junit:
        hosts = ",".join(sorted(frame["host"].astype(str).unique()))
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_mod.to_xml(outcomes, config.name, hosts, properties=props, strict=strict))
        err.print(f"junit: {junit}")
    sys.exit(junit_mod.exit_status(outcomes, strict))


@cli.command()
@click.option("--listen", metavar="ADDR", help="host:port, [ipv6]:port or sock:/path (default: a private unix socket).")
@click.option("--allow-all-interfaces", is_flag=True, help="Allow 0.0.0.0 or :: (anyone reaching it runs any job).")
@click.option("--daemonize", "pidfile", type=click.Path(dir_okay=False, path_type=Path), help="Run in the background.")
@click.option("--fio", "fio_binary", default="fio", show_default=True, help="The fio executable.")
def serve(listen: str | None, allow_all_interfaces: bool, pidfile: Path | None, fio_binary: str) -> None:
    """Start a fio server (fio --server) for multi-host sweeps, bound to one address, never all by default."""
    from gdsbench import serve as serve_mod

    sys.exit(
        serve_mod.serve(listen, allow_all_interfaces, pidfile, fio_binary, lambda line: click.echo(line, err=True))
    )


@cli.group()
def fastdev() -> None:
    """A RAM-backed block device that honours O_DIRECT (loop device over /dev/shm, ext4): a fast-disk stand-in."""


@fastdev.command("up")
@click.option("--size", default=None, metavar="SIZE", help="Its size, e.g. 8G (default: a quarter of free memory).")
@click.option(
    "--mount", "mount", type=click.Path(path_type=Path), default=Path("/mnt/gdsbench-fast"), show_default=True
)
def fastdev_up(size: str | None, mount: Path) -> None:
    """Make the stand-in and mount it (root); a failure or Ctrl-C undoes what was made."""
    from gdsbench.testbeds import fastdev as fastdev_mod
    from gdsbench.units import parse_size, size_label

    try:
        nbytes = parse_size(size) if size else None
    except ValueError:
        raise UsageError(f"--size: expected a size such as 8G (got {size!r})") from None
    with cli_sweep.terminate_as_interrupt():  # SIGTERM too: up undoes its steps, nothing is left mounted
        made = fastdev_mod.up(nbytes, mount)
    click.echo(f"{made.loop} ({size_label(made.size)}, ext4, direct I/O) mounted at {made.mount}")
    click.echo(f"sweep it with `directory: {made.mount}/gdsbench` (configs/fast-device.yaml); `gdsbench fastdev down`")


@fastdev.command("down")
def fastdev_down() -> None:
    """Unmount and remove what `fastdev up` made (nothing else)."""
    from gdsbench.testbeds import fastdev as fastdev_mod

    removed = fastdev_mod.down()
    click.echo("\n".join(removed) if removed else "nothing to remove: no stand-in is up")


@cli.group()
def ceph() -> None:
    """A one-host Ceph for tests and demos: mon, mgr, one OSD, radosgw (S3), CephFS; loopback only, auth off."""


def _data_dir(default: str) -> Any:
    """A testbed cluster's --dir option: its data directory, where all it makes lives."""
    return click.option(
        "--dir",
        "directory",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path(default),
        show_default=True,
        help="The cluster's data directory (all it makes lives there).",
    )


_CEPH_DIR = _data_dir("/var/tmp/gdsbench-ceph")


@ceph.command("up")
@_CEPH_DIR
@click.option("--no-rgw", is_flag=True, help="Without radosgw (S3).")
@click.option("--no-cephfs", is_flag=True, help="Without CephFS (an MDS and a ceph-fuse mount).")
def ceph_up(directory: Path, no_rgw: bool, no_cephfs: bool) -> None:
    """Bring the cluster up (root; installs Debian's Ceph packages if missing); a failure or Ctrl-C undoes it."""
    from gdsbench.testbeds import ceph as ceph_local
    from gdsbench.units import size_label

    with cli_sweep.terminate_as_interrupt():  # SIGTERM too: up undoes its steps, no daemon is left running
        if ceph_local.install():
            err.print("installed Debian's Ceph packages")
        ceph_local.check_can_make(directory.absolute())
        err.print(f"starting a one-host Ceph in {directory} (10-30 s)")
        cluster = ceph_local.up(directory, rgw=not no_rgw, cephfs=not no_cephfs)
    click.echo(f"mon {cluster.mon_address}; conf {cluster.conf} (clients: export CEPH_CONF={cluster.conf})")
    if cluster.s3_endpoint:
        key = cluster.env().get("AWS_ACCESS_KEY_ID", "")
        click.echo(f"S3 {cluster.s3_endpoint}, access key {key[:4]}...: credentials in {cluster.directory}/s3.env")
    if cluster.cephfs:
        click.echo(f"CephFS mounted at {cluster.cephfs} (ceph-fuse)")
    click.echo(f"pools {', '.join(cluster.pools)}; RBD image {cluster.rbd_pool}/{cluster.rbd_image}")
    click.echo(f"objects up to {size_label(cluster.max_object_size)} (fio's rados engine makes one per file)")
    click.echo(cluster.fio_note or "fio's rados and rbd engines see it: /etc/ceph/ceph.conf links to its conf")
    click.echo(f"`gdsbench ceph down --dir {cluster.directory}` removes it")


@ceph.command("down")
@_CEPH_DIR
def ceph_down(directory: Path) -> None:
    """Stop and remove what `ceph up` made in --dir (nothing else)."""
    from gdsbench.testbeds import ceph as ceph_local

    removed = ceph_local.down(directory)
    click.echo("\n".join(removed) if removed else f"nothing to remove: no cluster in {directory}")


@cli.command("import")
@click.argument("summaries", nargs=-1, required=True, type=click.Path(path_type=Path))
@_folder("--output", "-o", "results", "Folder for the results CSV and its sidecar.")
@click.option(
    "--checkpoints",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Checkpoints per phase where no per-rank stats beside a summary count them (summary.json does not record "
    "it; the rules' CLOSED runs take 10).",
)
def import_summaries(summaries: tuple[Path, ...], output: Path, checkpoints: int) -> None:
    """Import MLPerf Storage / DLIO checkpointing summary.json files, or folders (a run folder, a whole
    submission: every summary.json under it, with the per-rank stats beside each and the rules edition its path
    names), as one results CSV (and sidecar) that report, compare and qualify read beside gdsbench's runs; print
    its path."""
    from gdsbench import mlperf_import

    click.echo(str(mlperf_import.import_files(summaries, output, checkpoints)))


@cli.group()
def slurm() -> None:
    """A one-host Slurm for tests and demos: slurmctld, one slurmd and a munged of its own, on 127.0.0.1."""


_SLURM_DIR = _data_dir("/var/tmp/gdsbench-slurm")


@slurm.command("up")
@_SLURM_DIR
def slurm_up(directory: Path) -> None:
    """Bring the cluster up (root; installs Debian's Slurm and munge if missing); a failure or Ctrl-C undoes it.
    Prints `export SLURM_CONF=...` (eval it) for srun, sbatch and sinfo."""
    import shlex

    from gdsbench.testbeds import slurm as slurm_local

    with cli_sweep.terminate_as_interrupt():  # SIGTERM too: up undoes its steps, no daemon is left running
        if slurm_local.install():
            err.print("installed Debian's Slurm and munge packages")
        slurm_local.check_can_make(directory.absolute())
        cluster = slurm_local.up(directory)
    ctld, slurmd = cluster.ports
    click.echo(
        f"node {cluster.nodename} ({cluster.cpus} CPUs, {cluster.memory_mib} MiB), partition {cluster.partition}; "
        f"slurmctld 127.0.0.1:{ctld}, slurmd 127.0.0.1:{slurmd}",
        err=True,
    )
    click.echo(f"`gdsbench slurm down --dir {cluster.directory}` removes it; for srun, sbatch, sinfo:", err=True)
    click.echo(f"export SLURM_CONF={shlex.quote(str(cluster.conf))}")


@slurm.command("down")
@_SLURM_DIR
def slurm_down(directory: Path) -> None:
    """Cancel the cluster's jobs, stop and remove what `slurm up` made in --dir (nothing else)."""
    from gdsbench.testbeds import slurm as slurm_local

    removed = slurm_local.down(directory)
    click.echo("\n".join(removed) if removed else f"nothing to remove: no cluster in {directory}")


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="gdsbench")
