"""What each checkpoint engine's bytes cost in CPU, and the bandwidth at which that cost would use every core.

On a slow disk an engine's bandwidth hides its CPU cost; on a GPU server's NVMe array the cost decides its
speed. Per engine and pattern (medians over repetitions): machine CPU seconds per GiB (every CPU's busy time
over the measured window, so the kernel threads a buffered writer hands its copying to are counted), the
engine's own processes' CPU seconds per GiB, and the projection `cores x GiB / machine CPU-s per GiB`: the
bandwidth at which this engine alone would keep all the host's cores busy, next to the fio ceiling of the
same run and what fio's own ceiling case cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gdsbench import ceilings as ceiling_of
from gdsbench import flags
from gdsbench.report import ceilings, tables
from gdsbench.report.derived import Derived, Inputs
from gdsbench.units import GIB

#: Linux's clock tick (USER_HZ, 100 per second everywhere): the resolution of a process's CPU time (os.times) and of
#: each CPU's /proc/stat counters, so a machine figure summed over N CPUs may be N ticks off.
TICK_S = 0.01
TITLE = "CPU cost per GiB moved (machine: every CPU's busy time; process: the engine's own processes)"
BUSY = " (busy)"
#: What the CPU-cost table's columns mean (its legend).
MEANINGS = {
    "machine CPU-s/GiB": "every CPU's busy time over the measured window (/proc/stat: kernel writeback and other "
    f"processes included) per GiB moved, median; `{BUSY.strip()}`: most rows flagged busy_machine, others' work "
    "counted; a run under one clock tick (10 ms) per CPU is left out: below the clock's resolution",
    "process CPU-s/GiB": "the engine's own processes' user + system CPU per GiB moved, median (runs under one clock "
    "tick left out)",
    "CPU-bound at": "cores x GiB / machine CPU-s per GiB: the bandwidth at which this engine alone would keep every "
    "usable core busy (from the machine figure: a busy machine understates it)",
    "ceiling": "the ceiling of the checkpoint table: fio's best case of the run, or the s3 engine's for "
    "checkpoints in an object store",
    "ceiling machine CPU-s/GiB": "the machine CPU-s per GiB of that ceiling's case (machine, not process)",
}


def cpu_costs(frame: pd.DataFrame, metas: Mapping[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per run, host, engine and checkpoint pattern whose rows recorded their CPU; empty otherwise."""
    if "machine_cpu_seconds" not in frame and "cpu_seconds" not in frame:
        return pd.DataFrame()
    ok = frame[frame["status"] == "ok"]
    rows = []
    for (run_id, host), run in ok.groupby(["run_id", "host"], sort=False):
        ckpt = run[run["pattern"].isin(list(ceiling_of.CEILINGS))]
        if ckpt.empty:
            continue
        cores = _cores(run, metas)
        ckpt = ckpt.assign(label=ceilings.engine_labels(ckpt))
        for (label, pattern), group in ckpt.groupby(["label", "pattern"], sort=False):
            machine = per_gib(group, "machine_cpu_seconds", _cpus(run, metas) * TICK_S)
            process = per_gib(group, "cpu_seconds", TICK_S)
            ceiling = ceiling_of.ceiling_rows(run, pattern, group)
            if pd.isna(machine) and pd.isna(process):
                continue
            rows.append(
                {
                    "run_id": run_id,
                    "host": host,
                    "engine": label,
                    "pattern": pattern,
                    "n": len(group),
                    "bw_median": float(group["bw_bytes"].median()),
                    "machine_cpu_s_per_gib": machine,
                    "process_cpu_s_per_gib": process,
                    "cores": cores,
                    "cpu_bound_bw": cores * GIB / machine if machine > 0 else float("nan"),
                    "fio_bw": ceiling_of.ceiling(run, pattern, group).bw,
                    "fio_machine_cpu_s_per_gib": per_gib(ceiling, "machine_cpu_seconds", _cpus(run, metas) * TICK_S),
                    "machine_busy": busy(group),
                    "fio_machine_busy": busy(ceiling),
                }
            )
    return pd.DataFrame(rows)


def per_gib(rows: pd.DataFrame, column: str, resolution: float = 0.0) -> float:
    """The median of `column` per GiB the rows moved, over the rows whose figure is at least `resolution` (its
    clock's: a sub-second run's CPU below it says nothing); NaN where no row has one."""
    if column not in rows or rows.empty:
        return float("nan")
    measured = rows[rows[column].astype(float) >= resolution]
    return float((measured[column] / measured["bytes"] * GIB).median())


def busy(rows: pd.DataFrame) -> bool:
    """Whether most of the rows carry busy_machine: their machine CPU holds others' work."""
    if "flags" not in rows or rows.empty:
        return False
    return int(sum("busy_machine" in flags.parse(cell) for cell in rows["flags"])) * 2 > len(rows)


def _cpus(run: pd.DataFrame, metas: Mapping[str, dict[str, Any]]) -> float:
    """Every CPU of the run's host (/proc/stat sums them all), from its sidecar; 1 where it does not say."""
    for source in run["source"].dropna().unique() if "source" in run else ():
        count = (metas.get(str(source), {}).get("machine") or {}).get("cpu_count")
        if isinstance(count, int) and count > 0:
            return float(count)
    return 1.0


def _cores(run: pd.DataFrame, metas: Mapping[str, dict[str, Any]]) -> float:
    """The CPUs the run could use on its host, from its sidecar (flags.usable_cpus; NaN where it does not say)."""
    for source in run["source"].dropna().unique() if "source" in run else ():
        count = flags.usable_cpus(metas.get(str(source), {}))
        if count == count:
            return count
    return float("nan")


def cost_rows(costs: pd.DataFrame, runs: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the CPU-cost table; run and host columns only when the costs come from several."""
    where = tables.varying(costs, ["run_id", "host"])
    header = [
        *map(tables.header_of, where),
        "engine",
        "pattern",
        "n",
        "bw (median)",
        "machine CPU-s/GiB",
        "process CPU-s/GiB",
        "CPU-bound at",
        "ceiling",
        "ceiling machine CPU-s/GiB",
    ]
    rows = [
        [
            *((runs or {}).get(r[c], r[c]) for c in where),
            r["engine"],
            r["pattern"],
            str(r["n"]),
            tables.bw_text(r["bw_median"]),
            _machine(r["machine_cpu_s_per_gib"], r["machine_busy"]),
            tables.number(r["process_cpu_s_per_gib"], 2),
            _projection(r["cpu_bound_bw"], r["cores"]),
            tables.bw_text(r["fio_bw"]),
            _machine(r["fio_machine_cpu_s_per_gib"], r["fio_machine_busy"]),
        ]
        for _, r in costs.iterrows()
    ]
    return tables.drop_empty(header, rows, len(where) + 2)


def _machine(value: float, busy: bool) -> str:
    """A machine CPU-s/GiB cell, marked where most of its rows were measured on a busy machine."""
    return tables.number(value, 2) + (BUSY if busy and not tables.missing(value) else "")


def _projection(bw: float, cores: float) -> str:
    """'2 cores: 5689MiB/s (5965MB/s)', or '-' where the machine figure or the core count is missing."""
    return "-" if tables.missing(bw) else f"{cores:.0f} cores: {tables.bw_text(bw)}"


def _compute(inputs: Inputs) -> pd.DataFrame:
    """The CPU-cost table's figures (cpu_costs)."""
    return cpu_costs(inputs.frame, inputs.metas)


TABLE = Derived("cpu_cost", TITLE, _compute, cost_rows, "pattern", MEANINGS)
