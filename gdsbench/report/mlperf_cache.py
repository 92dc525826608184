"""The rules' cache condition on a read phase (MLPerf Storage Rules.md 4.3.1: below 3x a client's memory, caches are
cleared before the read), judged alike for gdsbench's load rows and imported ones (gdsbench import): the data read
per client host (a row's bytes over its `nodes`), a host's memory (the row's `host_memory_bytes`, else the
memory its sidecar records of the machine) and the row's `cache` (cold, cold-machine, warm; empty: not recorded)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gdsbench import mlperf
from gdsbench.report import tables

#: The geometry table's cell for each verdict of mlperf.cache_verdict (their order: the table's legend).
CELLS = {
    "beyond the page cache, no clearing needed by the rules": "over 3x RAM",
    "caches cleared first, as the rules ask": "cleared",
    "the rules ask caches cleared first; this warm read does not follow them": "warm: not per rules",
    "the rules ask caches cleared first; whether they were is not recorded": "not recorded",
}
MEANING = (
    "the rules' cache condition on the read (Rules.md 4.3.1): over 3x RAM (data read per host beyond 3x a host's "
    "memory), cleared (below it, caches cleared first), warm: not per rules (below it, read warm), not recorded "
    "(below it; the run does not say whether caches were cleared: an imported DLIO summary)"
)


def judge(rows: pd.DataFrame, metas: Mapping[str, Mapping[str, Any]]) -> str:
    """The cell for a group's load rows: each row's verdict, once each ('-' where no row has a host's memory)."""
    verdicts = [v for _, row in rows.iterrows() if (v := verdict(row, metas))]
    return "; ".join(CELLS[v] for v in dict.fromkeys(verdicts)) or "-"


def verdict(row: pd.Series, metas: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One load row's verdict (mlperf.cache_verdict), None without its bytes or a host's memory."""
    memory = host_memory(row, metas)
    nodes = row.get("nodes")
    data = row.get("bytes")
    if memory is None or tables.missing(data):
        return None
    per_host = float(data) / (1 if tables.missing(nodes) or not nodes else float(nodes))
    cache = row.get("cache")
    return mlperf.cache_verdict(per_host, memory, "" if tables.missing(cache) else str(cache))


def host_memory(row: pd.Series, metas: Mapping[str, Mapping[str, Any]]) -> float | None:
    """A host's memory: the row's own figure, else the machine's in the row's sidecar."""
    own = row.get("host_memory_bytes")
    if not tables.missing(own) and float(own) > 0:
        return float(own)
    machine = (metas.get(str(row.get("source")), {}) or {}).get("machine") or {}
    memory = machine.get("memory_bytes") if isinstance(machine, Mapping) else None
    return float(memory) if isinstance(memory, (int, float)) and memory > 0 else None


def notes(found: pd.DataFrame, labels: dict[str, str]) -> list[str]:
    """A warning per geometry row whose read does not meet the rules' cache condition, or cannot tell."""
    if found.empty or "read_caches" not in found:
        return []
    flagged = found[found["read_caches"].str.contains("warm|not recorded", regex=True)]
    return [
        f"{labels.get(r['run_id'], r['run_id'])} on {r['host']}: {r['engine']} {r['workload']} read "
        f"({r['read_caches']}): below 3x a host's memory the rules ask caches cleared before the read"
        for _, r in flagged.iterrows()
    ]
