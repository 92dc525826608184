"""Which path a GPU row's bytes took: `gds` (nvidia-fs moved them), `compat` (cuFile fell back to POSIX I/O),
`posix` (the transfer goes through host memory by design: CPU_GPU, kvikio's compat mode) or `unknown`.

gdsio prints `XferType: GPUD` and fio says nothing either way, so the witness is the kernel: nvidia-fs's
read/write counters before and after the run. They count only while the module parameter
`rw_stats_enabled` is 1 (the default is 0, and the header then says `IO stats: Disabled`): the path is then
`unknown`, with the remedy. Without nvidia-fs (P2PDMA mode, CUDA 12.8+) there is no kernel counter: `unknown`
with that reason. Where cufile.json sets `profile.cufile_stats` >= 1, `gds_stats -p PID` sampled while the
tool runs is a second witness: its per-GPU `posix=` counts are cuFile's own fallbacks.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gdsbench.cases import Case, Transfer
from gdsbench.runners.base import Measurement, run_polled
from gdsbench.sysinfo import gpu

#: Transfers whose bytes go through cuFile (a GDS path that may fall back), by runner.
CUFILE_TRANSFERS = frozenset({Transfer.GDS, Transfer.GPU_ASYNC, Transfer.GPU_BATCH})
#: GPU transfers that bounce through host memory by design.
HOST_BOUNCE = frozenset({Transfer.CPU_GPU, Transfer.CPU_ASYNC_GPU, Transfer.CPU_CACHED_GPU})
PATHS = ("gds", "compat", "posix", "unknown")
#: How often gds_stats samples a running tool (its counters vanish with the process).
SAMPLE_EVERY_S = 2.0
_GPU_LINE = re.compile(
    r"^GPU\s+\d+\s+Read:.*?\bn=(?P<rn>\d+)\s+posix=(?P<rp>\d+).*?"
    r"Write:.*?\bn=(?P<wn>\d+)\s+posix=(?P<wp>\d+)",
    re.MULTILINE,
)


def parse_gds_stats(text: str) -> dict[str, int] | None:
    """cuFile calls and POSIX fallbacks summed over the PER_GPU STATS lines of `gds_stats -l 3`; None without them."""
    totals = {"reads": 0, "reads_posix": 0, "writes": 0, "writes_posix": 0}
    lines = list(_GPU_LINE.finditer(text))
    for m in lines:
        for key, group in (("reads", "rn"), ("reads_posix", "rp"), ("writes", "wn"), ("writes_posix", "wp")):
            totals[key] += int(m[group])
    return totals if lines else None


def nvfs_verdict(kind: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> tuple[str, str]:
    """The path nvidia-fs's counters prove for `kind` ('reads' or 'writes'), and why."""
    if before is None or after is None:
        return "unknown", _no_counters()
    if not (before.get("io_stats") and after.get("io_stats")):
        return "unknown", (
            "nvidia-fs IO stats are disabled (rw_stats_enabled=0), so its counters cannot tell GDS from "
            f"cuFile compat mode; enable them: {gpu.RW_STATS_REMEDY}"
        )
    calls = after.get(kind, 0) - before.get(kind, 0)
    mib = after.get(f"{kind}_mib", 0) - before.get(f"{kind}_mib", 0)
    if calls > 0:
        return "gds", f"GDS path: nvidia-fs counted {calls} {kind} ({mib} MiB) during the run"
    return "compat", f"cuFile compat mode: nvidia-fs counted no {kind} during the run (bytes went through POSIX I/O)"


def _no_counters() -> str:
    """Why there are no nvidia-fs counters: no module (P2PDMA or compat), or an unreadable stats file."""
    if gpu.nvidia_fs()["loaded"]:
        return f"{gpu.NVFS_STATS} not readable: GDS path or cuFile compat mode could not be told"
    if gpu.cufile_setting(gpu.cufile_config(), "use_pci_p2pdma"):
        return "P2PDMA mode (no nvidia-fs): no kernel counters tell GDS from cuFile compat mode"
    return "no nvidia-fs module: cuFile ran in compat mode unless P2PDMA applied (CUDA 12.8+); nothing to count"


def stats_verdict(kind: str, stats: Mapping[str, int] | None) -> tuple[str, str] | None:
    """The path gds_stats's per-GPU counters prove (posix= are cuFile's POSIX fallbacks), or None without I/O."""
    if not stats or not stats[kind]:
        return None
    posix, calls = stats[f"{kind}_posix"], stats[kind]
    return "gds" if posix == 0 else "compat", f"gds_stats: {calls} cuFile {kind}, {posix} through POSIX"


@dataclass
class Witness:
    """Watches one run of a tool or engine: nvidia-fs counters around it, gds_stats samples during it."""

    case: Case
    kind: str = ""
    before: Mapping[str, Any] | None = None
    stats: dict[str, int] | None = None
    notes: list[str] = field(default_factory=list)

    def start(self) -> Witness:
        """Take the nvidia-fs snapshot before the run."""
        self.kind = "writes" if self.case.pattern.is_write else "reads"
        self.before = gpu.nvfs_stats()
        return self

    def sample(self, pid: int) -> None:
        """Read gds_stats of the running process, where cufile.json enables cuFile's per-process stats."""
        tool = gpu.cuda_tool("gds_stats")
        if tool is None or not (gpu.cufile_config().get("cufile_stats") or 0) >= 1:
            return
        try:
            out = subprocess.run([tool, "-p", str(pid), "-l", "3"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return
        self.stats = parse_gds_stats(out.stdout) or self.stats

    def verdict(self) -> tuple[str, str]:
        """The path and its reason: gds_stats where it saw the run, else nvidia-fs's counters."""
        nvfs = nvfs_verdict(self.kind, self.before, gpu.nvfs_stats())
        second = stats_verdict(self.kind, self.stats)
        if second is None:
            return nvfs
        if nvfs[0] == "unknown":
            return second[0], f"{second[1]} ({nvfs[1]})"
        agree = "agrees" if nvfs[0] == second[0] else f"DISAGREES (says {second[0]})"
        return nvfs[0], f"{nvfs[1]}; {second[1]}: {agree}"


def gpu_path(case: Case, cufile: bool) -> str | None:
    """The path a GPU row has without a witness: posix for host bounce buffers, None for CPU-only rows."""
    if case.transfer in HOST_BOUNCE or (case.transfer in CUFILE_TRANSFERS and not cufile):
        return "posix"
    return None


def run_witnessed(argv: list[str], timeout: float, case: Case) -> tuple[subprocess.CompletedProcess, str | None, str]:
    """Run a tool; for cuFile transfers, witness which path its bytes took. Returns (result, path, note)."""
    witness = Witness(case).start() if case.transfer in CUFILE_TRANSFERS else None
    proc = _last(run_polled(argv, timeout, SAMPLE_EVERY_S if witness else timeout), witness)
    if witness is not None:
        return proc, *witness.verdict()
    path = gpu_path(case, cufile=True)
    return proc, path, "host bounce buffer (POSIX I/O into host memory, then copied)" if path else ""


def _last(ticks: Any, witness: Witness | None) -> subprocess.CompletedProcess:
    """Drive run_polled to the end, sampling gds_stats at each tick; return the tool's result."""
    for pid, done in ticks:
        if done is not None:
            return done
        if witness is not None:
            witness.sample(pid)
    raise AssertionError("run_polled ended without a result")


def with_path(m: Measurement, path: str | None, *notes: str | None) -> Measurement:
    """A measurement with its path column set and notes appended."""
    note = "; ".join(n for n in (m.note, *notes) if n) or None
    return replace(m, path=path, note=note)
