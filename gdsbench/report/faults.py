"""Fault cases (a case's `fault:`, configs/tiers.yaml's, or `peer_fault:`, tiered_ranks'), one row each: what the fault must do (the row's
`fault_expected`), whether the row held to it (ok: it did; failed: the row's error says what happened instead) and
what it found: the tier the restore read, whether the state was exact, what it skipped or why the drains failed,
the kills, and how often ckptio warned (expected of a fault: the messages a fault case prints are its proof)."""

from __future__ import annotations

import pandas as pd

from gdsbench.report import tables
from gdsbench.report.derived import Derived, Inputs

TITLE = "Faults: what each fault case must do and what it did"
NO_FAULT = ("", "none")
FAULT_KEYS = ("fault", "peer_fault")  # the keys that name a case's fault (the tiered engine's, tiered_ranks')
MEANINGS = {
    "held": "ok: the row held to its expectation (a fault that did not is a failed row, with the reason)",
    "restored": "the tier the fault case's restore read from",
    "exact": "whether the restored state equals the saved one, byte for byte",
    "found": "what the restore skipped and why, why the drains failed, or the kills and what they left",
    "warnings": "ckptio's warnings during the case: for a fault, the ones it must cause (the note quotes the first)",
}


def fault_rows(inputs: Inputs) -> pd.DataFrame:
    """Every row of a fault case, ok or failed, in the order they ran."""
    frame = inputs.frame
    keys = [k for k in FAULT_KEYS if k in frame]
    if not keys:
        return pd.DataFrame()
    named = frame[keys].fillna("").astype(str).replace(dict.fromkeys(NO_FAULT, "")).agg("".join, axis=1)
    faulted = frame.assign(fault=named)[named != ""]
    faulted = faulted[faulted["status"].isin(("ok", "failed"))]
    return faulted if not faulted.empty else pd.DataFrame()


def found_text(row: pd.Series) -> str:
    """What the fault case found, in its own terms."""
    if not tables.missing(row.get("kills_made")):
        parts = [
            f"{row.get(c):.0f} {c.replace('_', ' ')}"
            for c in ("kills_made", "kills_in_upload", "torn_seen", "uploads_left")
            if not tables.missing(row.get(c))
        ]
        return ", ".join(parts)
    for column in ("skipped_reason", "drain_error", "exit_refused"):
        if not tables.missing(row.get(column)):
            return str(row[column])
    return "-"


def rows_of(found: pd.DataFrame, runs: dict[str, str]) -> tuple[list[str], list[list[str]]]:
    """Header and cells: a row per fault case and repetition."""
    header = ["engine", "fault", "rep", "held", "restored", "exact", "found", "warnings", "expected"]
    rows = []
    for _, r in found.iterrows():
        held = "ok" if r["status"] == "ok" else f"FAILED: {str(r.get('error') or '')[:200]}"
        rows.append(
            [
                str(r["engine"]),
                str(r["fault"]),
                tables.cell("repetition", r.get("repetition")),
                held,
                tables.cell("restored_tier", r.get("restored_tier")),
                tables.cell("state_exact", r.get("state_exact")),
                found_text(r)[:200],
                tables.cell("ckptio_warnings", r.get("ckptio_warnings")),
                tables.cell("fault_expected", r.get("fault_expected")),
            ]
        )
    return tables.drop_empty(header, rows, 4)


TABLE = Derived("faults", TITLE, fault_rows, rows_of, "fault", MEANINGS)
