"""Checkpoint engines against what the disk can do: each engine's median as a ratio to fio's ceiling of
the same run (and to torch.save's in the same memory state).

A save is durable (its files and directory are fsynced before it counts), so its ceiling is fio's best
durable direct-I/O write of the run (`end_fsync=1`): a write that never fsyncs can measure a write-back
cache instead of the disk (fio wrote 2.5 GB/s without end_fsync and 0.6-0.8 GB/s with it on a virtual
disk, minutes apart). Non-durable fio writes stay beside it as a labelled reference ("x fio (no fsync)");
a run without a durable fio write falls back to the non-durable one, labelled as such, with a warning.
A load's ceiling is fio's best direct read. Page-cache (CPU_CACHED) fio cases measure memory, never a
ceiling. Checkpoint engines whose rows declare the s3 ceiling (checkpoints that are S3 objects) are held to the s3
engine's best PUT or GET of the run.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gdsbench.ceilings import CEILINGS, NO_FSYNC, best, bounded, ceiling, ceiling_rows, in_objects
from gdsbench.columns import DISTRIBUTED, SINGLE_PROCESS
from gdsbench.flags import CEILING_MARGIN
from gdsbench.report import tables
from gdsbench.report.derived import Derived, Inputs
from gdsbench.results import figures_of, parameters, with_traits

#: The state a load starts from: torch_save baselines are compared in the same one.
CONDITIONS = ("cache", "memory")
#: What makes two distributed checkpoint rows comparable: dcp_fast is compared with dcp at the same world
#: size, layout, async mode and executor (and codec, where DCP has it: else DCP uncompressed).
ALIKE = ("world_size", "layout", "async", "executor")
TITLE = "Checkpoint engines against the fio ceiling of the same run"


def engine_labels(rows: pd.DataFrame) -> pd.Series:
    """Each checkpoint row's engine, with the parameters that tell apart its cases of the same pattern
    (e.g. 'fastpersist (load_into=True)'), so variants of one engine are never merged."""
    labels = rows["engine"].astype(str)
    params = [c for c in parameters(rows.columns, figures_of(rows)) if c not in ("engine", "pattern")]
    for _, group in rows.groupby(["engine", "pattern"], sort=False):
        varying = [c for c in params if group[c].nunique(dropna=False) > 1]
        if varying:
            text = group[varying].apply(  # a parameter a row's case does not have is left out, not shown as "-"
                lambda r: ", ".join(f"{c}={tables.cell(c, v)}" for c, v in r.items() if not tables.missing(v)), axis=1
            )
            labels.loc[group.index] = group["engine"].astype(str) + text.map(lambda t: f" ({t})" if t else "")
    return labels


def _same_conditions(baseline: pd.DataFrame, group: pd.DataFrame) -> pd.DataFrame:
    """The baseline rows measured in the group's page-cache and memory state, where the run has them."""
    for column in CONDITIONS:
        if column in group and column in baseline and group[column].nunique() == 1:
            same = baseline[baseline[column] == group[column].iloc[0]]
            baseline = same if not same.empty else baseline
    return baseline


def _same_distributed(baseline: pd.DataFrame, group: pd.DataFrame) -> pd.DataFrame:
    """DCP's own rows measured like a distributed group: same world size, layout, async mode, executor, and
    the group's codec where DCP ran it (else uncompressed); empty when the run has none."""
    for column in ALIKE:
        if column in group and column in baseline:
            baseline = baseline[baseline[column].astype(str) == str(group[column].iloc[0])]
    if "compression" in group and "compression" in baseline:
        same = baseline[baseline["compression"] == group["compression"].iloc[0]]
        baseline = same if not same.empty else baseline[baseline["compression"] == "none"]
    return baseline


def _median(group: pd.DataFrame, column: str) -> float:
    """A column's median over a group's rows (NaN where the rows do not have it)."""
    return float(group[column].median()) if column in group else float("nan")


def _case_of(rows: pd.DataFrame) -> str:
    """The case of a ceiling's rows ('' where the run has none)."""
    return str(rows["case"].iloc[0]) if not rows.empty else ""


def _first(group: pd.DataFrame, column: str) -> str:
    """A group's value of a parameter ('' where its rows do not have it)."""
    return str(group[column].iloc[0]) if column in group else ""


def ceiling_ratios(frame: pd.DataFrame) -> pd.DataFrame:
    """Each checkpoint engine's median bandwidth as a ratio to fio's ceiling of the same run and pattern
    (x_fio; x_s3, the s3 engine's best, for checkpoints in an object store), to fio's best non-durable write
    (x_fio_no_fsync, saves), to the single-process baseline's best case (x_torch_save: the engine whose traits say
    it is that baseline) and, for distributed engines, to the best configuration of the distributed baseline
    (x_dcp: DCP's own storage layer) measured alike; with the median time the caller was blocked and the
    compression ratio where the rows have them. Every denominator is the best configuration's median (COLUMNS says
    so in the tables)."""
    frame = with_traits(frame)  # rows built in memory get their traits as a file's are read
    ok = frame[frame["status"] == "ok"]
    rows = []
    for (run_id, host), run in ok.groupby(["run_id", "host"], sort=False):
        ckpt = run[run["pattern"].isin(list(CEILINGS)) & bounded(run)]
        if ckpt.empty:
            continue
        ckpt = ckpt.assign(label=engine_labels(ckpt))
        for (label, _, pattern), group in ckpt.groupby(["label", "engine", "pattern"], sort=False):
            limit = ceiling(run, pattern, group)
            same = run[run["pattern"] == pattern]
            base = _same_conditions(same[same["baseline"] == SINGLE_PROCESS], group)
            dcp = _same_distributed(same[same["baseline"] == DISTRIBUTED], group)
            median = group["bw_bytes"].median()
            objects = in_objects(group)
            rows.append(
                {
                    "host": host,
                    "run_id": run_id,
                    "engine": label,
                    "pattern": pattern,
                    "n": len(group),
                    "bw_median": median,
                    "x_fio": float("nan") if objects else median / limit.bw,
                    "x_s3": median / limit.bw if objects else float("nan"),
                    "x_fio_no_fsync": median / limit.no_fsync_bw,
                    "x_torch_save": median / best(base),
                    "x_dcp": median / best(dcp) if "world_size" in group else float("nan"),
                    "blocking_s": _median(group, "blocking_seconds"),
                    "compression_ratio": _median(group, "compression_ratio"),
                    "fio_bw": limit.bw,
                    "fio_no_fsync_bw": limit.no_fsync_bw,
                    "ceiling": limit.label,
                    "durable": limit.durable,
                    "ceiling_case": _case_of(ceiling_rows(run, pattern, group)),
                    "transfer": _first(group, "transfer"),
                    "cache": _first(group, "cache"),
                    "request_bytes": _median(group, "io_chunk_bytes"),  # ckptio engines: their request size
                    "engine_threads": _median(group, "io_threads"),
                }
            )
    return pd.DataFrame(rows)


def warnings(ratios: pd.DataFrame, labels: dict[str, str] | None = None) -> list[str]:
    """Engines above their run's ceiling, and why (flag above_ceiling); runs whose saves had no durable fio write to
    be compared with, and what they were compared with (each run by its label when several are reported)."""
    if ratios.empty:
        return []
    return [*above_ceiling_notes(ratios), *_undurable_notes(ratios, labels)]


def above_ceiling_notes(ratios: pd.DataFrame) -> list[str]:
    """Each engine faster than its run's ceiling (flagged above_ceiling), with the reason the rows can name: the page
    cache (a buffered engine, a warm cache), or the ceiling case's requests."""
    ratio = ratios["x_fio"].where(ratios["x_fio"].notna(), ratios["x_s3"])
    notes = []
    for row, x in zip(ratios.itertuples(), ratio):
        if not x > CEILING_MARGIN:
            continue
        if row.transfer == "CPU_CACHED" or row.cache == "warm":
            why = "it read through the page cache (a buffered engine or a warm cache): memory, not the device"
        else:
            case = tables.parse_case(row.ceiling_case)
            shape = ", ".join(f"{k}={tables.cell(k, case[k])}" for k in ("io_size", "threads", "iodepth") if k in case)
            why = f"the ceiling case ({shape or row.ceiling}) is not the device's best for this engine's I/O: add a fio case of its request size and threads"
            if _shaped_like(case, row):
                why = (
                    f"the ceiling case ({shape}) already moves requests as large and as many as the engine's: the "
                    "engine's bytes came from a cache below this kernel (a virtual disk's host, a controller) or its "
                    "one file's layout favours it; read its ratio to the ceiling with care"
                )
        notes.append(f"above_ceiling: {row.engine} {row.pattern} at {tables.number(x, 2)}x {row.ceiling}: {why}")
    return notes


def _shaped_like(case: dict[str, str], row: Any) -> bool:
    """Whether a ceiling case's requests are at least as large and as many as the engine's (where it says them)."""
    try:
        size, threads = float(case.get("io_size", "nan")), float(case.get("threads", "nan"))
    except ValueError:
        return False
    return bool(size >= row.request_bytes and threads >= row.engine_threads)


def _undurable_notes(ratios: pd.DataFrame, labels: dict[str, str] | None) -> list[str]:
    """Runs whose saves had no durable fio write to be compared with."""
    saves = ratios[(ratios["pattern"] == "save") & ~ratios["durable"].astype(bool)]
    notes = []
    for (run_id, host), run in saves.groupby(["run_id", "host"], sort=False):
        fallback = (
            f"fio's write without fsync ({NO_FSYNC}), which can measure a write-back cache, not the disk"
            if run["fio_bw"].notna().any()
            else "nothing (no direct-I/O fio write either)"
        )
        notes.append(
            f"{(labels or {}).get(run_id) or f'run {run_id}'} on {host} has no durable fio write (end_fsync=1); saves are compared with {fallback}: "
            "add a fio write case with end_fsync: [true]"
        )
    return notes


#: Columns of the checkpoint table shown only when some row has them: header -> (ratio column, digits).
OPTIONAL_RATIOS = {
    "x dcp best": ("x_dcp", 2),
    "blocked s": ("blocking_s", 3),
    "size ratio": ("compression_ratio", 2),
}
#: What each ratio column of the checkpoint table divides by (its legend): every `best` is the best
#: configuration's median of the same run.
RATIO_MEANINGS = {
    "x fio best": "over fio's best case of the run, the `ceiling` column (saves: its best durable write, "
    "end_fsync=1, else its best write, labelled `no fsync`; loads: its best direct read)",
    "x s3 best": "checkpoints in an object store: over the s3 engine's best PUT (saves) or GET (loads) of the "
    "run, the `ceiling` column",
    "x fio best (no fsync)": "saves: over fio's best write without end_fsync (a reference: it can measure a "
    "write-back cache)",
    "x torch_save best": "over torch_save's best case in the same page-cache and memory state",
    "x dcp best": "over DCP's best configuration (its best thread count) at the same world size, layout, async "
    "mode and executor (and codec, else uncompressed)",
    "blocked s": "the seconds the caller waited (an async save's staging), median",
    "size ratio": "bytes over bytes on disk (a codec's compression)",
}


def ratio_rows(ratios: pd.DataFrame, runs: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the checkpoint-vs-ceiling table: the ratio to fio's ceiling (durable for saves) or, for
    checkpoints in an object store, to the s3 engine's; to fio's write without fsync (a reference, saves only)
    and to torch_save; for distributed engines the ratio to DCP's best, the time the caller was blocked and the
    compression ratio; the ceiling. Each ratio's denominator is a best configuration's median (RATIO_MEANINGS).
    The run and host columns show when the ratios come from several; empty columns are left out."""
    where = tables.varying(ratios, ["run_id", "host"])
    header = [
        *map(tables.header_of, where),
        "engine",
        "pattern",
        "n",
        "bw (median)",
        "x fio best",
        "x s3 best",
        "x fio best (no fsync)",
        "x torch_save best",
        *OPTIONAL_RATIOS,
        "ceiling",
    ]
    rows = [
        [
            *((runs or {}).get(r[c], r[c]) for c in where),
            r["engine"],
            r["pattern"],
            str(r["n"]),
            tables.bw_text(r["bw_median"]),
            tables.number(r["x_fio"], 2),
            tables.number(r.get("x_s3", float("nan")), 2),
            tables.number(r["x_fio_no_fsync"], 2),
            tables.number(r["x_torch_save"], 2),
            *(tables.number(r.get(column, float("nan")), digits) for column, digits in OPTIONAL_RATIOS.values()),
            tables.bw_text(r["fio_bw"]) + _ceiling_kind(r["pattern"], r["durable"], str(r.get("ceiling", ""))),
        ]
        for _, r in ratios.iterrows()
    ]
    return tables.drop_empty(header, rows, len(where) + 2)


def _ceiling_kind(pattern: str, durable: bool, label: str = "") -> str:
    """What a save's ceiling was: fio's durable write, or (labelled, for want of one) a write without fsync; an
    object store's checkpoint: the s3 engine's PUT or GET."""
    if label.startswith("s3 "):
        return f", {label}"
    if pattern != "save":
        return ""
    return ", durable" if durable else ", no fsync"


def _compute(inputs: Inputs) -> pd.DataFrame:
    """The ceilings table's figures: each checkpoint engine's ratios (ceiling_ratios)."""
    return ceiling_ratios(inputs.frame)


TABLE = Derived("ceilings", TITLE, _compute, ratio_rows, "pattern", RATIO_MEANINGS, warnings)
