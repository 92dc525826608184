"""gdsio runner: NVIDIA's GPUDirect Storage benchmark, one invocation per case, parsed from its result line.

Mechanism: `gdsio -D <directory> -w <threads>` runs one file per thread (gdsio names them
`gdsio.<n>`), each `file_size` bytes, with the transfer type chosen by `-x` (GDS = cuFile straight into
GPU memory, CPU_ONLY = host memory, CPU_GPU = host bounce buffer then cudaMemcpy, ...). gdsio reads
need their files, so a read case first writes them with a gdsio write pass unless they already exist
at full size. Limits, from gdsio's output format: throughput is GiB/s and latency a mean only (no
percentiles); with `-T` the "done" figure of DataSetSize may exceed the requested one; `XferType: GPUD`
is printed even when cuFile fell back to its POSIX compat path, so the note says what nvidia-fs's
counters showed, when they can be read. In GPU_BATCH mode gdsio treats `-w` as the batch depth
(it prints `Threads: 1 IoDepth: <w>`).
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.keys import Key, boolean, non_negative_int, positive_int, size, text
from gdsbench.runners.base import Measurement, RunContext, axes_of, run_tool, tool_message
from gdsbench.runners.fio import FioRunner
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
#: XferType tokens seen in gdsio output; others are accepted and kept as printed.
XFER_TOKENS = {
    "GPUD": Transfer.GDS,
    "CPUONLY": Transfer.CPU_ONLY,
    "CPU_GPU": Transfer.CPU_GPU,
    "GPUD_ASYNC": Transfer.GPU_ASYNC,
    "GPU_BATCH": Transfer.GPU_BATCH,
}
#: Transfers that go through cuFile, where nvidia-fs counters tell GDS from compat mode.
CUFILE_TRANSFERS = frozenset({Transfer.GDS, Transfer.GPU_ASYNC, Transfer.GPU_BATCH})

RESULT = re.compile(
    r"IoType:\s*(?P<io_type>\w+)\s+XferType:\s*(?P<xfer>\S+)\s+Threads:\s*(?P<threads>\d+)"
    r"(?:\s+IoDepth:\s*(?P<iodepth>\d+))?\s+DataSetSize:\s*(?P<done>\d+)/(?P<requested>\d+)\(KiB\)"
    r"\s+IOSize:\s*(?P<io_size>[\d:-]+)\(KiB\)\s+Throughput:\s*(?P<gib>[\d.]+)\s*GiB/sec,"
    r"\s+Avg_Latency:\s*(?P<lat>[\d.]+)\s*usecs\s+ops:\s*(?P<ops>\d+)\s+total_time\s+(?P<secs>[\d.]+)\s*secs"
)


@dataclass(frozen=True)
class GdsioResult:
    """One gdsio result line, in gdsio's own units (KiB, GiB/s, microseconds, seconds)."""

    io_type: str
    xfer_type: str
    threads: int
    iodepth: int | None
    done_kib: int
    requested_kib: int
    io_size_kib: str  # one size, or min-max-step for a range
    throughput_gib: float
    latency_us: float
    ops: int
    seconds: float

    @property
    def transfer(self) -> Transfer | None:
        """The transfer type the XferType token names, when it is a known one."""
        return XFER_TOKENS.get(self.xfer_type)


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
            "which gdsio to run (else $GDSIO, PATH, /usr/local/cuda*/gds/tools/gdsio)",
            axis=False,
        ),
        GPU_KEY,
        Key("numa_node", non_negative_int, "a NUMA node number", None, "gdsio -n: NUMA node for host buffers"),
        Key("verify", boolean, "true or false", False, "gdsio -V: verify data (writes are read back)"),
        Key("batch_size", positive_int, "a positive integer", None, "gdsio -B: batch size for GPU_BATCH"),
        Key("alignment", size, "a size such as 4K", None, "gdsio -a: alignment of random IO offsets"),
    )
    axes = axes_of(("pattern", "transfer", "io_size", "threads"), options)

    def unavailable(self, case: Case, ctx: RunContext) -> str | None:
        """Why gdsio cannot run this case here: no gdsio, or a GPU list where gdsio takes one index."""
        path, why = gds.find_gdsio(ctx.options.get("gdsio"))
        if path is None:
            return why
        if not str(case["gpu"]).isdigit():
            return f"gdsio takes one GPU index (-d), not {case['gpu']!r}"
        return None

    def command(self, case: Case, ctx: RunContext) -> list[str]:
        """The gdsio argument list for one case."""
        return gdsio_argv(case, ctx)

    def run(self, case: Case, ctx: RunContext) -> Measurement:
        """Create the files a read needs, run gdsio once and measure the case."""
        files = data_files(case, ctx)
        ctx.track_new(files)
        notes: list[str | None] = (
            [fill(case, ctx)] if not case.pattern.is_write and not ready(files, ctx.file_size) else []
        )
        before = gds.nvfs_stats()
        proc = run_tool(self.command(case, ctx), timeout=ctx.timeout)
        after = gds.nvfs_stats()
        result = pick(checked(proc), case.pattern)
        notes.append(path_note(case, before, after))
        raw = proc.stdout + (f"\n--- stderr ---\n{proc.stderr}" if proc.stderr.strip() else "")
        return measurement(result, note="; ".join(n for n in notes if n) or None, raw=raw)


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
    if case["verify"] and timed:
        argv.append("-V")
    if ctx.runtime and timed:
        argv += ["-T", str(math.ceil(ctx.runtime))]  # gdsio takes whole seconds
    return argv


def data_files(case: Case, ctx: RunContext) -> list[Path]:
    """The files gdsio uses with -D: gdsio.0 .. gdsio.<threads-1> in the target directory."""
    return [ctx.directory / f"gdsio.{n}" for n in range(case["threads"])]


def ready(files: list[Path], file_size: int) -> bool:
    """True when every file exists with at least `file_size` bytes, so a read need not write them first."""
    return all(f.is_file() and f.stat().st_size >= file_size for f in files)


def fill(case: Case, ctx: RunContext) -> str:
    """Write a read case's files with a size-bound CPU_ONLY gdsio write pass; return a note saying so."""
    argv = gdsio_argv(case, ctx, pattern=Pattern.WRITE, transfer=Transfer.CPU_ONLY, timed=False)
    proc = run_tool(argv, timeout=ctx.timeout)
    try:
        pick(checked(proc), Pattern.WRITE)
    except ToolError as exc:
        raise ToolError(f"gdsio could not write the files to read: {exc}") from None
    return "read files written first by a gdsio CPU_ONLY write pass"


def parse(text: str) -> list[GdsioResult]:
    """Every result line in gdsio's output (a -V write prints its write and its verifying read)."""
    return [
        GdsioResult(
            io_type=m["io_type"].upper(),
            xfer_type=m["xfer"],
            threads=int(m["threads"]),
            iodepth=int(m["iodepth"]) if m["iodepth"] else None,
            done_kib=int(m["done"]),
            requested_kib=int(m["requested"]),
            io_size_kib=m["io_size"],
            throughput_gib=float(m["gib"]),
            latency_us=float(m["lat"]),
            ops=int(m["ops"]),
            seconds=float(m["secs"]),
        )
        for m in RESULT.finditer(text)
    ]


def checked(proc: subprocess.CompletedProcess) -> list[GdsioResult]:
    """The results of a gdsio run; ToolError with gdsio's own message when it failed or printed none."""
    results = parse(proc.stdout or "")
    if proc.returncode != 0 or not results:
        text = (proc.stdout or "") + (proc.stderr or "")
        if "Usage [using cmd line options]" in text:  # gdsio prints the problem, then its usage text
            raise ToolError(f"gdsio refused its arguments: {text.strip().splitlines()[0]}")
        raise ToolError(f"gdsio failed: {tool_message(proc)}")
    return results


def pick(results: list[GdsioResult], pattern: Pattern) -> GdsioResult:
    """The result line of the case's own IoType (a -V write also prints its verifying read)."""
    wanted = pattern.value.upper()
    for result in results:
        if result.io_type == wanted:
            return result
    raise ToolError(f"gdsio printed no {wanted} result (got {', '.join(r.io_type for r in results)})")


def measurement(result: GdsioResult, note: str | None = None, raw: str | None = None) -> Measurement:
    """A gdsio result in base units: bytes = done KiB * 1024, bandwidth = GiB/s * 2**30, latency in us."""
    return Measurement(
        bytes=result.done_kib * 1024,
        seconds=result.seconds,
        bw_bytes=result.throughput_gib * 2**30,
        iops=result.ops / result.seconds if result.seconds > 0 else None,
        lat_mean_us=result.latency_us,
        note=note,
        raw=raw,
    )


def path_note(case: Case, before: dict[str, int] | None, after: dict[str, int] | None) -> str | None:
    """For cuFile transfers: whether nvidia-fs counted the I/O (GDS) or not (cuFile's compat path)."""
    if case.transfer not in CUFILE_TRANSFERS:
        return None
    if before is None or after is None:
        return (
            "GDS path or cuFile compat mode could not be told "
            f"({gds.NVFS_STATS} not readable; gdsio prints GPUD either way)"
        )
    kind = "writes" if case.pattern.is_write else "reads"
    calls = after.get(kind, 0) - before.get(kind, 0)
    mib = after.get(f"{kind}_mib", 0) - before.get(f"{kind}_mib", 0)
    if calls > 0:
        return f"GDS path: nvidia-fs counted {calls} {kind} ({mib} MiB) during the run"
    return f"cuFile compat mode: nvidia-fs counted no {kind} during the run (bytes went through POSIX I/O)"
