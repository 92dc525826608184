"""The durability ladder (issues 33, 39): train rows that put checkpoints in tiers (RAM, a peer's RAM, a local folder,
S3), side by side (seconds until durable in each tier, a restore from each, the work at risk), and their goodput
with one failure level per tier, evaluated at report time (`gdsbench report --mtbf-local 24h --mtbf-node 7d
--mtbf-correlated 90d`). docs/benchmarks.md, "The durability ladder", has the model and its sources:
- three failure levels, each with its rate 1/M_i: a process lost (the node's RAM and disk outlive it: `--mtbf-local`),
  a node lost (a peer's RAM and S3 outlive it: `--mtbf-node`), several nodes lost together (only S3 outlives them:
  `--mtbf-correlated`, not modelled unless given); all of them at 1/M = sum 1/M_i;
- a failure of a level is restored from the row's nearest tier that outlives it (TIERS: each tier's figures and the
  level it survives) and costs that tier's restore R plus the lag L of its copy (from the moment the loop goes on
  until durable there: durable seconds - stall, the work a failure in that window loses on top of Daly's); a level
  no tier of the row outlives loses every copy: no goodput;
- the mean penalty per failure P = sum M (R_i + L_i) / M_i, then Daly 2006 (report.goodput) with restart P: the
  optimal interval for the row's checkpoint cost C and M, and goodput tau / (M e^(P/M) (e^((tau+C)/M) - 1)) there.
  With two levels and tiers [local, s3] this is issue 33's two-level model.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from gdsbench.columns import NEAR_TIER, TIER_COLUMNS
from gdsbench.errors import UsageError
from gdsbench.report import ceilings, goodput, tables
from gdsbench.report.derived import Derived, Inputs, Setting

#: A ladder case's keys that are not its loop (loop vs memory holds rows of one loop to each other): its tiers, its
#: fault (the tiered engine's, tiered_ranks', with its kills), and the transfer its tiers take (O_DIRECT or cached).
NOT_THE_LOOP = ("tiers", "fault", "peer_fault", "kills", "transfer")
TITLE = (
    "The durability ladder: time until durable per tier, restores, work at risk, goodput with a failure level per tier"
)
DEFAULT_MTBF_LOCAL = 86400.0  # a day between failures the node-local copy survives (a process, a GPU reset)
DEFAULT_MTBF_NODE = 7 * 86400.0  # a week between failures that take the node's local copy with them
LADDER = (
    *(durable for durable, _ in TIER_COLUMNS.values()),
    *(restore for _, restore in TIER_COLUMNS.values()),
    "work_at_risk_steps",
)
FIGURES = ("stall_seconds", "checkpoint_cost_seconds", "loop_seconds", *LADDER)
MEANINGS = {
    "tiers": "the row's measured tiers nearest first (a durable time and a restore each): the near tier (local, or "
    "memory: RAM), peer (the next node's RAM), local (a folder after the peer), s3",
    "mtbf correlated": "the model's mean time between failures of several nodes at once (only S3 outlives them); "
    "blank: not modelled (--mtbf-correlated)",
    "durable near s": "median seconds from a save's start until durable in the near tier (local folder or memory)",
    "durable peer s": "median seconds from a save's start until the peer (the next node's RAM) holds it",
    "restore peer s": "a lost node's restore from its peers, verified (the model's node level where a row has a peer)",
    "restore near s": "a verified restore from the near tier, median",
    "durable disk s": "median seconds from a save's start until durable in the local folder after the peer",
    "restore disk s": "every node's RAM lost: the slowest rank's restore from the local folder, verified",
    "at risk": "median steps run since the newest checkpoint durable in S3, at each checkpoint",
    "restore s3 s": "a restore from S3 (the nearer copies lost), verified",
    "loop vs memory": "the loop's wall time (steps and stalls) over that of the same engine's [memory] row of the run: "
    "what the tiers after RAM cost the training job",
    "goodput": "useful compute over wall time: Daly's interval, each failure level restored from the nearest tier "
    "that outlives it (docs/benchmarks.md); - where a modelled level outlives every tier of the row",
}


@dataclass(frozen=True)
class Level:
    """A tier a failure is restored from: its restore seconds, and the lag of its copy (seconds after the loop goes
    on until a checkpoint is durable there)."""

    restore: float
    lag: float


PROCESS, NODE, CORRELATED = range(3)  # the failure levels, each outlived by the tiers that survive it


@dataclass(frozen=True)
class TierFigures:
    """A tier as the ladder reads it: its row columns (durable, restore) and the widest failure level it outlives."""

    durable: str
    restore: str
    survives: int


NEAR = TierFigures(*TIER_COLUMNS[NEAR_TIER], PROCESS)  # a ladder's first tier, in RAM or on disk
#: The tiers after the first, by name (a row's `tiers`), nearest first, each with the widest level it outlives.
TIERS = {
    name: TierFigures(*TIER_COLUMNS[name], level)
    for name, level in (("peer", NODE), ("local", PROCESS), ("s3", CORRELATED))
}


def lag(durable: float, stall: float) -> float:
    """How long after the loop went on a checkpoint became durable in a tier (0 for a save that waited for it)."""
    return max(0.0, durable - stall)


def penalty(chain: Sequence[tuple[int, Level]], mtbfs: Sequence[float]) -> float:
    """The mean seconds a failure costs besides the lost interval: restore plus lag of the nearest tier of `chain`
    ((level it survives, Level), nearest first) that outlives it, weighted by the levels' rates (`mtbfs`, one per
    level; infinite: not modelled); NaN where a modelled level outlives every tier."""
    weighted = total = 0.0
    for level, mtbf in enumerate(mtbfs):
        if math.isinf(mtbf):
            continue
        near = next((tier for survives, tier in chain if survives >= level), None)
        if near is None:
            return math.nan
        weighted += (near.restore + near.lag) / mtbf
        total += 1 / mtbf
    return weighted / total


def by_level(cost: float, chain: Sequence[tuple[int, Level]], mtbfs: Sequence[float]) -> tuple[float, float]:
    """(optimal interval, goodput) for a checkpoint cost, a row's tiers (penalty's chain) and the levels' MTBFs;
    NaN for both where a failure level outlives every tier."""
    restart = penalty(chain, mtbfs)
    if math.isnan(restart):
        return math.nan, math.nan
    mtbf = 1 / sum(1 / m for m in mtbfs if not math.isinf(m))
    interval = goodput.daly_interval(cost, mtbf)
    return interval, goodput.goodput(interval, cost, restart, mtbf)


def two_level(
    cost: float, local: Level | None, remote: Level | None, mtbf_local: float, mtbf_node: float
) -> tuple[float, float]:
    """by_level for a node-local tier and a tier that outlives the node (issue 33's model)."""
    chain = [(PROCESS, local)] if local else []
    return by_level(cost, [*chain, *([(CORRELATED, remote)] if remote else [])], (mtbf_local, mtbf_node))


def levels_of(settings: Mapping[str, Any]) -> tuple[tuple[float, float, float], ...]:
    """Every (local, node, correlated) MTBF of `--mtbf-local 24h --mtbf-node 7d --mtbf-correlated 90d` (comma
    lists; each defaults alone; correlated failures are not modelled unless given)."""
    locals_ = settings.get("mtbf_local") or (DEFAULT_MTBF_LOCAL,)
    nodes = settings.get("mtbf_node") or (DEFAULT_MTBF_NODE,)
    correlated = settings.get("mtbf_correlated") or (math.inf,)
    return tuple(itertools.product(locals_, nodes, correlated))


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


def ladders(frame: pd.DataFrame, levels: Sequence[tuple[float, float, float]] = ()) -> pd.DataFrame:
    """One row per run, host, engine and failure levels' MTBFs of the train rows with ladder figures: the medians
    over repetitions and the model's interval and goodput."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    train = ok[ok["pattern"] == "train"] if "pattern" in ok else ok.iloc[0:0]
    present = [c for c in (NEAR.durable, *(t.durable for t in TIERS.values())) if c in train]
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
        names = tier_names(group, medians)
        for mtbfs in levels or levels_of({}):
            rows.append(
                {
                    **dict(zip(["run_id", "host", "engine"], values)),
                    "engine_name": str(group["engine"].iloc[0]),
                    "case": str(group["case"].iloc[0]) if "case" in group else "",
                    "n": len(group),
                    **medians,
                    **_model(medians, mtbfs, names),
                }
            )
    return with_memory_reference(pd.DataFrame(rows)).sort_values(
        ["run_id", "host", "mtbf_local", "mtbf_node", "mtbf_correlated", "goodput"],
        ascending=[True, True, True, True, True, False],
        na_position="last",
    )


def with_memory_reference(found: pd.DataFrame) -> pd.DataFrame:
    """Each row's loop time over that of the RAM-alone ladder ([memory]) of the same loop (its case but for the
    tiers, the fault and the tiers' transfer: the same engine, bytes, ranks, steps and interval), run and host; NaN
    where the run has none."""
    if found.empty:
        return found.assign(loop_vs_memory=math.nan)
    found = found.assign(loop=[loop_of(str(case)) for case in found["case"]])
    alone = found[found["tiers"] == "memory"].drop_duplicates(["run_id", "host", "loop"])
    reference = alone.set_index(["run_id", "host", "loop"])["loop_seconds"]
    keys = pd.MultiIndex.from_frame(found[["run_id", "host", "loop"]])
    ratio = found["loop_seconds"].to_numpy() / reference.reindex(keys).to_numpy()
    return found.drop(columns="loop").assign(loop_vs_memory=ratio)


def loop_of(case: str) -> str:
    """A case's key without what names its tiers and fault: the loop it runs (a RAM-alone row's is its own)."""
    parts = re.split(r",(?=[A-Za-z_]\w*=)", case)
    return ",".join(part for part in parts if part.split("=", 1)[0] not in NOT_THE_LOOP)


def tier_names(group: pd.DataFrame, medians: Mapping[str, float]) -> list[str]:
    """A ladder's tiers nearest first, as its rows' `tiers` say them (rows without it: the tiers with figures, a
    near tier called local)."""
    named = group["tiers"].dropna().astype(str) if "tiers" in group else pd.Series(dtype=str)
    if not named.empty:
        return named.iloc[0].split("+")
    found = ["local"] if not tables.missing(medians[NEAR.durable]) else []
    return found + [name for name, tier in TIERS.items() if not tables.missing(medians[tier.durable])]


def figures_of(names: Sequence[str]) -> list[tuple[str, TierFigures]]:
    """Each named tier's figures: the first one's are the near tier's columns (RAM or a local folder; S3 where a
    ladder is S3 alone), the others' their own."""
    return [
        (name, NEAR if k == 0 and name != "s3" else TIERS[name])
        for k, name in enumerate(names)
        if (k == 0 and name != "s3") or name in TIERS
    ]


def _model(medians: dict[str, float], mtbfs: tuple[float, float, float], names: Sequence[str]) -> dict[str, object]:
    """The row's measured tiers and the model's figures at one set of MTBFs: each failure level restored from the
    nearest tier that outlives it (a process: the near tier; a node: the peer, else S3; several nodes: S3)."""
    stall = medians["stall_seconds"]
    measured = [
        (name, tier.survives, _level(medians[tier.restore], medians[tier.durable], stall))
        for name, tier in figures_of(names)
    ]
    chain = [(survives, level) for _, survives, level in measured if level is not None]
    interval, value = by_level(medians["checkpoint_cost_seconds"], chain, mtbfs)
    return {
        "tiers": "+".join(name for name, _, level in measured if level) or "-",
        "mtbf_local": mtbfs[0],
        "mtbf_node": mtbfs[1],
        "mtbf_correlated": mtbfs[2],
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
        "mtbf correlated",
        "n",
        "stall s",
        "durable near s",
        "durable peer s",
        "durable disk s",
        "durable s3 s",
        "restore near s",
        "restore peer s",
        "restore disk s",
        "restore s3 s",
        "at risk",
        "loop vs memory",
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
            "" if math.isinf(r["mtbf_correlated"]) else goodput.duration_text(r["mtbf_correlated"]),
            str(r["n"]),
            tables.number(r["stall_seconds"], 3),
            *(tables.number(r[c], 2) for c in LADDER[:8]),
            tables.number(r["work_at_risk_steps"], 0),
            tables.number(r["loop_vs_memory"], 2),
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
    Setting(
        "mtbf_correlated",
        "The durability ladder's model: mean time between failures of several nodes at once (only S3 outlives "
        "them), e.g. 90d [default: not modelled].",
        _durations("--mtbf-correlated"),
    ),
)
TABLE = Derived("ladder", TITLE, _compute, ladder_rows, "tiers", MEANINGS, settings=SETTINGS)
