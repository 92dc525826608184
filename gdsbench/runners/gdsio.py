"""gdsio runner: NVIDIA's GPUDirect Storage benchmark, one invocation per case, parsed from its result line.

Mechanism: `gdsio -D <directory> -w <threads>` runs one file per thread (gdsio names them
`gdsio.<n>`), each `file_size` bytes, with the transfer type chosen by `-x` (GDS = cuFile straight into
GPU memory, CPU_ONLY = host memory, CPU_GPU = host bounce buffer then cudaMemcpy, ...). gdsio reads
need their files: the sweep writes them once, before the first case and outside the cases' timeouts
(gdsbench.fill), for the largest thread count of the sweep's read cases. Limits, from gdsio's output
format: throughput is GiB/s and latency a mean only (no percentiles); with `-T` the "done" figure of
DataSetSize may exceed the requested one; `XferType: GPUD` is printed even when cuFile fell back to its
POSIX compat path, so the row's `path` column says what nvidia-fs's counters (and gds_stats) showed. In
GPU_BATCH mode gdsio treats `-w` as the batch depth (it prints `Threads: 1 IoDepth: <w>`). gdsio verifies
a read (-V) only against files written with -V and the same seed, threads, offset and size, so `verify`
applies to write cases only. CPU_CACHED_GPU goes through the page cache: each case starts with dirty
pages written back and, for reads, the files' cached pages dropped, as fio's invalidate=1 does.
"""

from __future__ import annotations

import functools
import math
import os
import subprocess
from dataclasses import replace
from pathlib import Path

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.columns import FILES, Column, Traits
from gdsbench.errors import ToolError
from gdsbench.keys import Key, boolean, non_negative_int, positive_int, size, text
from gdsbench.runners import cache, gds_path
from gdsbench.runners.base import Measurement, RunContext, axes_of, run_tool
from gdsbench.runners.file_sets import FileSet, Fill, most_threads, widest_read
from gdsbench.runners.fio import FioRunner
from gdsbench.runners.gdsio_output import (
    XFER_TOKENS,
    GdsioResult,
    checked,
    failures,
    measurement,
    parse,
    pick,
    usage_options,
    usage_version,
)
from gdsbench.runners.resources import Usage
from gdsbench.sysinfo import gpu as gds
from gdsbench.units import size_label

#: The GPU index key is fio's (one key, one meaning); gdsio's -d takes a single index.
GPU_KEY = next(key for key in FioRunner.options if key.name == "gpu")
#: gdsio's -x codes, by transfer type.
XFER_CODES = {
    Transfer.GDS: 0,
    Transfer.CPU_ONLY: 1,
    Transfer.CPU_GPU: 2,
    Transfer.CPU_ASYNC_GPU: 3,
    Transfer.CPU_CACHED_GPU: 4,
    Transfer.GPU_ASYNC: 5,
    Transfer.GPU_BATCH: 6,
}
#: gdsio's -I codes, by pattern.
IO_CODES = {Pattern.READ: 0, Pattern.WRITE: 1, Pattern.RANDREAD: 2, Pattern.RANDWRITE: 3}
CUFILE_TRANSFERS = gds_path.CUFILE_TRANSFERS
#: The IO size of the one write pass that lays out the files reads need (large: few, long I/Os).
FILL_IO_SIZE = 16 << 20

__all__ = ["XFER_TOKENS", "GdsioResult", "checked", "failures", "measurement", "parse", "pick"]


class GdsioRunner:
    """Runs NVIDIA gdsio for read/write/randread/randwrite over all seven gdsio transfer types."""

    name = "gdsio"
    description = "NVIDIA gdsio (GDS tools); GDS = cuFile into GPU memory, CPU_* = host paths, GPU_ASYNC/GPU_BATCH = cuFile async/batch"
    patterns = frozenset(IO_CODES)
    transfers = frozenset(XFER_CODES)
    options = (
        Key(
            "gdsio",
            text,
            "a path to the gdsio executable",
            None,
            "which gdsio to run (else $GDSIO, PATH, /usr/local/cuda*/gds/tools, /usr/libexec/gds/tools)",
            axis=False,
        ),
        GPU_KEY,
        Key("numa_node", non_negative_int, "a NUMA node number", None, "gdsio -n: NUMA node for host buffers"),
        Key("verify", boolean, "true or false", False, "gdsio -V on write cases: every write is read back and checked"),
        Key("batch_size", positive_int, "a positive integer", None, "gdsio -B: batch size for GPU_BATCH"),
        Key("alignment", size, "a size such as 4K", None, "gdsio -a (gdsio 1.12+): alignment of random IO offsets"),
    )
    axes = axes_of(("pattern", "transfer", "io_size", "threads"), options)
    traits = Traits(FILES)
    columns: tuple[Column, ...] = ()

    def file_sets(self, cases: list[Case], ctx: RunContext) -> list[FileSet]:
        """gdsio.0 .. gdsio.<most threads - 1>, shared by every gdsio case."""
        threads = most_threads(cases)
        return [FileSet(self.name, tuple(data_files(cases[0], ctx, threads)), ctx.file_size)] if threads else []

    def fill(self, cases: list[Case], ctx: RunContext) -> Fill | None:
        """gdsio's own write pass over the files of the widest read (CPU_ONLY, 16 MiB I/Os, size-bound)."""
        widest = widest_read(cases)
        if widest is None:
            return None
        files = FileSet(self.name, tuple(data_files(widest, ctx)), ctx.file_size)
        return Fill(files, fill_argv(widest, ctx, widest["threads"]), _wrote)

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why gdsio cannot run this case here: no gdsio, a GPU list, verify on a read, -a on an old gdsio."""
        path, why = gds.find_gdsio(ctx.options.get("gdsio"))
        if path is None:
            return why
        if not str(case["gpu"]).isdigit():
            return f"gdsio takes one GPU index (-d), not {case['gpu']!r}"
        if case["verify"] and not case.pattern.is_write:
            return (
                "verify applies to write cases only: gdsio checks a read (-V) only against files written with -V "
                "and the same seed (-k), threads, offset and size; a -V write reads its data back itself"
            )
        if case["alignment"] and case.pattern in (Pattern.RANDREAD, Pattern.RANDWRITE):
            return alignment_unsupported(path)
        return None

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The gdsio argument list for one case."""
        return gdsio_argv(case, ctx)

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Settle the page cache, run gdsio once (its files already written for reads) and measure the case."""
        files = data_files(case, ctx)
        ctx.resources.track_new(files)
        notes = [] if case.pattern.is_write else [ensure_files(case, ctx, files)]
        notes.append(settle_cache(case, files))
        with Usage() as usage:
            proc, path, path_note = gds_path.run_witnessed(self.command(case, ctx), ctx.timeout, case)
        result = pick(checked(proc, case.transfer), case.pattern)
        raw = proc.stdout + (f"\n--- stderr ---\n{proc.stderr}" if proc.stderr.strip() else "")
        note = "; ".join(n for n in [*notes, path_note] if n) or None
        measured = replace(
            measurement(result, note=note, raw=raw),
            cpu_seconds=usage.cpu_seconds,
            machine_cpu_seconds=usage.machine_cpu_seconds,
        )
        return gds_path.with_path(measured, path)


def gdsio_argv(
    case: Case, ctx: RunContext, pattern: Pattern | None = None, transfer: Transfer | None = None, timed: bool = True
) -> list[str]:
    """Translate a case (or its fill pass, with another pattern/transfer and no time limit) into gdsio's argv."""
    pattern, transfer = pattern or case.pattern, transfer or case.transfer
    path, _ = gds.find_gdsio(ctx.options.get("gdsio"))
    argv = [
        path or "gdsio",
        "-D",
        str(ctx.directory),
        "-d",
        str(case["gpu"]),
        "-w",
        str(case["threads"]),
        "-s",
        size_label(ctx.file_size),
        "-i",
        size_label(case["io_size"]),
        "-x",
        str(XFER_CODES[transfer]),
        "-I",
        str(IO_CODES[pattern]),
    ]
    if case["numa_node"] is not None:
        argv += ["-n", str(case["numa_node"])]
    if transfer is Transfer.GPU_BATCH and case["batch_size"]:
        argv += ["-B", str(case["batch_size"])]
    if case["alignment"] and pattern in (Pattern.RANDREAD, Pattern.RANDWRITE):
        argv += ["-a", size_label(case["alignment"])]
    if case["verify"] and timed and pattern.is_write:
        argv.append("-V")
    if ctx.runtime and timed:
        argv += ["-T", str(math.ceil(ctx.runtime))]  # gdsio takes whole seconds
    return argv


@functools.lru_cache(maxsize=8)
def usage(path: str) -> str:
    """gdsio's usage text (`gdsio -h`), which lists the options this gdsio version has."""
    try:
        proc = subprocess.run([path, "-h"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout + proc.stderr


def alignment_unsupported(path: str) -> str | None:
    """Why `alignment` (-a) cannot be passed to this gdsio: its usage text has no -a (older than 1.12)."""
    text = usage(path)
    if not text or "a" in usage_options(text):
        return None
    return f"this gdsio (version {usage_version(text) or 'unknown'}) has no -a option (gdsio 1.12+); drop `alignment`"


def data_files(case: Case, ctx: RunContext, threads: int | None = None) -> list[Path]:
    """The files gdsio uses with -D: gdsio.0 .. gdsio.<threads-1> in the target directory."""
    return [ctx.directory / f"gdsio.{n}" for n in range(threads or case["threads"])]


def _wrote(done: subprocess.CompletedProcess) -> None:
    """gdsio's write pass succeeded when it exited with a clean result."""
    checked(done)


def fill_argv(case: Case, ctx: RunContext, threads: int) -> list[str]:
    """The one size-bound CPU_ONLY gdsio write pass that lays out gdsio.0..threads-1 for every read case."""
    argv = gdsio_argv(case, ctx, pattern=Pattern.WRITE, transfer=Transfer.CPU_ONLY, timed=False)
    argv[argv.index("-w") + 1], argv[argv.index("-i") + 1] = str(threads), size_label(min(FILL_IO_SIZE, ctx.file_size))
    return argv


def ensure_files(case: Case, ctx: RunContext, files: list[Path]) -> str | None:
    """A read's files: written by the sweep's fill step; a failed fill fails the case at once (no retry inside
    every later case's timeout); outside a sweep (no fill step ran) they are written here, once."""
    failed = ctx.fill_failures.get("gdsio")
    if failed:  # whatever it left is not the files a read needs
        raise ToolError(f"the files to read are missing: the fill step before the cases failed: {failed}")
    if FileSet(GdsioRunner.name, tuple(files), ctx.file_size).ready():
        return None
    proc = run_tool(fill_argv(case, ctx, case["threads"]), timeout=ctx.timeout)
    try:
        pick(checked(proc, Transfer.CPU_ONLY), Pattern.WRITE)
    except ToolError as exc:
        raise ToolError(f"gdsio could not write the files to read: {exc}") from None
    return "read files written first by a gdsio CPU_ONLY write pass"


def settle_cache(case: Case, files: list[Path]) -> str | None:
    """Write back dirty pages (a CPU_CACHED_GPU write leaves them for the next case to pay) and, before a
    CPU_CACHED_GPU read, drop its files' cached pages as fio's invalidate=1 does; say so for the note."""
    os.sync()
    if case.transfer is not Transfer.CPU_CACHED_GPU:
        return None
    if case.pattern.is_write:
        return "page cache: dirty pages written back before the run"
    dropped = [f for f in files if f.is_file()]
    for path in dropped:
        cache.evict(path)
    return f"page cache: dirty pages written back, {len(dropped)} files' cached pages dropped (fadvise DONTNEED) before the run"


ENGINE = GdsioRunner()
