"""How far the report's figures can be trusted: flagged groups with their remedies, stragglers and the
spread between first and last finished host or job, and links of the runs' hosts trained below their maximum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from gdsbench import flags
from gdsbench.report import tables
from gdsbench.results import read_sidecar

#: A multi-job row names its straggler when the last job finished this share of the runtime after the first.
STRAGGLER_SHARE = 0.05
AGGREGATE = "all"


def union_flags(cells: pd.Series) -> str:
    """The flags of a group's rows, each once, as one cell."""
    return flags.text(name for cell in cells for name in flags.parse(cell))


def flag_notes(frame: pd.DataFrame) -> list[str]:
    """One warning per flag raised: how many cases carry it, what it means, and the remedy."""
    if "flags" not in frame:
        return []
    ok = frame[frame["status"] == "ok"]
    notes = []
    for name, rule in flags.RULES.items():
        hit = ok[ok["flags"].map(lambda cell, n=name: n in flags.parse(cell))]
        if not hit.empty:
            count = hit[["case", "host"]].drop_duplicates().shape[0] if "host" in hit else hit["case"].nunique()
            notes.append(f"flag {name} on {count} case(s): {rule.meaning}; remedy: {rule.remedy}")
    return notes


def straggler_notes(frame: pd.DataFrame, groups: list[str], labels: dict[str, str] | None = None) -> list[str]:
    """Each group whose median repetition had a straggler: the slowest host (of an `all` row) or job,
    and how long after the first it finished."""
    if "spread_seconds" not in frame or "straggler" not in frame:
        return []
    ok = frame[(frame["status"] == "ok") & frame["straggler"].notna() & frame["spread_seconds"].notna()]
    notes = []
    for values, group in ok.groupby(groups, dropna=False, sort=False):
        median = tables.median_row(group, "spread_seconds")
        fleet = str(median.get("host")) == AGGREGATE
        share = STRAGGLER_SHARE * float(median["seconds"]) if not fleet else 0.0
        if median["spread_seconds"] <= share:  # finished together: nobody straggled
            continue
        title = tables.group_title(groups, values if isinstance(values, tuple) else (values,), labels or {})
        what = "slowest host" if fleet else "slowest job"
        notes.append(
            f"straggler {title}: {what} {median['straggler']}, +{median['spread_seconds']:.3f} s after the first"
            f" (median of {len(group)} repetition(s))"
        )
    return notes


def sidecars(frame: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each results file's sidecar, by the frame's `source` column."""
    if "source" not in frame:
        return {}
    return {str(source): read_sidecar(Path(source)) for source in frame["source"].dropna().unique()}


def link_warnings(metas: dict[str, dict[str, Any]]) -> list[str]:
    """PCIe links below their maximum in any run's fingerprint, per host, once each."""
    notes = []
    for meta in metas.values():
        hosts = (meta.get("fingerprint") or {}).get("hosts") or {}
        for host, facts in hosts.items():
            for line in (facts or {}).get("degraded_links") or []:
                notes.append(f"host {host}: {line} (a link trained below its maximum caps bandwidth)")
    return list(dict.fromkeys(notes))
