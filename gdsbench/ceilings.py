"""A checkpoint pattern's ceiling in one run: what fio (or, for objects, the s3 engine) moved at best under the
same conditions, chosen once for the report's ratios and the guard rail that flags a row above it.

A save is durable (its files and directory are fsynced before it counts), so its ceiling is fio's best
durable direct-I/O write of the run (`end_fsync=1`); a run without one falls back to the non-durable write,
labelled. A load's ceiling is fio's best direct read. Page-cache (CPU_CACHED) fio cases measure memory, never a
ceiling. Checkpoint engines whose rows declare the s3 ceiling (checkpoints that are S3 objects) are held to the
s3 engine's best PUT or GET of the run.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gdsbench.columns import FILES, FILES_CEILING, OBJECTS_CEILING

#: Patterns of checkpoint engines and the fio pattern whose bandwidth is their ceiling.
CEILINGS = {"save": "write", "load": "read"}
S3_CALLS = {"save": "PUT", "load": "GET"}
NO_FSYNC = "no fsync"


@dataclass(frozen=True)
class Ceiling:
    """fio's limit for one pattern of one run: the bandwidth, what it is, and the non-durable reference."""

    bw: float
    label: str  # "fio durable write", "fio write (no fsync)", "fio read"
    durable: bool  # False only for a save compared with a write that never fsynced
    no_fsync_bw: float = float("nan")  # saves: fio's best write without fsync, shown beside the ceiling


def best(rows: pd.DataFrame) -> float:
    """The best configuration's median: the highest median bandwidth over the rows' cases (NaN when none)."""
    return float(rows.groupby("case")["bw_bytes"].median().max()) if not rows.empty else float("nan")


def durable(fio: pd.DataFrame) -> pd.Series:
    """Which fio rows fsynced their files before the job ended (end_fsync=1, as a CSV reads it back)."""
    if "end_fsync" not in fio:
        return pd.Series(False, index=fio.index)
    return fio["end_fsync"].astype(str).str.strip().str.lower().isin(("true", "1", "1.0"))


def _fio_of(run: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """The fio rows a checkpoint pattern's ceiling is chosen from: its fio pattern on the run's directory (not
    objects in a Ceph cluster), never the page cache."""
    fio = run[
        (run["engine"] == FILES_CEILING) & (run["pattern"] == CEILINGS[pattern]) & (run["transfer"] != "CPU_CACHED")
    ]
    return fio[fio["stores_on"] == FILES]


def _s3_of(run: pd.DataFrame, pattern: str) -> pd.DataFrame:
    """The s3 engine's rows an object store's checkpoint pattern is held to: its PUTs (saves) or GETs (loads)."""
    return run[(run["engine"] == OBJECTS_CEILING) & (run["pattern"] == CEILINGS[pattern])]


def in_objects(rows: pd.DataFrame | None) -> bool:
    """Whether checkpoint rows declare the s3 engine as their ceiling (checkpoints that are objects: an engine's
    own, or a case of a file engine that a `bucket` sent to S3)."""
    return rows is not None and "ceiling" in rows and bool((rows["ceiling"] == OBJECTS_CEILING).any())


def ceiling_rows(run: pd.DataFrame, pattern: str, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows of the fio case that is a checkpoint pattern's ceiling (durable where the run has it); for
    checkpoint `rows` that are objects, the s3 engine's best case."""
    objects = in_objects(rows)
    fio = _s3_of(run, pattern) if objects else _fio_of(run, pattern)
    if pattern == "save" and not objects and durable(fio).any():
        fio = fio[durable(fio)]
    if fio.empty:
        return fio
    return fio[fio["case"] == fio.groupby("case")["bw_bytes"].median().idxmax()]


def ceiling(run: pd.DataFrame, pattern: str, rows: pd.DataFrame | None = None) -> Ceiling:
    """fio's ceiling for a checkpoint pattern in one run's ok rows: the durable write for saves (else the
    non-durable one, labelled), the best direct read for loads; page-cache cases never count. Checkpoint `rows`
    that are objects are held to the s3 engine's best PUT or GET of the run instead (a PUT is durable)."""
    if in_objects(rows):
        return Ceiling(best(_s3_of(run, pattern)), f"s3 {S3_CALLS[pattern]}", durable=True)
    fio = _fio_of(run, pattern)
    if pattern != "save":
        return Ceiling(best(fio), f"fio {CEILINGS[pattern]}", durable=True)
    synced = durable(fio)
    best_durable, no_fsync = best(fio[synced]), best(fio[~synced])
    if pd.notna(best_durable):
        return Ceiling(best_durable, "fio durable write", durable=True, no_fsync_bw=no_fsync)
    return Ceiling(no_fsync, f"fio write ({NO_FSYNC})", durable=False, no_fsync_bw=no_fsync)


def bounded(rows: pd.DataFrame) -> pd.Series:
    """Rows whose traits name their ceiling (`ceiling` empty: nothing of their run bounds them, as an imported
    DLIO summary's rows: `gdsbench import`)."""
    if "ceiling" not in rows:
        return pd.Series(True, index=rows.index)
    return rows["ceiling"].notna() & (rows["ceiling"] != "")
