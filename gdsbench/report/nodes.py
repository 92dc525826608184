"""Checkpoint cases whose ranks a cluster's launcher started (srun, mpirun, torchrun across nodes), node by node:
per run, engine and pattern, the launcher, the nodes, the slowest node (its index and host, its slowest rank's time
per checkpoint, median over repetitions) beside the longest rank's time and the aggregate bandwidth. Runs of
`launcher: local` (torchrun on one host) have no such table: their one node is the host."""

from __future__ import annotations

import pandas as pd

from gdsbench.report import ceilings, tables
from gdsbench.report.derived import Derived, Inputs

TITLE = "Ranks across nodes (the cluster's launcher; the slowest node is the one whose last rank finished last)"
MEANINGS = {
    "slowest node": "the node index (its host) whose slowest rank took longest, in the median repetition's row",
    "its s": "that node's longest rank's seconds per checkpoint (max rank s where it is the slowest), median",
    "max rank s": "the longest rank's seconds per checkpoint over every node (MLPerf Storage's), median",
}


def launched(inputs: Inputs) -> pd.DataFrame:
    """One row per run, host, engine and pattern of rows a launcher other than `local` started; empty otherwise."""
    frame = inputs.frame
    if "launcher" not in frame or "slowest_node" not in frame:
        return pd.DataFrame()
    rows = frame[(frame["status"] == "ok") & frame["launcher"].notna() & (frame["launcher"] != "local")]
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(label=ceilings.engine_labels(rows))
    out = []
    for (run_id, host, label, pattern), group in rows.groupby(["run_id", "host", "label", "pattern"], sort=False):
        middle = tables.median_row(group)
        out.append(
            {
                "run_id": run_id,
                "host": host,
                "engine": label,
                "pattern": pattern,
                "n": len(group),
                "launcher": middle["launcher"],
                "nodes": middle["nodes"],
                "slowest_node": middle["slowest_node"],
                "slowest_node_seconds": float(group["slowest_node_seconds"].median()),
                "max_rank_seconds": float(group["max_rank_seconds"].median()) if "max_rank_seconds" in group else None,
                "bw_bytes": float(group["bw_bytes"].median()),
            }
        )
    return pd.DataFrame(out)


def node_rows(found: pd.DataFrame, runs: dict[str, str]) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the table."""
    where = [c for c in ("run_id", "host") if found[c].nunique(dropna=False) > 1]
    header = [
        *map(tables.header_of, where),
        "engine",
        "pattern",
        "n",
        "launcher",
        "nodes",
        "slowest node",
        "its s",
        "max rank s",
        "bw (median)",
    ]
    rows = [
        [
            *(runs.get(r[c], r[c]) for c in where),
            str(r["engine"]),
            str(r["pattern"]),
            str(r["n"]),
            str(r["launcher"]),
            tables.cell("nodes", r["nodes"]),
            tables.cell("slowest_node", r["slowest_node"]),
            tables.number(r["slowest_node_seconds"], 3),
            "-" if tables.missing(r["max_rank_seconds"]) else tables.number(r["max_rank_seconds"], 3),
            tables.bw_text(r["bw_bytes"]),
        ]
        for _, r in found.iterrows()
    ]
    return header, rows


TABLE = Derived("nodes", TITLE, launched, node_rows, "pattern", MEANINGS)
