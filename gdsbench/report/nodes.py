"""Checkpoint cases whose ranks a cluster's launcher started (srun, mpirun, torchrun across nodes), node by node:
per run, engine and pattern, the launcher, the nodes, the slowest node (SLOWEST: its index and host, its time) beside
the longest rank's time, all three from the median repetition's row so they describe one run, and the median
aggregate bandwidth. Runs of
`launcher: local` (torchrun on one host) have no such table: their one node is the host."""

from __future__ import annotations

import pandas as pd

from gdsbench.report import ceilings, tables
from gdsbench.report.derived import Derived, Inputs

#: The one definition, as the rows' slowest_node column declares it (runners/checkpoint/distributed.with_nodes).
SLOWEST = "the node whose longest rank took longest per checkpoint (mean over the phase's checkpoints)"
TITLE = f"Ranks across nodes (the cluster's launcher; the slowest node: {SLOWEST})"
MEANINGS = {
    "slowest node": f"{SLOWEST}: its index (its host), in the median repetition (by bandwidth)",
    "its s": "that node's longest rank's seconds per checkpoint, in the same repetition",
    "max rank s": "the longest rank's seconds per checkpoint over every node (MLPerf Storage's), same repetition",
    "bw (median)": "the aggregate bandwidth, median over repetitions",
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
                "slowest_node_seconds": float(middle["slowest_node_seconds"]),
                "max_rank_seconds": float(middle["max_rank_seconds"]) if "max_rank_seconds" in group else None,
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
