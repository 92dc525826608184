"""The report's answer in a few lines, for the top of the HTML page: what the storage moved at best (fio's
ceilings: direct I/O, durable writes where the run has them), how close each checkpoint engine came to its
run's ceiling, and which guard-rail flags were raised. Read from the Report value (its summary and ceiling
ratios): nothing is computed twice."""

from __future__ import annotations

import pandas as pd

from gdsbench import ceilings, flags
from gdsbench.report import tables
from gdsbench.report.sections import Report
from gdsbench.units import num2str

#: Summary columns that are figures, not the identity of a group.
FIGURES = ("n", "bw_median", "bw_min", "bw_max", "iops_median", "lat_mean_us", "lat_p99_us", "bytes", "spread", "flags")


def lines(report: Report) -> list[str]:
    """The storage ceilings, the engines against them, and the flags: one sentence each."""
    labels = dict(report.labels)
    return [
        *ceiling_lines(report.summary, labels),
        *engine_lines(report.figures("ceilings")),
        flag_line(report.summary),
    ]


def three_lines(report: Report) -> list[str]:
    """The headline as the text report opens with it: the storage's ceilings, the engines against them, the flags."""
    labels = dict(report.labels)
    ceilings_said = "; ".join(ceiling_lines(report.summary, labels)) or "no storage I/O case in these results"
    engines_said = "; ".join(engine_lines(report.figures("ceilings"))) or "no checkpoint engine against a ceiling"
    return [f"ceilings: {ceilings_said}", f"engines: {engines_said}", flag_line(report.summary)]


def bw(value: float) -> str:
    """A bandwidth in fio's power-of-2 units: 1318MiB/s."""
    return num2str(int(value), unit="B/s")


def ceiling_lines(summary: pd.DataFrame, labels: dict[str, str]) -> list[str]:
    """The best median bandwidth of each storage I/O pattern (direct I/O, durable writes, where the rows say
    so), with the group that reached it."""
    if "pattern" not in summary:
        return []
    found = []
    for pattern, group in summary[~summary["pattern"].isin(tables.CHECKPOINT_PATTERNS)].groupby("pattern", sort=False):
        rows, kind = _strictest(group, pattern)
        best = rows.loc[rows["bw_median"].idxmax()]
        names = tables.varying(group, [c for c in group.columns if c not in (*FIGURES, "pattern")])
        where = tables.group_title(names, tuple(best[names]), labels)
        found.append(f"storage {pattern}{kind}: {bw(best['bw_median'])} at best" + (f" ({where})" if where else ""))
    return found


def _strictest(group: pd.DataFrame, pattern: str) -> tuple[pd.DataFrame, str]:
    """The rows that measure the device itself when the group says which: direct I/O (not CPU_CACHED), and
    for writes fsynced ones (end_fsync); with the words that say so."""
    words = []
    if "transfer" in group and (group["transfer"] != "CPU_CACHED").any():
        group, words = group[group["transfer"] != "CPU_CACHED"], ["direct"]
    if "write" in pattern:
        durable = group[ceilings.durable(group)]
        if not durable.empty:
            group, words = durable, [*words, "durable"]
    return group, f" ({', '.join(words)})" if words else ""


def engine_lines(ratios: pd.DataFrame | None) -> list[str]:
    """For saves and loads: each engine's best median against fio's ceiling of its run, best first."""
    if ratios is None or ratios.empty:
        return []
    found = []
    for pattern, group in ratios.groupby("pattern", sort=False):
        ranked = group.assign(base=group["engine"].str.split(" ").str[0]).sort_values("x_fio", ascending=False)
        parts = [
            f"{r.base} {tables.number(r.x_fio, 2)}x ({bw(r.bw_median)})"
            for r in ranked.drop_duplicates("base").itertuples()
        ]
        found.append(f"{pattern}s against fio's ceiling of their run, each engine at its best: " + ", ".join(parts))
    return found


def flag_line(summary: pd.DataFrame) -> str:
    """Which flags the groups carry, and how many groups each: or that none was raised."""
    cells = summary["flags"] if "flags" in summary else pd.Series(dtype=object)
    counts = {name: sum(name in flags.parse(cell) for cell in cells) for name in flags.RULES}
    raised = [f"{name} on {count} of {len(summary)} groups" for name, count in counts.items() if count]
    return "flags: " + ("; ".join(raised) + " (the notes say why and what to do)" if raised else "none raised")
