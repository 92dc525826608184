"""What gdsio prints: its result lines, its failure lines, its usage text; parsed into base units.

gdsio can print failure lines (`io failed :ret :-5 errno :22, ...`, `Error: IO failed stopping traffic, ...`)
and still a result line and exit status 0, so a result is accepted only when no failure line stands
beside it, and only when its XferType is the transfer that was asked for.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from gdsbench.cases import Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.runners.base import Measurement, tool_message

#: XferType tokens seen in gdsio output; others are accepted and kept as printed.
XFER_TOKENS = {
    "GPUD": Transfer.GDS,
    "CPUONLY": Transfer.CPU_ONLY,
    "CPU_GPU": Transfer.CPU_GPU,
    "GPUD_ASYNC": Transfer.GPU_ASYNC,
    "GPU_BATCH": Transfer.GPU_BATCH,
}
RESULT = re.compile(
    r"IoType:\s*(?P<io_type>\w+)\s+XferType:\s*(?P<xfer>\S+)\s+Threads:\s*(?P<threads>\d+)"
    r"(?:\s+IoDepth:\s*(?P<iodepth>\d+))?\s+DataSetSize:\s*(?P<done>\d+)/(?P<requested>\d+)\(KiB\)"
    r"\s+IOSize:\s*(?P<io_size>[\d:-]+)\(KiB\)\s+Throughput:\s*(?P<gib>[\d.]+)\s*GiB/sec,"
    r"\s+Avg_Latency:\s*(?P<lat>[\d.]+)\s*usecs\s+ops:\s*(?P<ops>\d+)\s+total_time\s+(?P<secs>[\d.]+)\s*secs"
)
#: Lines gdsio prints when I/O failed (gds-nvidia-fs issue 57), even beside a result line.
FAILURE = re.compile(
    r"^.*(?:\bio failed\b|failed to submit io|^Error:|register error|\bfailed\b.*\berrno\b).*$",
    re.IGNORECASE | re.MULTILINE,
)
USAGE_MARK = "Usage [using cmd line options]"


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


def failures(text: str) -> list[str]:
    """gdsio's failure lines in `text` (result lines excluded), in order, each once."""
    lines = (m.group(0).strip() for m in FAILURE.finditer(text))
    return list(dict.fromkeys(line for line in lines if line and not RESULT.search(line)))


def checked(proc: subprocess.CompletedProcess, transfer: Transfer | None = None) -> list[GdsioResult]:
    """The results of a gdsio run; ToolError with gdsio's own message when it failed, printed none, printed
    failure lines beside them, or printed another XferType than the `transfer` asked for."""
    text = (proc.stdout or "") + (proc.stderr or "")
    results = parse(proc.stdout or "")
    if proc.returncode != 0 or not results:
        if USAGE_MARK in text:  # gdsio prints the problem, then its usage text
            raise ToolError(f"gdsio refused its arguments: {text.strip().splitlines()[0]}")
        raise ToolError(f"gdsio failed: {tool_message(proc)}")
    bad = failures(text)
    if bad:
        raise ToolError(f"gdsio reported failed I/O beside its result: {'; '.join(bad)[:400]}")
    for result in results:
        if transfer is not None and result.transfer is not None and result.transfer is not transfer:
            raise ToolError(f"gdsio ran XferType {result.xfer_type}, not the {transfer.value} asked for (-x)")
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


def usage_options(text: str) -> frozenset[str]:
    """The option letters a gdsio usage text lists (`-a <alignment ...>` exists only from gdsio 1.12 on)."""
    return frozenset(re.findall(r"^\s*-([A-Za-z])\b", text, re.MULTILINE))


def usage_version(text: str) -> str | None:
    """The version a gdsio usage text starts with (`gdsio version :1.12`)."""
    match = re.search(r"gdsio version\s*:\s*(\S+)", text)
    return match.group(1) if match else None
