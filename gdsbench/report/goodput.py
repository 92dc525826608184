"""The train pattern's figures, engines side by side: what a checkpoint costs a training loop, as measured (stall,
slowdown, checkpoint cost, restore), and the model evaluated at report time: Daly's optimal interval and the
goodput there, at each mean time between failures (`gdsbench report --mtbf 1h,24h`; a qualify check's `mtbf:`).
docs/benchmarks.md, "Goodput", has the formulas and their sources:
- the optimal interval, Daly's higher-order estimate for cost C and mtbf M:
  sqrt(2CM) (1 + sqrt(C/2M)/3 + (C/2M)/9) - C when C < 2M, else M;
- goodput at that interval tau, with restart R (exponential failures; Daly 2006's expected wall time per
  tau of compute, inverted): tau / (M e^(R/M) (e^((tau + C)/M) - 1)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from gdsbench.errors import UsageError
from gdsbench.keys import duration
from gdsbench.report import ceilings, tables
from gdsbench.report.derived import Derived, Inputs, Setting

TITLE = "Checkpoints in a training loop: stall, slowdown, restore and goodput at the optimal interval"
#: The mtbf the model is evaluated at when the report names none and a row recorded none: a day, as the sample
#: configs used (files written while mtbf was a case axis recorded theirs, and are read at it).
DEFAULT_MTBF = 86400.0
MEASURED = ("stall_seconds", "slowdown", "checkpoint_cost_seconds", "restore_seconds")
MODELLED = ("optimal_interval_seconds", "goodput")
FIGURES = (*MEASURED, *MODELLED)


def daly_interval(cost: float, mtbf: float) -> float:
    """Daly's higher-order estimate of the optimal compute time between checkpoints (2006)."""
    if cost >= 2 * mtbf:
        return mtbf
    ratio = cost / (2 * mtbf)
    return math.sqrt(2 * cost * mtbf) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - cost


def goodput(interval: float, cost: float, restart: float, mtbf: float) -> float:
    """The fraction of wall time spent on useful compute, for exponential failures with mean `mtbf`
    (Daly 2006: the expected wall time per tau of compute is M e^(R/M) (e^((tau+C)/M) - 1))."""
    return interval / (mtbf * math.exp(restart / mtbf) * math.expm1((interval + cost) / mtbf))


def parse_mtbf(text: str) -> tuple[float, ...]:
    """`--mtbf 1h,24h`: comma-separated durations as a config spells them, each above zero."""
    values = [part.strip() for part in text.split(",")]
    try:
        return tuple(duration(value) for value in values)
    except ValueError:
        raise UsageError(f"--mtbf: expected durations such as 1h,24h (got {text!r})") from None


def at_mtbf(rows: pd.DataFrame, mtbf: Sequence[float] = ()) -> pd.DataFrame:
    """Train rows with the model's figures (optimal_interval_seconds, goodput) at each of `mtbf`, one copy of the
    rows per value; without any, at the mtbf a row recorded (files from when it was a case axis), else
    DEFAULT_MTBF."""
    if mtbf:
        rows = pd.concat([rows.assign(mtbf=float(value)) for value in mtbf], ignore_index=True)
    else:
        recorded = (
            pd.to_numeric(rows["mtbf"], errors="coerce") if "mtbf" in rows else pd.Series(float("nan"), rows.index)
        )
        rows = rows.assign(mtbf=recorded.fillna(DEFAULT_MTBF))
    measured = zip(rows["checkpoint_cost_seconds"].astype(float), rows["restore_seconds"].astype(float), rows["mtbf"])
    model = [(tau := daly_interval(cost, m), goodput(tau, cost, restart, m)) for cost, restart, m in measured]
    return rows.assign(
        optimal_interval_seconds=[interval for interval, _ in model], goodput=[value for _, value in model]
    )


def goodputs(frame: pd.DataFrame, mtbf: Sequence[float] = ()) -> pd.DataFrame:
    """One row per run, host, engine and mtbf of the train rows: the median of each figure over repetitions (the
    model's evaluated per row, at_mtbf)."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    train = ok[ok["pattern"] == "train"] if "pattern" in ok else ok.iloc[0:0]
    if train.empty or "checkpoint_cost_seconds" not in train or "restore_seconds" not in train:
        return pd.DataFrame()
    train = train.assign(label=ceilings.engine_labels(train.drop(columns=["mtbf"], errors="ignore")))
    train = at_mtbf(train, mtbf)
    rows = []
    for values, group in train.groupby(["run_id", "host", "label", "mtbf"], sort=False, dropna=False):
        medians = {f: float(group[f].median()) for f in FIGURES if f in group}
        rows.append({**dict(zip(["run_id", "host", "engine", "mtbf"], values)), "n": len(group), **medians})
    return pd.DataFrame(rows).sort_values(["run_id", "host", "mtbf", "goodput"], ascending=[True, True, True, False])


def goodput_rows(found: pd.DataFrame, runs: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the goodput table, best goodput first within each mtbf."""
    where = tables.varying(found, ["run_id", "host"])
    header = [
        *map(tables.header_of, where),
        "engine",
        "mtbf",
        "n",
        "stall s",
        "slowdown",
        "cost s",
        "restore s",
        "interval",
        "goodput",
    ]
    rows = [
        [
            *((runs or {}).get(r[c], r[c]) for c in where),
            r["engine"],
            duration_text(r.get("mtbf")),
            str(r["n"]),
            tables.number(r["stall_seconds"], 3),
            "-" if tables.missing(r["slowdown"]) else f"{r['slowdown']:+.1%}",
            tables.number(r["checkpoint_cost_seconds"], 3),
            tables.number(r["restore_seconds"], 2),
            duration_text(r["optimal_interval_seconds"]),
            "-" if tables.missing(r["goodput"]) else f"{r['goodput']:.4%}",
        ]
        for _, r in found.iterrows()
    ]
    return tables.drop_empty(header, rows, len(where) + 2)


def duration_text(seconds: float | None) -> str:
    """'7d', '24h', '1h', '7m 41s', '12.5s': a duration as an operator reads it (whole weeks of an mtbf as days,
    as `--mtbf 7d` is written; a day stays 24h)."""
    if seconds is None or tables.missing(seconds):
        return "-"
    if seconds > 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:.0f}d"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:.0f}h"
    if seconds >= 60:
        return f"{int(seconds // 60)}m {seconds % 60:.0f}s"
    return f"{seconds:.1f}s"


def _compute(inputs: Inputs) -> pd.DataFrame:
    """The goodput table's figures at the report's mtbf values (goodputs)."""
    return goodputs(inputs.frame, inputs.settings.get("mtbf") or ())


MTBF = Setting(
    "mtbf",
    "Evaluate the goodput model of train rows (Daly's interval, the goodput) at these mean times between failures, "
    "e.g. 1h,24h [default: the mtbf a row recorded, else 24h].",
    parse_mtbf,
)
TABLE = Derived("goodput", TITLE, _compute, goodput_rows, "mtbf", settings=(MTBF,))
