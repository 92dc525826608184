"""Runs of the MLPerf Storage checkpoint geometry in the rules' terms, engines side by side: per phase (write,
read) the slowest rank's throughput, the longest rank's duration and the aggregate, in binary units, the mean
over repetitions (the rules average their five runs), and the read's cache condition (report.mlperf_cache).
gdsbench's runs of the geometry are never MLPerf results; imported DLIO summaries (gdsbench import) sit beside them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from gdsbench import mlperf
from gdsbench.report import ceilings, mlperf_cache, tables
from gdsbench.report.derived import Derived, Inputs
from gdsbench.units import GIB

TITLE = (
    f"MLPerf Storage checkpoint geometry (gdsbench's runs: {mlperf.RULES}; imports: the edition their folder names; "
    "gdsbench's runs of the geometry are not MLPerf results)"
)
PHASES = {"save": "write", "load": "read"}
#: An import's rules_edition where its folder names none (gdsbench's own rows have no such column).
UNKNOWN = "unknown"
FIGURES = ("min_rank_bw_bytes", "max_rank_seconds", "bw_bytes")


def geometry_runs(frame: pd.DataFrame, metas: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One row per run, host, geometry, engine and rank count: each phase's figures, the mean over repetitions,
    and the read's cache condition (`metas`: the sidecars by source, for the machines' memory)."""
    ok = frame[frame["status"] == "ok"] if "status" in frame else frame
    if "workload" not in ok or "min_rank_bw_bytes" not in ok:
        return pd.DataFrame()
    rows = ok[ok["workload"].map(mlperf.is_geometry) & ok["pattern"].isin(list(PHASES))]
    if rows.empty:
        return pd.DataFrame()
    # one label for a variant's write and read phases: the parameters that tell variants apart, whatever the phase
    phases = rows.drop(columns=["workload", "world_size", "scale"], errors="ignore").assign(pattern="phase")
    rows = rows.assign(label=ceilings.engine_labels(phases))
    keys = ["run_id", "host", "workload", "label", "world_size", "scale", "checkpoints"]
    out = []
    for values, group in rows.groupby(keys, sort=False, dropna=False):
        row = dict(zip(["run_id", "host", "workload", "engine", "world_size", "scale", "checkpoints"], values))
        named, edition = edition_of(group)
        shape = mlperf.geometry(row["workload"], int(row["world_size"]), row["scale"])
        row["rules"] = named
        row["division"] = shape.judged(edition or mlperf.CURRENT)
        for pattern, phase in PHASES.items():
            part = group[group["pattern"] == pattern]
            row[f"{phase}_n"] = len(part)
            row.update({f"{phase}_{f}": float(part[f].mean()) if len(part) else float("nan") for f in FIGURES})
        row["read_caches"] = mlperf_cache.judge(group[group["pattern"] == "load"], metas or {})
        out.append(row)
    return pd.DataFrame(out)


def edition_of(group: pd.DataFrame) -> tuple[str, mlperf.Edition | None]:
    """The rules a group's rows are judged by, and how the table names them: an import's edition (`rules_edition`;
    one gdsbench does not know is named and judged by the current one), gdsbench's own runs the current one; an
    import whose folder names none is 'edition unknown'."""
    named = group["rules_edition"].dropna().astype(str) if "rules_edition" in group else pd.Series(dtype=str)
    if named.empty:
        return mlperf.CURRENT.name, mlperf.CURRENT
    if named.nunique() > 1:  # a write and a read imported from folders that say different things
        return f"mixed: {', '.join(sorted(set(named)))}", None
    if named.iloc[0] == UNKNOWN:
        return "edition unknown", None
    return named.iloc[0], mlperf.EDITIONS.get(named.iloc[0])


def geometry_rows(found: pd.DataFrame, runs: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the table: GiB/s and seconds as the rules report them."""
    where = [c for c in ("run_id", "host") if found[c].nunique(dropna=False) > 1]
    header = [
        *map(tables.header_of, where),
        "geometry",
        "ranks",
        "scale",
        "engine",
        "ckpts",
        "rules",
        "write min rank GiB/s",
        "write max rank s",
        "write GiB/s",
        "read min rank GiB/s",
        "read max rank s",
        "read GiB/s",
        "read caches",
    ]
    rows = [
        [
            *((runs or {}).get(r[c], r[c]) for c in where),
            str(r["workload"]).removeprefix(mlperf.PREFIX),
            f"{int(r['world_size'])} ({r['division']})",
            _scale(r["scale"]),
            r["engine"],
            str(int(r["checkpoints"])) if not tables.missing(r["checkpoints"]) else "-",
            str(r["rules"]),
            *(_figure(r[f"{phase}_{f}"], f) for phase in PHASES.values() for f in FIGURES),
            r["read_caches"],
        ]
        for _, r in found.iterrows()
    ]
    return tables.drop_empty(header, rows, len(where) + 4)


def _figure(value: float, name: str) -> str:
    """Seconds with two decimals, bandwidths in GiB/s with three."""
    if tables.missing(value):
        return "-"
    return f"{value:.2f}" if name == "max_rank_seconds" else f"{value / GIB:.3f}"


def _scale(value: float) -> str:
    """A scale as a fraction where it is one (1/64), else as a number."""
    fraction = mlperf.parse_scale(float(value)).limit_denominator(1 << 20)
    return str(fraction) if fraction.numerator == 1 else f"{value:g}"


def _compute(inputs: Inputs) -> pd.DataFrame:
    """The geometry table's figures (geometry_runs)."""
    return geometry_runs(inputs.frame, inputs.metas)


TABLE = Derived(
    "mlperf_geometry",
    TITLE,
    _compute,
    geometry_rows,
    "engine",
    {
        "read caches": mlperf_cache.MEANING,
        "rules": "the edition a row is judged by: gdsbench's runs the current one, an import the one its run folder "
        "names (a v3.0 submission path or code image), 'edition unknown' where it names none",
    },
    mlperf_cache.notes,
)
