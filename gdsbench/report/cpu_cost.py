"""What each checkpoint engine's bytes cost in CPU, and the bandwidth at which that cost would use every core.

On a slow disk an engine's bandwidth hides its CPU cost; on a GPU server's NVMe array the cost decides its
speed. Per engine and pattern (medians over repetitions): machine CPU seconds per GiB (every CPU's busy time
over the measured window, so the kernel threads a buffered writer hands its copying to are counted), the
engine's own processes' CPU seconds per GiB, and the projection `cores x GiB / machine CPU-s per GiB`: the
bandwidth at which this engine alone would keep all the host's cores busy, next to the fio ceiling of the
same run and what fio's own ceiling case cost.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gdsbench.report import ceilings, tables
from gdsbench.units import GIB

TITLE = "CPU cost per GiB moved (machine: every CPU's busy time; process: the engine's own processes)"


def cpu_costs(frame: pd.DataFrame, metas: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """One row per run, host, engine and checkpoint pattern whose rows recorded their CPU; empty otherwise."""
    if "machine_cpu_seconds" not in frame and "cpu_seconds" not in frame:
        return pd.DataFrame()
    ok = frame[frame["status"] == "ok"]
    rows = []
    for (run_id, host), run in ok.groupby(["run_id", "host"], sort=False):
        ckpt = run[run["pattern"].isin(list(ceilings.CEILINGS))]
        if ckpt.empty:
            continue
        cores = _cores(run, metas)
        ckpt = ckpt.assign(label=ceilings.engine_labels(ckpt))
        for (label, pattern), group in ckpt.groupby(["label", "pattern"], sort=False):
            machine, process = per_gib(group, "machine_cpu_seconds"), per_gib(group, "cpu_seconds")
            engine = str(group["engine"].iloc[0])
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
                    "fio_bw": ceilings.ceiling(run, pattern, engine).bw,
                    "fio_machine_cpu_s_per_gib": per_gib(
                        ceilings.ceiling_rows(run, pattern, engine), "machine_cpu_seconds"
                    ),
                }
            )
    return pd.DataFrame(rows)


def per_gib(rows: pd.DataFrame, column: str) -> float:
    """The median of `column` per GiB the rows moved (NaN where they did not record it)."""
    if column not in rows or rows.empty:
        return float("nan")
    return float((rows[column] / rows["bytes"] * GIB).median())


def _cores(run: pd.DataFrame, metas: dict[str, dict[str, Any]]) -> float:
    """The CPUs the run could use on its host, from its sidecar (its affinity; the machine's count in files
    written before it was recorded; NaN where neither is said)."""
    for source in run["source"].dropna().unique() if "source" in run else ():
        facts = metas.get(str(source), {}).get("machine") or {}
        count = facts.get("usable_cpus", facts.get("cpu_count"))
        if isinstance(count, int) and count > 0:
            return float(count)
    return float("nan")


def cost_rows(costs: pd.DataFrame, runs: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the CPU-cost table; run and host columns only when the costs come from several."""
    where = tables.varying(costs, ["run_id", "host"])
    header = [*map(tables.header_of, where), "engine", "pattern", "n", "bw (median)", "machine CPU-s/GiB",
              "process CPU-s/GiB", "CPU-bound at", "fio ceiling", "fio CPU-s/GiB"]  # fmt: skip
    rows = [
        [
            *((runs or {}).get(r[c], r[c]) for c in where),
            r["engine"],
            r["pattern"],
            str(r["n"]),
            tables.bw_text(r["bw_median"]),
            tables.number(r["machine_cpu_s_per_gib"], 2),
            tables.number(r["process_cpu_s_per_gib"], 2),
            _projection(r["cpu_bound_bw"], r["cores"]),
            tables.bw_text(r["fio_bw"]),
            tables.number(r["fio_machine_cpu_s_per_gib"], 2),
        ]
        for _, r in costs.iterrows()
    ]
    return tables.drop_empty(header, rows, len(where) + 2)


def _projection(bw: float, cores: float) -> str:
    """'2 cores: 5689MiB/s (5965MB/s)', or '-' where the machine figure or the core count is missing."""
    return "-" if tables.missing(bw) else f"{cores:.0f} cores: {tables.bw_text(bw)}"
