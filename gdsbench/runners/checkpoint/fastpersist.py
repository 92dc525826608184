"""fastpersist: ckptio, the library this project builds, through its public API only.

A Checkpointer per checkpoint path and options, kept across the case's repetitions as a training
run keeps one (its staging buffers are reused; with `recycle`, saves overwrite the previous
generation's blocks) and closed when the sweep ends. Parallel positional writes/reads on `threads`
workers (ckptio's default where the config leaves them out: io_options): O_DIRECT for CPU_ONLY (a
refused O_DIRECT fails the case instead of falling back silently), buffered for CPU_CACHED; every load
verifies its checksums; rows record the IOOptions each case ran with.
Options: recycle (Checkpointer(recycle=True)), load_into (load_into: fill existing tensors),
mmap (load_mmap: map the file and fault it in with parallel readahead, CPU_CACHED only).
A case whose matrix block names a `bucket` saves and loads one object `s3://bucket/<fresh prefix>/<name>` instead
(objects.py; fastpersist_s3.py measures it).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gdsbench import sysinfo, workloads
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import Column
from gdsbench.keys import Key, boolean, one_of, size
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import fastpersist_s3, io_options, objects
from gdsbench.runners.checkpoint.base import CKPTIO, EXPECTED_ERRORS, TORCH, InProcessRunner, Package
from gdsbench.runners.checkpoint.conditions import initialised_like

BACKENDS = {Transfer.CPU_ONLY: "direct", Transfer.CPU_CACHED: "buffered"}
WARMUP_SAVES = 2  # a recycling Checkpointer's third save is the first to find a spare to overwrite
OpenKey = tuple[Path, int | None, str, bool, str, int | None, str]  # what tells a case's Checkpointer apart (_key)


@functools.lru_cache(maxsize=8)
def odirect_reason(directory: str) -> str | None:
    """None when O_DIRECT opens work in `directory` (or, before the sweep creates it, in the nearest
    existing folder above it, on whose file system it will be), else why not; probed once per folder."""
    probe = Path(directory)
    while not probe.is_dir() and probe != probe.parent:
        probe = probe.parent
    works, why = sysinfo.odirect_works(probe)
    return None if works else f"O_DIRECT does not work in {directory}: {why}"


class FastPersist(InProcessRunner):
    """ckptio through a Checkpointer."""

    name = "fastpersist"
    environment = io_options.ENVIRONMENT  # IOOptions fields the environment overrides (recorded in rows)
    library_defaults = io_options.LIBRARY_DEFAULTS
    description = "ckptio: parallel O_DIRECT (CPU_ONLY) or buffered (CPU_CACHED) saves and loads, checksummed"
    calls = {
        Pattern.SAVE: "ckptio.Checkpointer.save",
        Pattern.LOAD: "ckptio.Checkpointer.load",
    }
    transfers = frozenset(BACKENDS)
    packages = (TORCH, CKPTIO)
    modules = ("torch", "ckptio")
    threaded = True
    block_options = objects.BLOCK_OPTIONS  # a case's own block's bucket sends its checkpoint to S3
    traits = objects.TRAITS
    extra_options = (
        Key(
            "load_into",
            boolean,
            "true or false",
            False,
            "load into existing, initialised tensors (load_into) instead of new memory",
        ),
        Key(
            "recycle",
            boolean,
            "true or false",
            False,
            "save through Checkpointer(recycle=True): overwrite the previous generation's blocks (the steady "
            "state of repeated saves to one path, reached by unmeasured saves first) instead of a new file",
        ),
        Key(
            "flush",
            one_of("end", "overlap", "dsync"),
            "end, overlap or dsync",
            "end",
            "how a save becomes durable (IOOptions.flush): one fsync at the end, writeback overlapped with the "
            "writes, or every write durable (RWF_DSYNC)",
        ),
        Key(
            "staging",
            size,
            "a size such as 128M (at least one 16 MiB chunk)",
            None,
            "a save's staging memory (IOOptions.buffer_bytes); unset: the library's default",
        ),
        Key(
            "fresh_pages",
            one_of("auto", "huge", "small"),
            "auto, huge or small",
            "auto",
            "the pages of a load's new memory (IOOptions.fresh_pages): transparent huge pages, 4 KiB pages, or "
            "whichever ckptio measures faster at start (the row's io_fresh_pages says which)",
        ),
        Key(
            "mmap",
            boolean,
            "true or false",
            False,
            "load with load_mmap: map the file and fault it in with parallel readahead (page cache, transfer "
            "CPU_CACHED) instead of reading into new memory",
        ),
        *objects.OPTIONS,
    )

    def __init__(self) -> None:
        self._open: dict[OpenKey, Any] = {}  # _key(case, path) -> Checkpointer

    @property
    def columns(self) -> tuple[Column, ...]:  # type: ignore[override]
        """Every checkpoint engine's columns and the IOOptions the Checkpointer ran with."""
        return (*super().columns, *io_options.columns())

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """The installed library must import; mmap loads read through the page cache; CPU_ONLY needs O_DIRECT;
        S3 (a bucket) must be in reach, without recycling nor mapping (files only)."""
        try:
            import ckptio  # noqa: F401
        except ImportError as exc:
            return f"ckptio not importable: {exc}"
        if objects.on_objects(case):
            return fastpersist_s3.cannot_run(case)
        if case.get("mmap") and case.pattern is Pattern.LOAD and case.transfer is not Transfer.CPU_CACHED:
            return "mmap loads read through the page cache: use transfer CPU_CACHED"
        if case.transfer is Transfer.CPU_ONLY:
            return odirect_reason(str(ctx.directory))
        return None

    def call(self, case: Case) -> str:
        """The Checkpointer and the method a case uses, with its options."""
        flush = f", flush={case.get('flush')!r}" if case.get("flush") != "end" else ""
        staging = f", buffer_bytes={case.get('staging')}" if case.get("staging") else ""
        staging += f", fresh_pages={case.get('fresh_pages')!r}" if case.get("fresh_pages") != "auto" else ""
        threads = "" if case.get("threads") is None else f"threads={case.get('threads')}, "
        options = f"IOOptions({threads}backend={BACKENDS[case.transfer]!r}{flush}{staging})"
        recycle = ", recycle=True" if case.get("recycle") else ""
        if case.pattern is Pattern.TRAIN:
            return super().call(case)
        method = "save" if case.pattern is Pattern.SAVE else _load_method(case)
        return f"ckptio.Checkpointer(options={options}{recycle}).{method}"

    def path(self, case: Case, ctx: RunContext) -> Path:
        """Recycling saves keep their generations under a name of their own."""
        path = super().path(case, ctx)
        return path.with_suffix(".recycle" + path.suffix) if case.get("recycle") else path

    def errors(self) -> tuple[type[BaseException], ...]:
        """The library's own errors and its O_DIRECT fallback warning (raised as an error here)."""
        from ckptio import CheckpointError
        from ckptio.errors import DirectIOFallbackWarning

        return (*EXPECTED_ERRORS, CheckpointError, DirectIOFallbackWarning)

    def checkpointer(self, case: Case, path: Path, ctx: RunContext) -> Any:
        """The Checkpointer of this path and options, opened once and closed when the sweep ends."""
        from ckptio import Checkpointer

        key = _key(case, path)
        if key not in self._open:
            self._open[key] = Checkpointer(path, options=self.options_of(case), recycle=key[3])
            ctx.resources.close_at_end(lambda: self._open.pop(key).close())
        return self._open[key]

    def options_of(self, case: Case) -> Any:
        """The IOOptions of a case: its threads, transfer's backend, flush, staging and fresh pages."""
        _, threads, backend, _, flush, staging, fresh_pages = _key(case, Path())
        given = {"buffer_bytes": staging} if staging else {}
        return io_options.build(threads, backend=backend, flush=flush, fresh_pages=fresh_pages, **given)

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The shared checkpoint command; in S3, the fresh prefix each run makes in place of the path."""
        argv = super().command(case, ctx)
        if not objects.on_objects(case):
            return argv
        return [*argv[:2], objects.location(case, self.name, argv[2]), *argv[3:]]

    def requirements(self, case: Case) -> tuple[Package, ...]:
        """ckptio and torch, and the AWS CRT (ckptio's s3 extra) where the checkpoint is an object."""
        return (*super().requirements(case), *((objects.AWSCRT,) if objects.on_objects(case) else ()))

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Measure as every in-process engine does (in S3: fastpersist_s3); the row adds the IOOptions the case's
        Checkpointer ran with."""
        if objects.on_objects(case):
            return fastpersist_s3.run(self, case, ctx)
        measured = super().run(case, ctx)
        used = io_options.used(self._open_for(case, self.path(case, ctx)).options)
        figures = {**measured.figures, **io_options.figures(used)}
        return replace(measured, figures=figures, resolved=io_options.resolved(used))

    def prepare(self, case: Case, workload: workloads.Workload, path: Path, ctx: RunContext) -> Any:
        """Saves: a recycling Checkpointer first saves (unmeasured) until it has a spare to overwrite, as
        from a training run's third save on. Loads into existing tensors get them, initialised."""
        ckpt = self.checkpointer(case, path, ctx)
        if case.pattern is Pattern.LOAD:
            return initialised_like(workload.tensors) if case.get("load_into") else None
        if not case.get("recycle"):
            return super().prepare(case, workload, path, ctx)
        if ckpt.last is None:
            ctx.resources.track_new([path])
            for _ in range(WARMUP_SAVES):
                ckpt.save(workload.tensors)
        return workload.tensors

    def save(self, staged: Any, path: Path, case: Case) -> str | None:
        """Checkpointer.save (durable itself: temp file, fsync, rename, directory fsync)."""
        from ckptio.errors import DirectIOFallbackWarning

        ckpt = self._open_for(case, path)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DirectIOFallbackWarning)
            saved = ckpt.save(staged)
        self.last_staging = saved.staging_bytes
        if not case.get("recycle"):
            return "new file"
        if saved.recycled:
            return "recycled: overwrote the previous generation's blocks"
        return "recycle requested but the spare was unusable (in use, or none): new file"

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """Checkpointer.load / load_into / load_mmap with checksum verification, onto the CPU."""
        from ckptio.errors import DirectIOFallbackWarning

        ckpt = self._open_for(case, path)
        with warnings.catch_warnings():
            warnings.simplefilter("error", DirectIOFallbackWarning)
            if case.get("mmap"):
                return ckpt.load_mmap()
            if case.get("load_into"):
                return ckpt.load_into(staged)
            return ckpt.load(map_location="cpu")

    def _open_for(self, case: Case, path: Path) -> Any:
        """The Checkpointer prepare() opened for this case."""
        return self._open[_key(case, path)]


def _key(case: Case, path: Path) -> OpenKey:
    """What tells a case's Checkpointer apart: its path, threads (None: ckptio's default), backend, recycling, flush,
    staging and fresh pages."""
    threads, backend = case.get("threads"), BACKENDS[case.transfer]
    recycle, flush, staging = bool(case.get("recycle")), case.get("flush"), case.get("staging")
    return path, threads, backend, recycle, flush, staging, case.get("fresh_pages")


def _load_method(case: Case) -> str:
    """The Checkpointer method a load case calls."""
    if case.get("mmap"):
        return "load_mmap(verify=True)"
    return "load_into(initialised tensors, verify=True)" if case.get("load_into") else "load(verify=True)"


ENGINE = FastPersist()
