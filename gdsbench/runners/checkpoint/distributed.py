"""The template of distributed checkpoint engines (dcp, dcp_fast): ranks launched by torch's own launcher.

Every run of a case starts `world_size` ranks with torchrun (rendezvous on 127.0.0.1, a free port) running
the rank program (`gdsbench.cli_rank`; its work is `rank`'s), which saves or loads its share of the sweep's
workload between two barriers and reports its figures. The workload is written once per sweep to /dev/shm (a torch.save file
the ranks map: no copy per rank, no generation per rank) and removed with the sweep's other files.
The conditions are the same as for single-process engines: this sweep's previous checkpoint removed
before a save, the page cache made cold or warm before a load, free memory levelled before both.
A save of a preset runs `warmup` unmeasured saves first in the same processes (staging buffers and DCP's plan cache
then hold, as from a training run's second checkpoint on). Rows add blocking_seconds (what the training
loop waited: the async_save call, or the whole save) beside seconds (until durable on every rank),
bytes_on_disk and compression_ratio (workload bytes / bytes on disk).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from gdsbench import launchers, mlperf, workloads
from gdsbench.cases import Case, Pattern
from gdsbench.columns import TEXT, Column
from gdsbench.errors import ToolError
from gdsbench.keys import Key, boolean, one_of, positive_int
from gdsbench.launchers import Launch, Program
from gdsbench.runners.base import Measurement, RunContext, run_tools
from gdsbench.runners.checkpoint import cycle, io_options, train
from gdsbench.runners.checkpoint.base import CheckpointRunner, disk_bytes, workload_spec
from gdsbench.runners.checkpoint.conditions import level_memory
from gdsbench.runners.checkpoint.rank_half import RankHalf, WholeJob
from gdsbench.units import num2str, size_label

SHM = Path("/dev/shm")
RANK_PROGRAM = "gdsbench.cli_rank"  # the module torchrun starts on every rank (above the config: it parses the case)
LAYOUTS = ("sharded", "replicated")
EXECUTORS = ("thread", "process")
CODECS = ("none", "zstd", "blosc", "blosc-fast")
SAVE_LOAD = ("save", "load")
JOIN_SHARE = 0.9  # of a case's timeout, how long ranks wait for each other (to join, in a collective)

#: Options every distributed engine takes, beside the shared checkpoint options.
DISTRIBUTED_OPTIONS: tuple[Key, ...] = (
    Key(
        "world_size",
        positive_int,
        "a positive integer",
        1,
        "ranks, started by the sweep's launcher (local: torchrun here)",
    ),
    Key(
        "async",
        boolean,
        "true or false",
        False,
        "save in the background (dcp.async_save; tiered: TieredCheckpointer.save(blocking=False)): the caller waits "
        "for staging only (blocking_seconds), persisting runs behind",
    ),
    Key(
        "executor",
        one_of(*EXECUTORS),
        "thread or process",
        "thread",
        "where an async save persists: DCP's thread executor or its process executor",
    ),
    Key(
        "compression",
        one_of(*CODECS),
        "one of " + ", ".join(CODECS),
        "none",
        "lossless compression of the checkpoint (dcp: zstd only, DCP's stream extension)",
    ),
    Key(
        "layout",
        one_of(*LAYOUTS),
        "sharded or replicated",
        "sharded",
        "how ranks hold the model: sharded (every tensor Shard(0), as FSDP) or replicated (as DDP)",
    ),
    Key(
        "checkpoints",
        positive_int,
        "a positive integer",
        1,
        "checkpoints a case saves (or loads) in a row, each in a directory of its own, every rank timing its own "
        "part (max_rank_seconds, min_rank_bw_bytes: the MLPerf Storage rules' metrics)",
        patterns=SAVE_LOAD,
    ),
    Key(
        "scale",
        mlperf.scale_value,
        "a number in (0, 1] or a fraction such as 1/64",
        1.0,
        "an MLPerf geometry's tensors shrunk by this factor (presets are sized by checkpoint_size)",
        patterns=SAVE_LOAD,
    ),
)


def ranks_cost(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """What every rank's measured window cost together: CPU and peak RSS summed over ranks (RSS counts the
    pages ranks share once per rank), machine CPU summed over hosts (each host's figure from one rank: the
    highest, as its ranks read /proc/stat moments apart). None where a rank did not say."""

    def total(name: str, figures: list[dict[str, Any]]) -> float | None:
        values = [r.get(name) for r in figures]
        return None if not values or None in values else sum(values)  # type: ignore[arg-type]

    per_host: dict[str, dict[str, Any]] = {}
    for r in ranks:
        best = per_host.get(r.get("host", ""))
        if best is None or (r.get("machine_cpu_seconds") or 0) > (best.get("machine_cpu_seconds") or 0):
            per_host[r.get("host", "")] = r
    return {
        "cpu_seconds": total("cpu_seconds", ranks),
        "peak_rss_bytes": total("peak_rss_bytes", ranks),
        "staging_bytes": total("staging_bytes", ranks),
        "machine_cpu_seconds": total("machine_cpu_seconds", list(per_host.values())),
    }


def measured_cost(ranks: list[dict[str, Any]], **figures: Any) -> dict[str, Any]:
    """ranks_cost as Measurement keywords: CPU and RSS among its core fields, the staging among the declared
    `figures` (with the other `figures` given)."""
    cost = ranks_cost(ranks)
    figures["staging_bytes"] = cost.pop("staging_bytes")
    return {**cost, "figures": figures}


def keep_output(ctx: RunContext, done: list[Any]) -> str:
    """A failed launch's commands and what each printed, kept beside the results (`<raw>/<run>.launcher.txt`);
    its path ('' where the sweep keeps no raw output)."""
    if ctx.raw_dir is None:
        return ""
    ctx.raw_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.raw_dir / f"{ctx.run_stem}.launcher.txt"
    parts = [
        f"$ {' '.join(map(str, p.args))}\nexit status {p.returncode}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
        for p in done
    ]
    path.write_text("\n\n".join(parts))
    return str(path)


def with_nodes(measured: Measurement, ranks: list[dict[str, Any]], launch: Launch, case: Case) -> Measurement:
    """The measurement with the launcher, the nodes its ranks ran on and the slowest of them (its index and host,
    its slowest rank's time per checkpoint); where ranks ran on several nodes, each node's figures in the note."""
    nodes: dict[int, list[dict[str, Any]]] = {}
    for r in ranks:
        nodes.setdefault(int(r.get("node", 0)), []).append(r)
    timed = {n: t for n, rs in nodes.items() if (t := node_seconds(rs, case)) is not None}
    slowest = max(timed, key=lambda n: timed[n]) if timed else None
    figures = {
        "launcher": launch.name,
        "nodes": len(nodes),
        "slowest_node": None if slowest is None else f"{slowest} ({nodes[slowest][0].get('host', '')})",
        "slowest_node_seconds": None if slowest is None else timed[slowest],
    }
    note = (
        "; per node: " + ", ".join(node_text(n, nodes[n], timed.get(n)) for n in sorted(nodes))
        if len(nodes) > 1
        else ""
    )
    return replace(measured, figures={**measured.figures, **figures}, note=(measured.note or "") + note)


def with_options(measured: Measurement, ranks: list[dict[str, Any]]) -> Measurement:
    """The measurement with the IOOptions the ranks ran with, where they say (engines on ckptio): rank 0's on the row,
    and in the note how other ranks' differ (a node with other cores resolves other defaults)."""
    used = ranks[0].get("io_options")
    if used is None:
        return measured
    figures = {**measured.figures, **io_options.figures(used)}
    note = (measured.note or "") + options_note(used, ranks)
    return replace(measured, figures=figures, resolved=io_options.resolved(used), note=note)


def options_note(used: dict[str, Any], ranks: list[dict[str, Any]], most: int = 4) -> str:
    """The ranks (the first `most`) whose IOOptions differ from rank 0's `used`, and how, for a row's note."""
    differ = [
        f"rank {r.get('rank')} " + ", ".join(f"{k}={v}" for k, v in r["io_options"].items() if used.get(k) != v)
        for r in ranks
        if r.get("io_options") not in (None, used)
    ]
    more = f" (and {len(differ) - most} ranks more)" if len(differ) > most else ""
    return "; IOOptions unlike rank 0's: " + "; ".join(differ[:most]) + more if differ else ""


def node_seconds(ranks: list[dict[str, Any]], case: Case) -> float | None:
    """A node's time per checkpoint: its longest rank's, as the rules time ranks (the mean over checkpoints), else
    its slowest rank's whole phase; None where its ranks timed nothing."""
    if all("durations" in r for r in ranks):
        return cycle.rank_metrics(ranks).max_rank_seconds
    if all("seconds" in r for r in ranks):
        count = case.get("checkpoints", 1) if case.pattern is not Pattern.TRAIN else 1
        return max(r["seconds"] for r in ranks) / count
    return None


def node_text(node: int, ranks: list[dict[str, Any]], seconds: float | None) -> str:
    """One node's figures for a row's note: its host, its ranks, their bytes per checkpoint (where every rank
    says), its longest rank's time and its ranks' fastest and slowest."""
    numbers = sorted(r["rank"] for r in ranks)
    span = f"rank {numbers[0]}" if len(numbers) == 1 else f"ranks {numbers[0]}-{numbers[-1]}"
    moved = [r.get("own_bytes") or r.get("read_bytes") for r in ranks]
    size = f" {num2str(sum(moved), unit='B')}" if all(isinstance(b, int) for b in moved) else ""  # type: ignore[arg-type]
    times = [statistics.fmean(r["durations"]) for r in ranks if r.get("durations")]
    spread = f", rank means {min(times):.3f}-{max(times):.3f} s" if len(times) > 1 else ""
    took = "" if seconds is None else f" longest {seconds:.3f} s"
    return f"node {node} ({ranks[0].get('host', '')}) {span}{size}{took}{spread}"


def rank_errors(out: Path) -> list[str]:
    """What each rank that left the job said, from the files it wrote before it left (`rank-N.error`)."""
    return [f"{p.stem}: {p.read_text()}" for p in sorted(out.glob("rank-*.error"))]


def create_private(path: Path) -> BinaryIO:
    """A new file at `path` (mode 0600) open for writing: never an existing one, nor one through a link."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), "wb")


@dataclass(frozen=True)
class WorkloadFacts:
    """What a row says of the workload the ranks mapped: its size and what it is."""

    nbytes: int
    description: str


class DistributedRunner(CheckpointRunner):
    """A checkpoint engine whose saves and loads run in torchrun-launched ranks."""

    threaded = True
    suffix = ".dcp"
    marker = ".metadata"
    rank_file_pattern = ""  # a data file's name, its rank the first group, where the names say it
    ranks: RankHalf | WholeJob  # what each rank runs (rank_half.py): the engine's own half, which the rank program runs
    modules = ()  # torch is imported by the ranks, not by the sweep process
    columns = (
        *CheckpointRunner.columns,
        Column(
            "max_rank_seconds", "s", "the longest rank's time per checkpoint, mean over the phase's (MLPerf Storage)"
        ),
        Column(
            "min_rank_bw_bytes",
            "bytes/s",
            "the slowest rank's own bytes/s per checkpoint, mean over them (MLPerf Storage)",
        ),
        Column("compression_ratio", "ratio", "bytes / bytes_on_disk"),
        Column("launcher", "", "how the ranks started: local (torchrun here), torchrun, srun or mpirun", TEXT),
        Column("nodes", "count", "nodes the ranks ran on (the launcher's node index)"),
        Column(
            "slowest_node",
            "",
            "the node whose longest rank took longest per checkpoint (mean over the phase's): its index and host",
            TEXT,
        ),
        Column("slowest_node_seconds", "s", "that node's longest rank's seconds per checkpoint (mean over them)"),
    )

    def __init__(self) -> None:
        self._written: dict[Path, WorkloadFacts] = {}  # workload files in shared memory, this process's
        self._folder: Path | None = None  # the private folder holding them

    engine_options: tuple[Key, ...] = ()

    @property
    def extra_options(self) -> tuple[Key, ...]:  # type: ignore[override]
        """The distributed options and the engine's own."""
        return (*DISTRIBUTED_OPTIONS, *self.engine_options)

    def path(self, case: Case, ctx: RunContext) -> Path:
        """One checkpoint directory per engine, workload, world size, layout, compression (and count of
        checkpoints in a row, where more than one); an MLPerf geometry's named by its scale."""
        base = super().path(case, ctx)
        count = case.get("checkpoints", 1)
        tail = f".ws{case.get('world_size')}.{case.get('layout')}.{case.get('compression')}"
        return base.with_name(base.stem + tail + (f".n{count}" if count > 1 else "") + base.suffix)

    def files(self, path: Path) -> list[Path]:
        """Every file of the checkpoints at `path` (those in a row each in a directory of their own)."""
        return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else []

    def _track(self, path: Path, ctx: RunContext, written: bool) -> None:
        """As every engine's, and the folders of checkpoints in a row: after a save into a directory this sweep
        made, every folder and file under it is this sweep's (folders first: they are removed last)."""
        if written and path in ctx.resources.created:
            folders = sorted(p for p in path.rglob("*") if p.is_dir())
            ctx.resources.created.extend(p for p in folders if p not in ctx.resources.created)
        super()._track(path, ctx, written)

    def complete_all(self, case: Case, path: Path) -> bool:
        """Whether every checkpoint of the case's phase is whole."""
        return all(self.complete(d) for d in cycle.checkpoint_dirs(path, case.get("checkpoints", 1)))

    def workload_reason(self, case: Case) -> str | None:
        """Why the case's workload cannot run on ranks, as its kind says: an MLPerf geometry at a rank count its
        rules exclude, in a training loop or a replicated layout, or `scale` given to a preset."""
        kind, train = workloads.kind(case.get("workload")), case.pattern is Pattern.TRAIN
        return kind.reason(case.get("world_size"), case.get("scale", 1.0), case.get("layout"), train)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The launcher's command with the rank program's arguments (the first node's, where each node has one),
        then the case's conditions."""
        shared = None if workloads.kind(case.get("workload")).own_tensors else SHM / "<workload>.pt"
        job = self._job(case, self.path(case, ctx), shared, "<out>", self.warmup(case))
        commands = launchers.get(ctx.launch.name).commands(
            ctx.launch, case.get("world_size"), Program(RANK_PROGRAM, tuple(job)), 0
        )
        more = ["#", f"the same on each of {len(commands)} nodes"] if len(commands) > 1 else []
        return [*commands[0], *more, "#", *super().command(case, ctx)[3:]]

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Every engine's reasons (its packages, its workload, its own `cannot_run`), then why the sweep's launcher
        cannot start the case's ranks here (its tool missing, hosts it cannot use, a world size that does not split)."""
        found = super().unavailable(case, ctx)
        return found or launchers.get(ctx.launch.name).unavailable(ctx.launch, case.get("world_size"))

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Save or load the case's workload `checkpoints` times in a row, on `world_size` ranks, and measure it."""
        ctx.resources.close_at_end(self.release)
        shared, workload = self._workload(case, ctx)
        path = self.path(case, ctx)
        if case.pattern is Pattern.TRAIN:
            return self._train(case, ctx, path, shared, workload)
        if case.pattern is Pattern.SAVE:
            self.remove_previous(path, ctx)
            self._track(path, ctx, written=False)
            os.sync()
            notes = [level_memory(case.get("memory"), workload.nbytes)]
            figures = self._launch(case, ctx, path, shared, self.warmup(case))
            self._track(path, ctx, written=True)
        else:
            if not self.complete_all(case, path):
                self.remove_previous(path, ctx)
                self._track(path, ctx, written=False)
                self._launch(case.with_params(pattern=Pattern.SAVE), ctx, path, shared, warmup=0)
                self._track(path, ctx, written=True)
            notes = [level_memory(case.get("memory"), workload.nbytes)]
            figures = self._launch(case, ctx, path, shared, warmup=0)
            notes = [figures[0].get("cache_note") or "", *notes, "verified on every rank", self._sources(figures)]
            memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            kind = workloads.kind(case.get("workload"))
            notes.append(kind.load_note(workload.nbytes * case.get("checkpoints"), memory, case.get("cache")))
        measured = with_options(self._measurement(case, workload, path, figures, notes), figures)
        return with_nodes(measured, figures, ctx.launch, case)

    def warmup(self, case: Case) -> int:
        """Unmeasured saves before a measured save phase, as the workload's kind says (one for a preset, none for
        an MLPerf geometry: its rules time every checkpoint)."""
        return workloads.kind(case.get("workload")).warmup_saves if case.pattern is Pattern.SAVE else 0

    def _workload(self, case: Case, ctx: RunContext) -> tuple[Path | None, WorkloadFacts]:
        """The shared workload file the ranks map (none where every rank draws its own tensors: an MLPerf geometry)
        and what a row says of the workload."""
        facts = workloads.kind(case.get("workload")).facts(case.get("world_size"), case.get("scale", 1.0))
        if facts is not None:
            return None, WorkloadFacts(*facts)
        return self._workload_file(workload_spec(case, ctx), ctx)

    @staticmethod
    def _sources(ranks: list[dict[str, Any]]) -> str:
        """Which rank's checkpoint each rank read, where one read another's (the rules' rank shift)."""
        shifted = [(r["rank"], r["source_rank"]) for r in ranks if r.get("source_rank", r["rank"]) != r["rank"]]
        if not shifted:
            return ""
        return "read back across nodes: " + ", ".join(f"rank {a} <- {b}" for a, b in shifted)

    def release(self) -> None:
        """Forget the sweep's workload files and their folder (the sweep removes them with its other files)."""
        self._written.clear()
        self._folder = None
        super().release()

    def _train(
        self, case: Case, ctx: RunContext, path: Path, shared: Path | None, workload: WorkloadFacts
    ) -> Measurement:
        """A training loop on every rank checkpointing with this engine, then a restore; steps and stalls are
        the slowest rank's (the ranks step in lockstep)."""
        self.remove_previous(path, ctx)
        self._track(path, ctx, written=False)
        ranks = self._launch(case, ctx, path, shared, warmup=0)
        self._track(path, ctx, written=True)
        slowest = [
            [max(values) for values in zip(*(r[k] for r in ranks))] for k in ("steps", "draining", "stalls", "durable")
        ]
        times = train.LoopTimes(*slowest)
        figures = train.summarize(times, max(r["restore_seconds"] for r in ranks))
        notes = [
            f"{len(times.stalls)} checkpoints in {len(times.steps)} steps of {ranks[0]['step_reps']} matmuls "
            f"and an all-reduce on {len(ranks)} ranks ({case.get('layout')})",
            f"restore from cache={case.get('cache')}, verified on every rank",
            workload.description,
            "CPU and RSS of the whole loop, every rank",
        ]
        measured = train.measurement(figures, workload.nbytes, notes)
        cost = measured_cost(ranks, **measured.figures, bytes_on_disk=disk_bytes(self.files(path)))
        return with_nodes(with_options(replace(measured, **cost), ranks), ranks, ctx.launch, case)

    def _workload_file(self, spec: workloads.WorkloadSpec, ctx: RunContext) -> tuple[Path, WorkloadFacts]:
        """The workload as a torch.save file in shared memory, written once per sweep (ours: removed at cleanup),
        and what it is. The sweep then drops its own copy: the ranks map the shared one, and a second copy
        beside theirs would cost the memory their shards and async staging need."""
        name = f"{Path(spec.source).stem}.{size_label(spec.size)}.{spec.dtype}.s{spec.seed}.pt"
        path = self._private_folder(ctx) / name
        if path not in self._written or not path.exists():
            import torch

            workload = workloads.get(spec)
            ctx.resources.track_new([path])
            with create_private(path) as handle:
                torch.save(dict(workload.tensors), handle)
            self._written[path] = WorkloadFacts(workload.nbytes, workload.description)
            workloads.release()
        return path, self._written[path]

    def _private_folder(self, ctx: RunContext) -> Path:
        """This sweep's folder for its workload files in /dev/shm (else the sweep's directory): made afresh with
        an unguessable name, mode 0700 (/dev/shm is everyone's: a predictable name there could be a planted link),
        removed at cleanup once empty."""
        if self._folder is None:
            base = SHM if SHM.is_dir() else ctx.directory
            self._folder = Path(tempfile.mkdtemp(prefix=f"gdsbench-workload.{os.getpid()}.", dir=base))
            ctx.resources.created.append(self._folder)  # before its files: removed after them
        return self._folder

    def _launch(
        self, case: Case, ctx: RunContext, path: Path | str, shared: Path | None, warmup: int, stage: str = ""
    ) -> list[dict[str, Any]]:
        """Start the ranks through the sweep's launcher; return every rank's figures, or raise the first failure
        (a rank's own error, else the launcher's message, with the node where each node has a command)."""
        launcher = launchers.get(ctx.launch.name)
        with self._started(case, ctx, path, shared, warmup, stage) as (done, out):
            gathered = out / "ranks.json"
            ranks = json.loads(gathered.read_text()) if gathered.is_file() else []
            left = rank_errors(out)
        reported = [r["error"] for r in ranks if "error" in r]  # every rank reached the gather: its own words
        failed = [(n, p) for n, p in enumerate(done) if p.returncode != 0]
        if reported or failed or len(ranks) != case.get("world_size"):
            where = f"node {failed[0][0]}: " if failed and len(done) > 1 else ""
            said = [where + launcher.failure(failed[0][1].stderr, failed[0][1].returncode)] if failed else []
            why = reported[:1] or [*said, *left[:1]] or ["no figures gathered"]  # a rank that died: who, then why
            kept = keep_output(ctx, done)
            raise ToolError(f"{self.name}: " + "; ".join(why) + (f" (the launcher's output: {kept})" if kept else ""))
        return ranks

    def _launch_to_fail(
        self, case: Case, ctx: RunContext, path: Path | str, shared: Path | None, stage: str
    ) -> list[str]:
        """Start the ranks of a launch that one of them ends by killing itself (a fault): the ranks' own errors
        (the survivors', who lost a peer); ToolError where every node's launcher ended cleanly (nothing was killed)."""
        with self._started(case, ctx, path, shared, 0, stage) as (done, out):
            left = rank_errors(out)
        if all(p.returncode == 0 for p in done):
            raise ToolError(f"{self.name}: the {stage} launch ended cleanly: no rank was killed")
        return left

    @contextlib.contextmanager
    def _started(
        self, case: Case, ctx: RunContext, path: Path | str, shared: Path | None, warmup: int, stage: str
    ) -> Iterator[tuple[list[Any], Path]]:
        """The ranks run to their end through the sweep's launcher: each node's finished process and the folder of
        the ranks' output (gone after the block); ToolError at the sweep's timeout, saying which rank left the job."""
        launch = ctx.launch
        launcher = launchers.get(launch.name)
        with tempfile.TemporaryDirectory(prefix="gdsbench-ranks-") as out:
            join = ["--join-timeout", f"{ctx.timeout * JOIN_SHARE:g}"]  # a rank says who never came, before the limit
            job = (*self._job(case, path, shared, out, warmup), *join, *(("--stage", stage) if stage else ()))
            commands = launcher.commands(
                launch, case.get("world_size"), Program(RANK_PROGRAM, job), launcher.port(launch)
            )
            secret = launchers.new_secret()  # every launch its own: its ranks meet only at their own store
            try:
                env = launchers.environment(secret)
                done = run_tools(commands, timeout=ctx.timeout, env=env, stdin=secret + "\n")
            except ToolError as exc:  # a timeout: say which rank left the job, and why, when one did
                raise ToolError("; ".join([f"{self.name}: {exc}", *rank_errors(Path(out))])) from None
            yield done, Path(out)

    def _job(self, case: Case, path: Path | str, shared: Path | None, out: str, warmup: int) -> list[str]:
        """The rank program's arguments: the case as its key (the rank parses it with the config's keys), the
        checkpoint, the shared workload (none: an MLPerf geometry), and the unmeasured saves before a measured
        phase."""
        workload = ["--workload-file", str(shared)] if shared is not None else []
        return ["--case", case.key, "--checkpoint", str(path), "--out", out, *workload, "--warmup", str(warmup)]

    def _measurement(
        self,
        case: Case,
        workload: WorkloadFacts,
        path: Any,
        ranks: list[dict[str, Any]],
        notes: list[str],
        on_disk: int | None = None,
    ) -> Measurement:
        """The row: the longest barrier-to-barrier time of the phase and blocking of any rank, the rules' per-rank
        metrics, disk use (`on_disk`: what an object store's listing says), per-rank shares."""
        count = case.get("checkpoints", 1)
        on_disk = disk_bytes(self.files(path)) if on_disk is None else on_disk
        nbytes = workload.nbytes * count
        seconds = max(r["seconds"] for r in ranks)  # barrier to barrier on each rank: the slowest is the phase
        blocking = max(r.get("blocking_seconds", seconds) for r in ranks)
        per_rank = cycle.rank_metrics(ranks)
        notes.append(f"{count} checkpoints in a row" if count > 1 else "")
        notes.append(f"{case.get('world_size')} ranks ({case.get('layout')}), {workload.description}")
        notes += [self._shares(ranks, cycle.checkpoint_dirs(path, count)[0])]
        copies = [r["host_copy_seconds"] for r in ranks if "host_copy_seconds" in r]
        if copies:
            notes.append(f"host copy {max(copies):.3f} s (blocking / copy = {blocking / max(copies):.2f})")
        cost = measured_cost(
            ranks,
            bytes_on_disk=on_disk,
            max_rank_seconds=per_rank.max_rank_seconds,
            min_rank_bw_bytes=per_rank.min_rank_bw_bytes,
            compression_ratio=nbytes / on_disk if on_disk else None,
        )
        return Measurement(
            bytes=nbytes,
            seconds=seconds,
            bw_bytes=nbytes / seconds,
            **cost,
            blocking_seconds=blocking if case.pattern is Pattern.SAVE else None,
            cache=case.get("cache") if case.pattern is Pattern.LOAD else None,
            note="; ".join(filter(None, notes)),
        )

    def rank_files(self, path: Path) -> list[int]:
        """Bytes each rank's data files take, where the engine's file names say the rank (`rank_file_pattern`)."""
        sizes: dict[int, int] = {}
        for p in self.files(path) if self.rank_file_pattern else []:
            match = re.fullmatch(self.rank_file_pattern, p.name)
            if match:
                sizes[int(match[1])] = sizes.get(int(match[1]), 0) + p.stat().st_size
        return [sizes.get(rank, 0) for rank in range(max(sizes) + 1)] if sizes else []

    def _shares(self, ranks: list[dict[str, Any]], first: Path) -> str:
        """Bytes each rank wrote (saves) or read (loads) per checkpoint (the phase's first, at `first`), for the
        row's note."""
        written = next((r["rank_bytes"] for r in ranks if r.get("rank_bytes")), None) or self.rank_files(first)
        if written and "blocking_seconds" in ranks[0]:
            return "written per rank: " + ", ".join(num2str(b, unit="B") for b in written)
        read = [r.get("read_bytes") for r in ranks]
        if all(isinstance(b, int) for b in read):
            return "read per rank: " + ", ".join(num2str(b, unit="B") for b in read)  # type: ignore[arg-type]
        return ""
