"""The durability ladder (issue 33): train rows that put checkpoints in a local tier, an object tier or both, side by
side (seconds until durable in each tier, a restore from each, the work at risk), and their goodput with two
failure levels, evaluated at report time (`gdsbench report --mtbf-local 24h --mtbf-node 7d`). docs/benchmarks.md,
"The durability ladder", has the model and its sources:
- failures the node-local copy survives come at rate 1/M_l (restored from the local tier), failures only the object
  tier survives at rate 1/M_n (restored from S3); all of them at 1/M = 1/M_l + 1/M_n;
- a failure of a level costs its restore R plus the lag L of that level's copy (from the moment the loop goes on
  until durable there: durable seconds - stall, the work a failure in that window loses on top of Daly's);
- with one tier (the object tier alone) every failure is restored from it; a row with no object tier survives no
  node loss (no goodput);
- the mean penalty per failure P = M (R_l + L_l) / M_l + M (R_n + L_n) / M_n, then Daly 2006 (report.goodput) with
  restart P: the optimal interval for the row's checkpoint cost C and M, and goodput tau / (M e^(P/M) (e^((tau+C)/M)
  - 1)) there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from gdsbench.errors import UsageError
from gdsbench.report import ceilings, goodput, tables
from gdsbench.report.derived import Derived, Inputs, Setting

TITLE = "The durability ladder: time until durable per tier, restores, work at risk, goodput with two failure levels"
DEFAULT_MTBF_LOCAL = 86400.0  # a day between failures the node-local copy survives (a process, a GPU reset)
DEFAULT_MTBF_NODE = 7 * 86400.0  # a week between failures that take the node's local copy with them
LADDER = (
    "durable_local_seconds",
    "durable_peer_seconds",
    "durable_object_seconds",
    "restore_local_seconds",
    "restore_peer_seconds",
    "restore_object_seconds",
    "work_at_risk_steps",
)
FIGURES = ("stall_seconds", "checkpoint_cost_seconds", *LADDER)
MEANINGS = {
    "tiers": "where the row's checkpoints became durable: the near tier (local, or memory: RAM), s3, or both; the "
    "model's local level is the near tier's (a copy that goes with the node)",
    "durable near s": "median seconds from a save's start until durable in the near tier (local folder or memory)",
    "durable peer s": "median seconds from a save's start until the peer (the next node's RAM) holds it",
    "restore peer s": "a lost node's restore from its peers, verified (the model's node level where a row has a peer)",
    "restore near s": "a verified restore from the near tier, median",
    "at risk": "median steps run since the newest checkpoint durable in S3, at each checkpoint",
    "goodput": "useful compute over wall time: Daly's interval with two failure levels (docs/benchmarks.md)",
}


@dataclass(frozen=True)
class Level:
    """A tier a failure is restored from: its restore seconds, and the lag of its copy (seconds after the loop goes
    on until a checkpoint is durable there)."""

    restore: float
    lag: float


def lag(durable: float, stall: float) -> float:
    """How long after the loop went on a checkpoint became durable in a tier (0 for a save that waited for it)."""
    return max(0.0, durable - stall)


def penalty(local: Level | None, remote: Level, mtbf_local: float, mtbf_node: float) -> float:
    """The mean seconds a failure costs besides the lost interval: restore plus lag of the level it is restored from,
    weighted by the two failure rates (with no local tier, every failure is restored from the object tier)."""
    near = local or remote
    rate_local, rate_node = 1 / mtbf_local, 1 / mtbf_node
    weighted = rate_local * (near.restore + near.lag) + rate_node * (remote.restore + remote.lag)
    return weighted / (rate_local + rate_node)


def two_level(
    cost: float, local: Level | None, remote: Level | None, mtbf_local: float, mtbf_node: float
) -> tuple[float, float]:
    """(optimal interval, goodput) for a checkpoint cost and the row's tiers; NaN for both without an object tier (a
    node loss loses every copy)."""
    if remote is None:
        return math.nan, math.nan
    mtbf = 1 / (1 / mtbf_local + 1 / mtbf_node)
    interval = goodput.daly_interval(cost, mtbf)
    return interval, goodput.goodput(interval, cost, penalty(local, remote, mtbf_local, mtbf_node), mtbf)


def levels_of(settings: Mapping[str, Any]) -> tuple[tuple[float, float], ...]:
    """Every (local, node) pair of `--mtbf-local 24h --mtbf-node 7d` (comma lists; each defaults alone)."""
    locals_ = settings.get("mtbf_local") or (DEFAULT_MTBF_LOCAL,)
    nodes = settings.get("mtbf_node") or (DEFAULT_MTBF_NODE,)
    return tuple(itertools.product(locals_, nodes))


def _durations(option: str) -> Callable[[str], tuple[float, ...]]:
    """A comma list of durations for a report option, as --mtbf parses them."""

    def parse(text: str) -> tuple[float, ...]:
        try:
            return goodput.parse_mtbf(text)
        except UsageError:
            raise UsageError(f"{option}: expected durations such as 24h,7d (got {text!r})") from None

    return parse


def _level(restore: float, durable: float, stall: float) -> Level | None:
    """A tier's Level from a row's medians, None where the row has no such tier."""
    if tables.missing(restore) or tables.missing(durable):
        return None
    return Level(float(restore), lag(float(durable), float(stall)))


def ladders(frame: pd.DataFrame, levels: Sequence[tuple[float, float]] = ()) -> pd.DataFrame:
    """One row per run, host, engine and failure pair of the train rows with ladder figures: the medians over
    repetitions and the model's interval and goodput."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    train = ok[ok["pattern"] == "train"] if "pattern" in ok else ok.iloc[0:0]
    present = [c for c in ("durable_local_seconds", "durable_peer_seconds", "durable_object_seconds") if c in train]
    if train.empty or not present or "checkpoint_cost_seconds" not in train:
        return pd.DataFrame()
    train = train[train[present].notna().any(axis=1)]
    if train.empty:
        return pd.DataFrame()
    train = train.assign(label=ceilings.engine_labels(train))
    rows = []
    for values, group in train.groupby(["run_id", "host", "label"], sort=False, dropna=False):
        medians = {
            f: float(pd.to_numeric(group[f], errors="coerce").median()) if f in group else math.nan for f in FIGURES
        }
        near = near_tier(group)
        for mtbf_local, mtbf_node in levels or levels_of({}):
            rows.append(
                {
                    **dict(zip(["run_id", "host", "engine"], values)),
                    "n": len(group),
                    **medians,
                    **_model(medians, mtbf_local, mtbf_node, near),
                }
            )
    return pd.DataFrame(rows).sort_values(
        ["run_id", "host", "mtbf_local", "mtbf_node", "goodput"],
        ascending=[True, True, True, True, False],
        na_position="last",
    )


def near_tier(group: pd.DataFrame) -> str:
    """The name of a ladder's near tier, as its rows' `tiers` say it (memory, or a local folder: the default)."""
    named = group["tiers"].dropna().astype(str) if "tiers" in group else pd.Series(dtype=str)
    first = named.iloc[0].split("+")[0] if not named.empty else ""
    return first if first in ("memory", "local") else "local"


def _model(medians: dict[str, float], mtbf_local: float, mtbf_node: float, near: str = "local") -> dict[str, object]:
    """The row's tiers and the two-level model's figures at one failure pair (`near`: the near tier's name; a
    memory copy is node-local as a local folder's is: both go with the node). A node lost is restored from the
    nearest tier that outlives it: the peer (the next node's RAM) where the row has one, else the object tier."""
    stall = medians["stall_seconds"]
    local = _level(medians["restore_local_seconds"], medians["durable_local_seconds"], stall)
    peer = _level(medians["restore_peer_seconds"], medians["durable_peer_seconds"], stall)
    objects = _level(medians["restore_object_seconds"], medians["durable_object_seconds"], stall)
    remote = peer or objects
    interval, value = two_level(medians["checkpoint_cost_seconds"], local, remote, mtbf_local, mtbf_node)
    tiers = "+".join(name for name, level in ((near, local), ("peer", peer), ("s3", objects)) if level) or "-"
    return {
        "tiers": tiers,
        "mtbf_local": mtbf_local,
        "mtbf_node": mtbf_node,
        "optimal_interval_seconds": interval,
        "goodput": value,
    }


def ladder_rows(found: pd.DataFrame, runs: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the ladder table, best goodput first within each failure pair."""
    where = tables.varying(found, ["run_id", "host"])
    header = [
        *map(tables.header_of, where),
        "engine",
        "tiers",
        "mtbf local",
        "mtbf node",
        "n",
        "stall s",
        "durable near s",
        "durable peer s",
        "durable s3 s",
        "restore near s",
        "restore peer s",
        "restore s3 s",
        "at risk",
        "interval",
        "goodput",
    ]
    rows = [
        [
            *((runs or {}).get(r[c], r[c]) for c in where),
            r["engine"],
            r["tiers"],
            goodput.duration_text(r["mtbf_local"]),
            goodput.duration_text(r["mtbf_node"]),
            str(r["n"]),
            tables.number(r["stall_seconds"], 3),
            *(tables.number(r[c], 2) for c in LADDER[:6]),
            tables.number(r["work_at_risk_steps"], 0),
            goodput.duration_text(r["optimal_interval_seconds"]),
            "-" if tables.missing(r["goodput"]) else f"{r['goodput']:.4%}",
        ]
        for _, r in found.iterrows()
    ]
    return tables.drop_empty(header, rows, len(where) + 2)


def _compute(inputs: Inputs) -> pd.DataFrame:
    """The ladder table's figures at the report's failure pairs (ladders)."""
    return ladders(inputs.frame, levels_of(inputs.settings))


SETTINGS = (
    Setting(
        "mtbf_local",
        "The durability ladder's model: mean time between failures a node-local copy survives (restored from the "
        "local tier), e.g. 24h [default: 24h].",
        _durations("--mtbf-local"),
    ),
    Setting(
        "mtbf_node",
        "The durability ladder's model: mean time between failures only the object tier survives (a node lost), "
        "e.g. 7d [default: 7d].",
        _durations("--mtbf-node"),
    ),
)
TABLE = Derived("ladder", TITLE, _compute, ladder_rows, "tiers", MEANINGS, settings=SETTINGS)
