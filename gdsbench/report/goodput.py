"""The train pattern's figures, engines side by side: what a checkpoint costs a training loop and the
goodput that leaves at each mean time between failures (gdsbench.runners.checkpoint.train has the model)."""

from __future__ import annotations

import pandas as pd

from gdsbench.report import ceilings, tables

TITLE = "Checkpoints in a training loop: stall, slowdown, restore and goodput at the optimal interval"
FIGURES = ("stall_seconds", "slowdown", "checkpoint_cost_seconds", "restore_seconds", "optimal_interval_seconds",
           "goodput")  # fmt: skip


def goodputs(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per run, host, engine and mtbf of the train rows: the median of each figure over repetitions."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    train = ok[ok["pattern"] == "train"] if "pattern" in ok else ok.iloc[0:0]
    if train.empty or "goodput" not in train:
        return pd.DataFrame()
    train = train.assign(label=ceilings.engine_labels(train.drop(columns=["mtbf"], errors="ignore")))
    keys = ["run_id", "host", "label", *(["mtbf"] if "mtbf" in train else [])]
    rows = []
    for values, group in train.groupby(keys, sort=False, dropna=False):
        medians = {f: float(group[f].median()) for f in FIGURES if f in group}
        rows.append({**dict(zip(["run_id", "host", "engine", "mtbf"], values)), "n": len(group), **medians})
    return pd.DataFrame(rows).sort_values(["run_id", "host", "mtbf", "goodput"], ascending=[True, True, True, False])


def goodput_rows(found: pd.DataFrame, runs: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the goodput table, best goodput first within each mtbf."""
    where = tables.varying(found, ["run_id", "host"])
    header = [*map(tables.header_of, where), "engine", "mtbf", "n", "stall s", "slowdown", "cost s", "restore s",
              "interval", "goodput"]  # fmt: skip
    rows = [
        [
            *((runs or {}).get(r[c], r[c]) for c in where),
            r["engine"],
            _duration(r.get("mtbf")),
            str(r["n"]),
            tables.number(r["stall_seconds"], 3),
            "-" if tables.missing(r["slowdown"]) else f"{r['slowdown']:+.1%}",
            tables.number(r["checkpoint_cost_seconds"], 3),
            tables.number(r["restore_seconds"], 2),
            _duration(r["optimal_interval_seconds"]),
            "-" if tables.missing(r["goodput"]) else f"{r['goodput']:.4%}",
        ]
        for _, r in found.iterrows()
    ]
    return tables.drop_empty(header, rows, len(where) + 2)


def _duration(seconds: float | None) -> str:
    """'24h', '1h', '7m 41s', '12.5s': a duration as an operator reads it."""
    if seconds is None or tables.missing(seconds):
        return "-"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:.0f}h"
    if seconds >= 60:
        return f"{int(seconds // 60)}m {seconds % 60:.0f}s"
    return f"{seconds:.1f}s"
