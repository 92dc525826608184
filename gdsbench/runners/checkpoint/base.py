"""The template of a checkpoint engine: what it declares, and the measured save and load every engine shares.

An engine module subclasses InProcessRunner, declares its name, the API it calls, its transfers and
packages, and implements `save` and `load` (an engine whose saves run elsewhere, in torchrun's ranks,
subclasses CheckpointRunner and implements `run`); `prepare` (unmeasured set-up), `cannot_run` (a reason it
cannot run here) and `release` (free what it keeps between cases) are optional. Everything else is the same
for every engine:
- The workload (gdsbench.workloads) is built once per (workload, checkpoint_size, dtype, seed) and
  held in memory, so every engine of a sweep saves the same tensors.
- save: unmeasured, `prepare` (by default: remove this sweep's previous checkpoint of the case, so
  every save writes new files) and flush dirty pages (sync); measured, the engine's save plus fsync
  of every file it wrote and of the directory: a checkpoint counts only once it is durable, so
  page-cache engines pay for their writeback too.
- load: unmeasured, write the checkpoint first when this sweep has none yet, `prepare`, then make
  the cache cold or warm; measured, the engine's load with every byte in memory; unmeasured, every
  tensor compared with the workload, so a wrong load fails the case instead of reporting a number.
- Before every measured call, free memory is put in one state for every engine (conditions.level_memory).
- cpu_seconds, machine_cpu_seconds, peak_rss_bytes: what the measured call cost (resources.Usage).
Engine failures (OSError, torch's and the engines' own errors) become ToolError: a failed row.
"""

from __future__ import annotations

import abc
import functools
import importlib
import importlib.util
import os
import pickle
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import FILES, FILES_CEILING, Column, Traits
from gdsbench.errors import GdsbenchError, ToolError, UsageError
from gdsbench.keys import Key, non_negative_int, one_of, size
from gdsbench.runners.base import Measurement, RunContext, axes_of
from gdsbench.runners.checkpoint import train
from gdsbench.runners.checkpoint.conditions import (
    CACHE_STATES,
    MEMORY_STATES,
    fsync_path,
    level_memory,
    mib,
    set_cache,
    verify,
)
from gdsbench.runners.file_sets import FileSet
from gdsbench.runners.resources import Usage

#: Option keys of every checkpoint engine (matrix axes or top-level values), shared by all of them.
OPTIONS: tuple[Key, ...] = (
    Key(
        "workload",
        workloads.parse_source,
        workloads.source_expected(),
        "llama3-8b",
        "checkpoint workload: a preset (" + ", ".join(workloads.PRESETS) + ") scaled to checkpoint_size, "
        "or a .pt/.safetensors state dict (its tensors as they are)",
    ),
    Key(
        "checkpoint_size",
        size,
        "a size such as 256M or 4G",
        None,
        "state-dict bytes a preset is scaled to (layers, widths, rows); default: file_size",
    ),
    Key(
        "dtype",
        one_of(*workloads.DTYPE_MIXES),
        "one of " + ", ".join(workloads.DTYPE_MIXES),
        "mixed",
        "preset tensor dtypes: bf16, fp32, or mixed (bf16 matrices, fp32 embeddings/norms/biases)",
    ),
    Key(
        "cache",
        one_of(*CACHE_STATES),
        "cold, cold-machine or warm",
        "cold",
        "page cache before a checkpoint load: cold (the checkpoint's files evicted: fsync + posix_fadvise), "
        "cold-machine (the whole page cache dropped, root only) or warm (files read once); checkpoints in S3: cold "
        "= the OSDs' caches dropped, warm = the objects read once",
    ),
    Key("seed", non_negative_int, "a non-negative integer", 0, "seed of the preset's random values"),
    Key(
        "memory",
        one_of(*MEMORY_STATES),
        "one of " + ", ".join(MEMORY_STATES),
        "recent",
        "free memory before a save or load, the same for every engine: recent (C heap trimmed, then memory the "
        "size of the checkpoint touched and freed just before, as a restarted job finds it), idle (heap trimmed, "
        "then 10 s idle, so a VM balloon's free page reporting has handed free memory back to the host), "
        "as-is (nothing done)",
    ),
    *train.TRAIN_OPTIONS,
)


@dataclass(frozen=True)
class Package:
    """A module an engine imports and the line that installs it: where it is missing, the engine's cases are
    skipped rows that say so."""

    module: str
    install: str


#: Checkpoint formats add headers, indexes and 4 KiB alignment to the tensors' bytes.
CHECKPOINT_OVERHEAD = 1.01
CHECKPOINT_SLACK = 1 << 20
#: What a checkpoint case holds in memory at its peak: its state dict and, while a load runs, the copy it loads.
CHECKPOINT_MEMORY = 2.0

TORCH = Package("torch", "pip install 'gdsbench[checkpoint]'")  # ckptio brings torch
CKPTIO = Package("ckptio", "pip install 'gdsbench[checkpoint]'")
SAFETENSORS = Package("safetensors", "pip install 'gdsbench[checkpoint]'")
S3TORCH = Package("s3torchconnector", "pip install 'gdsbench[s3torch]'")

#: Exceptions an engine raises for a bad file or a failed I/O; anything else is a bug (traceback).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError)


class CheckpointRunner(abc.ABC):
    """A checkpoint engine as a sweep runner: its declarations, options, command and where its checkpoints
    live. Engines that save and load in this process subclass InProcessRunner; others implement `run`."""

    name = ""
    description = ""
    calls: Mapping[Pattern, str] = {}  # the API each pattern calls, for --dry-run and the results
    patterns = frozenset({Pattern.SAVE, Pattern.LOAD, Pattern.TRAIN})
    transfers = frozenset({Transfer.CPU_CACHED})
    extra_options: tuple[Key, ...] = ()  # the engine's own YAML keys, beside the shared OPTIONS
    packages: tuple[Package, ...] = (TORCH,)  # the modules the engine needs, checked before its cases run
    modules: tuple[str, ...] = ("torch",)  # imported before the first measured call, so it never pays for them
    threaded = False  # whether the `threads` axis is the engine's I/O thread count
    library_defaults: frozenset[str] = frozenset()  # axes a config's omission leaves to the library (None in the case)
    block_options: frozenset[str] = frozenset()  # options taken from the case's own matrix block only (else None)
    suffix = ".pt"
    marker: str | None = None  # a checkpoint is a directory, complete once this file exists (None: one file)
    traits = Traits(FILES, ceiling=FILES_CEILING)  # held to fio's best write (saves) or read (loads) of the run
    columns: tuple[Column, ...] = (
        Column("bytes_on_disk", "bytes", "what the checkpoint's files (or objects) hold"),
        Column(
            "staging_bytes", "bytes", "the most staging memory the engine held at once (every rank's), where it says"
        ),
        *train.COLUMNS,
    )

    @property
    def options(self) -> tuple[Key, ...]:
        """The shared checkpoint options and the engine's own."""
        return (*OPTIONS, *self.extra_options)

    @property
    def axes(self) -> frozenset[str]:
        """Case parameters: pattern, transfer, threads when the engine has I/O threads, and its options."""
        return axes_of(("pattern", "transfer", *(("threads",) if self.threaded else ())), self.options)

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """Why the engine cannot run this case here (beyond missing packages), or None."""
        return None

    def release(self) -> None:
        """Free what the engine keeps between cases (a GPU copy, locked buffers, the workload): the sweep
        calls it once, when it ends, so nothing leaks into the next sweep of the same process."""
        workloads.release()

    def call(self, case: Case) -> str:
        """The API call a case makes, as --dry-run and the results show it."""
        if case.pattern is Pattern.TRAIN:  # the engine's own save and load calls, however it names them
            save, load = (self.call(case.with_params(pattern=p)) for p in (Pattern.SAVE, Pattern.LOAD))
            return f"training loop: {save} every {case.get('interval')} steps, then {load}"
        return self.calls[case.pattern]

    # -- the runner contract ---------------------------------------------------------------------

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why this engine cannot run here: a missing package (with its install line), or the engine's own reason."""
        missing = [p for p in self.requirements(case) if importlib.util.find_spec(p.module) is None]
        if missing:
            installs = "; ".join(dict.fromkeys(p.install for p in missing))
            return f"{', '.join(p.module for p in missing)} not installed: {installs}"
        return self.workload_reason(case) or self.cannot_run(case, ctx)

    def requirements(self, case: Case) -> tuple[Package, ...]:
        """The engine's packages, and those reading the case's workload file takes (ckptio flattens it; a
        .safetensors file is read by safetensors)."""
        source = str(case.get("workload"))
        if not workloads.kind(source).from_file:
            return self.packages
        reader = (SAFETENSORS,) if source.endswith(".safetensors") else ()
        return tuple(dict.fromkeys((*self.packages, CKPTIO, *reader)))

    def workload(self, case: Case, ctx: RunContext) -> workloads.Workload:
        """The case's workload (built once, held for the sweep, released at its end), the engine's modules imported
        so no measured call pays for them; a bad workload is a UsageError."""
        try:
            workload = workloads.get(workload_spec(case, ctx))
        except ValueError as exc:
            raise UsageError(f"workload {case.get('workload')!r}: {exc}") from None
        for module in self.modules:
            importlib.import_module(module)
        ctx.resources.close_at_end(self.release)
        return workload

    def workload_reason(self, case: Case) -> str | None:
        """Why the case's workload cannot run on this engine: an MLPerf geometry is every rank's own tensors, for
        engines with ranks."""
        if workloads.kind(case.get("workload")).own_tensors:
            return f"{case.get('workload')} is written by ranks: run it with dcp, dcp_fast or torch_save_ranks"
        return None

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The API call and the conditions of a case, readable in --dry-run and in the results."""
        spec = workload_spec(case, ctx)
        argv = ["python-api", self.call(case), str(self.path(case, ctx))]
        argv += [f"threads={case.get('threads')}"] if self.threaded and case.get("threads") is not None else []
        sized = workloads.kind(spec.source).words(spec.size, spec.dtype, case.get("scale"), case.get("checkpoints"))
        argv += [f"workload={spec.source}", *sized, f"seed={spec.seed}"]
        argv += ["fsync=files+directory"] if case.pattern is Pattern.SAVE else [f"cache={case.get('cache')}"]
        argv += [f"{k}={case.get(k)}" for k in ("steps", "step_time", "interval") if k in dict(case.params)]
        return [*argv, f"memory={case.get('memory')}"]

    @abc.abstractmethod
    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Save or load the case's workload once and measure it."""

    # -- where a checkpoint lives ----------------------------------------------------------------

    def path(self, case: Case, ctx: RunContext) -> Path:
        """Where this engine keeps the case's checkpoint: named by engine, workload (its size and dtype, or its
        scale), seed."""
        spec = workload_spec(case, ctx)
        label = workloads.kind(spec.source).label(spec.size, spec.dtype, case.get("scale", 1.0))
        stem = f"gdsbench-ckpt.{self.name}.{label}.s{spec.seed}"
        return ctx.directory / f"{stem}{self.suffix}"

    def file_sets(self, cases: list[Case], ctx: RunContext) -> list[FileSet]:
        """One checkpoint per workload, size, dtype and seed; a recycling one keeps a spare beside it."""
        found: dict[Path, int] = {}
        for case in cases:
            copies = 2 if case.get("recycle") else 1
            need = int(workload_bytes(case, ctx) * CHECKPOINT_OVERHEAD + CHECKPOINT_SLACK) * copies
            path = self.path(case, ctx)
            found[path] = max(found.get(path, 0), need)
        return [FileSet(str(path.name), (path,), need) for path, need in found.items()]

    def memory_bytes(self, case: Case, ctx: RunContext) -> int:
        """What the case holds in memory at its peak: its state dict and, while a load runs, the copy it loads."""
        return int(workload_bytes(case, ctx) * CHECKPOINT_MEMORY)

    def files(self, path: Path) -> list[Path]:
        """The files a checkpoint at `path` consists of."""
        if self.marker is None:
            return [path] if path.is_file() else []
        return sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else []

    def complete(self, path: Path) -> bool:
        """Whether a whole checkpoint is at `path` (a directory engine writes its marker last)."""
        return path.is_file() if self.marker is None else (path / self.marker).is_file()

    def remove_previous(self, path: Path, ctx: RunContext) -> None:
        """Delete this sweep's previous checkpoint at `path` (files it created there only, never others)."""
        if path in ctx.resources.created:
            for created in [p for p in ctx.resources.created if p == path or path in p.parents]:
                if created.is_file():
                    created.unlink()

    def _track(self, path: Path, ctx: RunContext, written: bool) -> None:
        """Before a save: the checkpoint is this sweep's when it does not exist yet; after it, so is every
        file written into a directory this sweep made."""
        if not written:
            ctx.resources.track_new([path])
        elif self.marker is not None and path in ctx.resources.created:
            ctx.resources.created.extend(p for p in self.files(path) if p not in ctx.resources.created)


class InProcessRunner(CheckpointRunner):
    """An engine that saves and loads in the sweep's process: it implements `save` and `load` (and may
    override `prepare`, `errors`); the measured, durable, verified run around them is the same for all."""

    last_path: str | None = None  # GPU engines: the path (gds_path.PATHS) the last save or load's bytes took
    last_staging: int | None = None  # engines that say so: the most staging memory the last save held at once

    @abc.abstractmethod
    def save(self, staged: Any, path: Path, case: Case) -> str | None:
        """Write `staged` (from prepare) to `path`; return how it wrote, for the row's note, or None.
        The runner fsyncs the files and the directory after it."""

    @abc.abstractmethod
    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """Read the checkpoint at `path` completely into memory and return its state dict."""

    def prepare(self, case: Case, workload: workloads.Workload, path: Path, ctx: RunContext) -> Any:
        """Unmeasured set-up before a save or load; returns what save()/load() receive. By default a save
        gets the workload's tensors and writes new files (this sweep's previous checkpoint is removed)."""
        if case.pattern is Pattern.SAVE:
            self.remove_previous(path, ctx)
            return workload.tensors
        return None

    def errors(self) -> tuple[type[BaseException], ...]:
        """Exceptions that mean the engine failed (a bad file, a failed I/O), not a bug in gdsbench."""
        return EXPECTED_ERRORS

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Save or load the case's workload once and measure it."""
        workload = self.workload(case, ctx)
        path = self.path(case, ctx)
        if case.pattern is Pattern.SAVE:
            return self._measure_save(case, ctx, workload, path)
        if case.pattern is Pattern.TRAIN:
            return self._measure_train(case, ctx, workload, path)
        return self._measure_load(case, ctx, workload, path)

    # -- the measurement -------------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> tuple[Any, float, Usage]:
        """Run fn timed, with what it cost; an engine failure becomes a ToolError."""
        self.last_path = self.last_staging = None
        return timed(self.name, self.errors(), fn)

    def _write(self, case: Case, ctx: RunContext, workload: workloads.Workload, path: Path) -> tuple[float, Usage, str]:
        """Durably write a checkpoint (engine save + fsync of its files and directory), timed; return the
        seconds, what it cost and the note (how the engine wrote, the memory state)."""
        staged = self.prepare(as_save(case), workload, path, ctx)
        self._track(path, ctx, written=False)
        os.sync()  # earlier dirty pages are not this save's to write back
        memory_note = level_memory(case.get("memory"), workload.nbytes)  # page-cache writers need new memory

        def durable_save() -> str | None:
            how = self.save(staged, path, case)
            for written in self.files(path):
                fsync_path(written)
            for directory in ([path] if path.is_dir() else []) + [path.parent]:
                fsync_path(directory)
            return how

        try:
            how, seconds, usage = self._call(durable_save)
        except GdsbenchError:
            self.remove_previous(path, ctx)  # a failed save's partial files must not pass for a checkpoint
            raise
        self._track(path, ctx, written=True)
        return seconds, usage, "; ".join(filter(None, [how, memory_note]))

    def _measure_save(self, case: Case, ctx: RunContext, workload: workloads.Workload, path: Path) -> Measurement:
        """Measure one durable save."""
        seconds, usage, how = self._write(case, ctx, workload, path)
        return Measurement(
            bytes=workload.nbytes,
            seconds=seconds,
            bw_bytes=workload.nbytes / seconds,
            **usage.columns(),
            path=self.last_path,
            figures={"staging_bytes": self.last_staging, "bytes_on_disk": disk_bytes(self.files(path))},
            note="; ".join(filter(None, [how, workload.description, f"RSS before {mib(usage.rss_before)}"])),
        )

    def _measure_load(self, case: Case, ctx: RunContext, workload: workloads.Workload, path: Path) -> Measurement:
        """Measure one load from the requested cache state, then verify every tensor."""
        if not self.complete(path):
            self._write(case, ctx, workload, path)
        staged = self.prepare(case, workload, path, ctx)
        cache_note = set_cache(self.files(path), case.get("cache"))
        memory_note = level_memory(case.get("memory"), workload.nbytes)
        loaded, seconds, usage = self._call(functools.partial(self.load, path, case, staged))
        del staged  # destination buffers are the caller's to free before the next case
        try:
            verify(workload.tensors, loaded, path)
        finally:
            del loaded
        return Measurement(
            bytes=workload.nbytes,
            seconds=seconds,
            bw_bytes=workload.nbytes / seconds,
            **usage.columns(),
            path=self.last_path,
            cache=case.get("cache"),
            figures={"bytes_on_disk": disk_bytes(self.files(path))},
            note=f"{cache_note}; {memory_note}; verified; {workload.description}; RSS before {mib(usage.rss_before)}",
        )

    def _measure_train(self, case: Case, ctx: RunContext, workload: workloads.Workload, path: Path) -> Measurement:
        """A training loop checkpointing with this engine (durable saves, the previous one replaced), then a
        restore from the page-cache state `cache` into memory plus one step, verified."""
        step = train.Step(case.get("step_time"))
        saving = case.with_params(pattern=Pattern.SAVE, memory="as-is")  # the loop's memory is its own

        def checkpoint() -> None:
            self._write(saving, ctx, workload, path)

        with Usage() as usage:
            times = train.run_loop(step, case.get("steps"), case.get("interval"), checkpoint)
        loading = case.with_params(pattern=Pattern.LOAD)
        staged = self.prepare(loading, workload, path, ctx)
        cache_note = set_cache(self.files(path), case.get("cache"))

        def restore() -> Mapping[str, Any]:
            loaded = self.load(path, loading, staged)
            step()
            return loaded

        loaded, seconds, _ = self._call(restore)
        staged = None  # destination buffers are freed before the next case
        try:
            verify(workload.tensors, loaded, path)
        finally:
            del loaded
        notes = [
            f"{len(times.stalls)} checkpoints in {len(times.steps)} steps of {step.reps} matmuls",
            f"restore from {cache_note}, verified",
            workload.description,
        ]
        return train.measurement(train.summarize(times, seconds), workload.nbytes, notes, usage)


def as_save(case: Case) -> Case:
    """The save case of a load case (a load without its checkpoint writes one first, unmeasured)."""
    return Case(case.engine, tuple((k, Pattern.SAVE if k == "pattern" else v) for k, v in case.params))


def disk_bytes(files: list[Path]) -> int:
    """Bytes the checkpoint's files take (their sizes)."""
    return sum(path.stat().st_size for path in files)


def workload_bytes(case: Case, ctx: RunContext) -> int:
    """The bytes of a checkpoint case's state dict: its workload file's size, or the preset's."""
    spec = workload_spec(case, ctx)
    return Path(spec.source).stat().st_size if spec.is_file else spec.size


def workload_spec(case: Case, ctx: RunContext) -> workloads.WorkloadSpec:
    """The workload a case uses; checkpoint_size defaults to the sweep's file_size."""
    return workloads.WorkloadSpec(
        source=case.get("workload"),
        size=case.get("checkpoint_size") or ctx.file_size,
        dtype=case.get("dtype"),
        seed=case.get("seed"),
    )


def timed(name: str, errors: tuple[type[BaseException], ...], fn: Callable[[], Any]) -> tuple[Any, float, Usage]:
    """Run fn timed, with what it cost; an engine's failure (one of `errors`) becomes a ToolError naming it."""
    try:
        with Usage() as usage:
            started = time.perf_counter()
            result = fn()
            seconds = time.perf_counter() - started
    except GdsbenchError:
        raise
    except errors as exc:
        cause = failure_cause(exc)
        if isinstance(cause, (GdsbenchError, KeyboardInterrupt)):
            raise cause from None
        raise ToolError(f"{name}: {type(cause).__name__}: {first_line(cause)}") from exc
    return result, seconds, usage


def failure_cause(exc: BaseException) -> BaseException:
    """What failed: DCP's CheckpointException (a BaseException) unwrapped to what its rank raised."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        return failure_cause(next(iter(failures.values()))[0])
    return exc


def first_line(exc: BaseException) -> str:
    """An exception's message on one line (engines' messages can span many)."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
