"""What every checkpoint engine shares: option keys, the measured save/load, cache state, verification.

Mechanism, for every engine alike:
- The workload (gdsbench.workloads) is built once per (workload, checkpoint_size, dtype, seed) and
  held in memory, so every engine of a sweep saves the same tensors.
- save: unmeasured, remove this sweep's previous checkpoint of the case and flush dirty pages (sync);
  measured, the engine's save plus fsync of every file it wrote and of the directory: a checkpoint
  counts only once it is durable, so page-cache engines pay for their writeback too.
- load: unmeasured, write the checkpoint first when this sweep has none yet (so a load case works
  without its save case), then make the cache cold (drop_caches when root, else posix_fadvise
  DONTNEED on each file; the row's note says which) or warm (every file read once); measured, the
  engine's load with every byte in memory; unmeasured, every tensor compared with the workload, so a
  wrong load fails the case instead of reporting a fast number. Before every measured save and
  load, free memory is put in one state for every engine (`memory`, see level_memory: garbage
  collected, the C heap trimmed, then recent or idle): page-cache writers (torch.save) need new
  memory as much as loaders do.
- peak_rss_bytes: this process's highest RSS during the measured call, sampled every 5 ms by a
  thread (ru_maxrss is a lifetime maximum, useless in a long-lived sweep process). It includes the
  workload held in memory; the note gives the RSS just before the call.
Engine failures (OSError, torch's and the engines' own errors) become ToolError: a failed row.
"""

from __future__ import annotations

import abc
import gc
import importlib
import importlib.util
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import GdsbenchError, ToolError, UsageError
from gdsbench.keys import Key, non_negative_int, one_of, size
from gdsbench.runners import cache as cache_control
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.units import size_label

CACHE_STATES = ("cold", "warm")
MEMORY_STATES = ("recent", "idle", "as-is")
IDLE_SECONDS = 10.0  # free page reporting returns memory free for ~2 s; 10 s lets it finish for GiBs
SAMPLE_SECONDS = 0.005
READ_CHUNK = 16 << 20

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
        "cold or warm",
        "cold",
        "page cache before a checkpoint load: cold (dropped or fadvised away) or warm (files read once)",
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
)
OPTION_NAMES = tuple(key.name for key in OPTIONS)
#: Exceptions an engine raises for a bad file or a failed I/O; anything else is a bug (traceback).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError)


class PeakRss:
    """Samples this process's RSS every 5 ms on a thread while in a `with` block; `peak` is the most."""

    def __init__(self) -> None:
        import psutil

        self._process = psutil.Process()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="gdsbench-rss", daemon=True)
        self.before = self.peak = self._process.memory_info().rss

    def _sample(self) -> None:
        """Record the highest RSS until told to stop."""
        while not self._stop.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)


def fsync_path(path: Path) -> None:
    """fsync one file or directory (a read-only descriptor is enough on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_through(path: Path) -> None:
    """Read a file once through the page cache (to make it warm), reusing one buffer."""
    buffer = bytearray(READ_CHUNK)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def set_cache(files: list[Path], cache: str) -> str:
    """Make the checkpoint's files cold or warm in the page cache; say how, for the row's note."""
    if cache == "warm":
        for path in files:
            read_through(path)
        return "warm: files read once before the load"
    if cache_control.is_root() and cache_control.drop_caches():
        return "cold: page cache dropped (drop_caches)"
    for path in files:
        cache_control.evict(path)
    return "cold: posix_fadvise(DONTNEED) on each file (not root)"


def level_memory(state: str, nbytes: int) -> str:
    """Put free memory in the same state before every engine's save or load; say which, for the note.

    New memory is the cost of most loads (and of page-cache saves), and in a VM its price depends on
    history: memory the guest freed a moment ago is still backed by the host, memory free for a while
    may have been handed back (virtio-balloon free page reporting) and must be backed again at first
    touch (0.4-0.8 GB/s here against 24-30 GB/s, benchmarks/first_touch.py). Without this, an engine's
    number depends on what the case before it freed.
    """
    if state == "as-is":
        return "memory: as left by the previous case"
    trimmed = return_free_heap()
    if state == "recent":
        from gdsbench.checkpoint.memory import Prefaulter, address_of, huge_buffer

        mapping = huge_buffer(nbytes)
        Prefaulter([(address_of(mapping), len(mapping))], os.cpu_count() or 1).join()
        mapping.close()
        note = f"memory: {mib(nbytes)} touched and freed just before"
    else:
        time.sleep(IDLE_SECONDS)
        note = f"memory: {IDLE_SECONDS:.0f} s idle before"
    return note + (", C heap trimmed" if trimmed else "")


def return_free_heap() -> bool:
    """Collect garbage and hand the C heap's free pages back to the kernel (glibc malloc_trim).

    Without it, an engine that frees GiBs of small-ish tensors (glibc serves allocations up to 32 MiB
    from its heap once a large free has raised its mmap threshold) leaves them touched in the heap,
    and the next engine's malloc reuses them with no page faults: torch.load ran 2.7x faster right
    after DCP's load than before it. False where libc has no malloc_trim (not glibc).
    """
    from gdsbench.checkpoint.memory import trim_heap

    gc.collect()
    return trim_heap()


def verify(expected: Mapping[str, Any], loaded: Any, path: Path) -> None:
    """Raise ToolError unless `loaded` holds exactly the expected tensors (names, dtypes, shapes, values)."""
    import torch

    if not isinstance(loaded, Mapping):
        raise ToolError(f"{path}: load returned {type(loaded).__name__}, not a state dict")
    missing = [name for name in expected if name not in loaded]
    if missing or len(loaded) != len(expected):
        raise ToolError(f"{path}: loaded {len(loaded)} tensors, expected {len(expected)} (missing: {missing[:3]})")
    for name, tensor in expected.items():
        got = loaded[name]
        same = (
            isinstance(got, torch.Tensor)
            and got.dtype == tensor.dtype
            and got.shape == tensor.shape
            and torch.equal(got.cpu(), tensor)
        )
        if not same:
            raise ToolError(f"{path}: loaded tensor {name!r} differs from the saved one")


class CheckpointRunner(abc.ABC):
    """A checkpoint engine as a sweep runner; subclasses implement save and load for one library.

    Subclasses set name, description, calls (the API called per pattern), transfers, packages, and
    threaded (whether `threads` is the engine's I/O thread count), and implement save() and load().
    """

    name = ""
    description = ""
    calls: Mapping[Pattern, str] = {}
    patterns = frozenset({Pattern.SAVE, Pattern.LOAD})
    transfers = frozenset({Transfer.CPU_CACHED})
    options = OPTIONS
    packages: tuple[str, ...] = ("torch",)  # importable modules the engine needs
    modules: tuple[str, ...] = ("torch",)  # imported before the first measured call, so it never pays for them
    threaded = False
    suffix = ".pt"

    @property
    def axes(self) -> frozenset[str]:
        """Case parameters: pattern, transfer, threads when the engine has I/O threads, the options."""
        return frozenset({"pattern", "transfer", *(("threads",) if self.threaded else ()), *OPTION_NAMES})

    # -- what an engine implements ------------------------------------------------------------

    @abc.abstractmethod
    def save(self, state: Any, path: Path, case: Case) -> None:
        """Write `state` (from stage_save) to `path`; the runner fsyncs the files and directory after."""

    @abc.abstractmethod
    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """Read the checkpoint at `path` completely into memory and return its state dict."""

    def why_not(self, case: Case, ctx: RunContext) -> str | None:
        """An engine-specific reason it cannot run here (beyond missing packages), or None."""
        return None

    def stage_save(self, case: Case, tensors: Mapping[str, Any]) -> Any:
        """Unmeasured preparation of what save() writes (the workload tensors themselves by default)."""
        return tensors

    def stage_load(self, case: Case, tensors: Mapping[str, Any], path: Path) -> Any:
        """Unmeasured preparation load() uses (destination buffers, for engines that load in place)."""
        return None

    def replaces_in_place(self, case: Case) -> bool:
        """Whether a save needs the previous checkpoint on disk (it replaces it itself); otherwise the
        runner removes its own previous checkpoint, unmeasured, and every save writes a new file."""
        return False

    def prepare_save(self, state: Any, path: Path, case: Case, ctx: RunContext) -> None:
        """Unmeasured work that brings `path` to the state the measured save starts from (none by default)."""
        return None

    def write_state(self, path: Path, case: Case) -> Any:
        """What describe_write compares against after the save (nothing by default)."""
        return None

    def describe_write(self, before: Any, path: Path, case: Case) -> str:
        """How the measured save wrote its files, for the row's note ("" by default)."""
        return ""

    def files(self, path: Path) -> list[Path]:
        """The files a checkpoint at `path` consists of."""
        return [path] if path.is_file() else []

    def errors(self) -> tuple[type[BaseException], ...]:
        """Exceptions that mean the engine failed (a bad file, a failed I/O), not a bug in gdsbench."""
        return EXPECTED_ERRORS

    # -- the runner contract ---------------------------------------------------------------------

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why this engine cannot run here: a missing package, or the engine's own reason."""
        for package in self.packages:
            if importlib.util.find_spec(package) is None:
                return f"{package} not installed"
        return self.why_not(case, ctx)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The API call a case makes, readable in --dry-run and in the results."""
        spec = workload_spec(case, ctx)
        argv = ["python-api", self.calls[case.pattern], str(self.path(case, ctx))]
        argv += [f"threads={case.get('threads')}"] if self.threaded else []
        argv += [
            f"workload={spec.source}",
            f"checkpoint_size={size_label(spec.size)}",
            f"dtype={spec.dtype}",
            f"seed={spec.seed}",
        ]
        argv += ["fsync=files+directory"] if case.pattern is Pattern.SAVE else [f"cache={case.get('cache')}"]
        argv += [f"memory={case.get('memory', 'recent')}"]
        return argv

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Save or load the case's workload once and measure it."""
        try:
            workload = workloads.get(workload_spec(case, ctx))
        except ValueError as exc:
            raise UsageError(f"workload {case.get('workload')!r}: {exc}") from None
        for module in self.modules:
            importlib.import_module(module)
        path = self.path(case, ctx)
        if case.pattern is Pattern.SAVE:
            return self._measure_save(case, ctx, workload, path)
        return self._measure_load(case, ctx, workload, path)

    # -- the measurement -------------------------------------------------------------------------

    def path(self, case: Case, ctx: RunContext) -> Path:
        """Where this engine keeps the case's checkpoint: named by engine, workload, size, dtype, seed."""
        spec = workload_spec(case, ctx)
        source = Path(spec.source).stem if spec.is_file else spec.source
        return (
            ctx.directory
            / f"gdsbench-ckpt.{self.name}.{source}.{size_label(spec.size)}.{spec.dtype}.s{spec.seed}{self.suffix}"
        )

    def _call(self, fn: Callable[[], Any]) -> tuple[Any, float, PeakRss]:
        """Run fn timed with RSS sampling; an engine failure becomes a ToolError."""
        try:
            with PeakRss() as rss:
                started = time.perf_counter()
                result = fn()
                seconds = time.perf_counter() - started
        except GdsbenchError:
            raise
        except self.errors() as exc:
            raise ToolError(f"{self.name}: {type(exc).__name__}: {_first_line(exc)}") from exc
        return result, seconds, rss

    def _write(
        self, case: Case, ctx: RunContext, workload: workloads.Workload, path: Path
    ) -> tuple[float, PeakRss, str]:
        """Durably write a checkpoint (engine save + fsync of its files and directory), timed; return
        the seconds, the RSS samples and what the engine says about the write (for the row's note)."""
        state = self.stage_save(case, workload.tensors)
        if not self.replaces_in_place(case):
            self._remove_ours(path, ctx)
        self._track(path, ctx)
        self.prepare_save(state, path, case, ctx)
        os.sync()  # earlier dirty pages are not this save's to write back
        memory_note = level_memory(case.get("memory", "recent"), workload.nbytes)  # page-cache writers need new memory
        before = self.write_state(path, case)

        def durable_save() -> None:
            self.save(state, path, case)
            for written in self.files(path):
                fsync_path(written)
            for directory in ([path] if path.is_dir() else []) + [path.parent]:
                fsync_path(directory)

        try:
            _, seconds, rss = self._call(durable_save)
        except GdsbenchError:
            self._remove_ours(path, ctx)  # a failed save's partial file must not pass for a checkpoint
            raise
        self._track_files(path, ctx)
        return seconds, rss, "; ".join(filter(None, [self.describe_write(before, path, case), memory_note]))

    def _measure_save(self, case: Case, ctx: RunContext, workload: workloads.Workload, path: Path) -> Measurement:
        """Measure one durable save."""
        seconds, rss, how = self._write(case, ctx, workload, path)
        return Measurement(
            bytes=workload.nbytes,
            seconds=seconds,
            bw_bytes=workload.nbytes / seconds,
            peak_rss_bytes=rss.peak,
            bytes_on_disk=disk_bytes(self.files(path)),
            note="; ".join(filter(None, [how, workload.description, f"RSS before {mib(rss.before)}"])),
        )

    def _measure_load(self, case: Case, ctx: RunContext, workload: workloads.Workload, path: Path) -> Measurement:
        """Measure one load from the requested cache state, then verify every tensor."""
        if not self.complete(path):
            self._write(case, ctx, workload, path)
        staged = self.stage_load(case, workload.tensors, path)
        cache_note = set_cache(self.files(path), case.get("cache"))
        memory_note = level_memory(case.get("memory", "recent"), workload.nbytes)
        loaded, seconds, rss = self._call(lambda: self.load(path, case, staged))  # noqa: F821 (deleted below)
        try:
            verify(workload.tensors, loaded, path)
        finally:
            del loaded, staged
        return Measurement(
            bytes=workload.nbytes,
            seconds=seconds,
            bw_bytes=workload.nbytes / seconds,
            peak_rss_bytes=rss.peak,
            bytes_on_disk=disk_bytes(self.files(path)),
            cache=case.get("cache"),
            note=f"{cache_note}; {memory_note}; verified; {workload.description}; RSS before {mib(rss.before)}",
        )

    def complete(self, path: Path) -> bool:
        """Whether a checkpoint is at `path` (written earlier by this engine)."""
        return path.is_file()

    def _remove_ours(self, path: Path, ctx: RunContext) -> None:
        """Delete the previous checkpoint at `path` if this sweep created it (never anything else)."""
        if path in ctx.created:
            for created in [p for p in ctx.created if p == path or p.parent == path]:
                if created.is_file():
                    created.unlink()

    def _track(self, path: Path, ctx: RunContext) -> None:
        """Remember the checkpoint as this sweep's, when it does not exist yet."""
        ctx.track_new([path])

    def _track_files(self, path: Path, ctx: RunContext) -> None:
        """After a save: nothing more for single-file engines (directory engines track what they wrote)."""
        return None


def mib(num_bytes: int) -> str:
    """A byte count in MiB for notes."""
    return f"{num_bytes / 2**20:.0f} MiB"


def disk_bytes(files: list[Path]) -> int:
    """Bytes the checkpoint's files take (their sizes)."""
    return sum(path.stat().st_size for path in files)


def workload_spec(case: Case, ctx: RunContext) -> workloads.WorkloadSpec:
    """The workload a case uses; checkpoint_size defaults to the sweep's file_size."""
    return workloads.WorkloadSpec(
        source=case.get("workload", "llama3-8b"),
        size=case.get("checkpoint_size") or ctx.file_size,
        dtype=case.get("dtype", "mixed"),
        seed=case.get("seed", 0),
    )


def _first_line(exc: BaseException) -> str:
    """An exception's message on one line (engines' messages can span many)."""
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
