"""`gdsbench import`: MLPerf Storage / DLIO checkpointing `summary.json` files as results rows, beside gdsbench's own
runs of the same geometry.

DLIO (argonne-lcf/dlio_benchmark, utils/statscounter.py) writes one summary.json per invocation, on rank 0:
`metric.{save,load}_checkpoint_io_mean_GB_per_second` is the mean over the phase's checkpoints of
`checkpoint_size_GB / duration`, the duration timed on rank 0 (a barrier before each checkpoint, none after it
unless `checkpoint.rank_sync`); `checkpoint_size_GB` is every rank's bytes together. Its "GB" are GiB (the rules'
Table 2 units note). Per-host arrays (`host_memory_GB`, `potential_caching`) hold memory, not throughput, and
DLIO may file several hosts under one entry (real summaries show 16 hosts' memory in 4 entries); their sum is
the hosts' memory. So a summary gives one row per phase: its host, or `all` for several hosts (as fio's
multi-host rows), with no per-rank figures. The geometry is the one whose bytes at `num_accelerators` ranks
equal `checkpoint_size_GB` (gdsbench/mlperf.py). A summary is untrusted: nothing in it runs, every value is
checked and a bad one is a SummaryError naming the file and key.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeGuard

from gdsbench import mlperf, mlperf_runs, results
from gdsbench.cases import Case
from gdsbench.columns import FILES, TEXT, Column, Traits, records
from gdsbench.errors import SummaryError
from gdsbench.files import replace_file
from gdsbench.units import GIB

ENGINE = "mlperf-dlio"
#: An imported row's traits: checkpoint files in a directory (MLPerf's POSIX runs); no ceiling, as its run has no
#: fio case to bound it (report.ceilings leaves it out).
TRAITS = Traits(stores_on=FILES, ceiling="")
#: The result columns an imported row adds (declared in the sidecar, as runners declare theirs).
COLUMNS = (
    Column("bw_stdev_bytes", "bytes/s", "DLIO: standard deviation of the phase's per-checkpoint rates"),
    Column("checkpoint_seconds", "s", "DLIO: mean duration of one checkpoint, on rank 0's clock"),
    Column("checkpoint_seconds_stdev", "s", "DLIO: standard deviation of the checkpoints' durations"),
    Column("nodes", "count", "nodes the ranks ran on (DLIO's num_hosts)"),
    Column("host_memory_bytes", "bytes", "memory of one client host, for the rules' 3x-memory cache check"),
    Column(
        "rules_edition",
        "",
        "the MLPerf Storage rules edition the run's folder names (v3.0, v2.0; unknown: it names none)",
        TEXT,
    ),
)
#: Checkpoints per phase of a CLOSED run (Rules.md Table 3); summary.json does not record the count.
RULES_CHECKPOINTS = 10
PHASES = {"save": "save_checkpoint", "load": "load_checkpoint"}
TRAINING_KEYS = ("train_au_mean_percentage", "train_throughput_mean_samples_per_second")
MAX_FILE_BYTES = 1 << 20  # real summaries are about 5 KB
MAX_RANKS = 1 << 16
MAX_GIB = float(1 << 30)  # sizes and memory, in GiB
MAX_RATE_GIB = float(1 << 20)  # GiB/s
MAX_SECONDS = 1e7
HOSTNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


@dataclass(frozen=True)
class Phase:
    """One phase's figures as DLIO summarised them (GiB converted to bytes)."""

    pattern: str  # save or load
    bw_bytes: float
    bw_stdev_bytes: float | None
    checkpoint_seconds: float
    checkpoint_seconds_stdev: float | None


@dataclass(frozen=True)
class Summary:
    """What a checked summary.json holds that a row needs."""

    path: Path
    sha256: str
    start: str
    end: str
    hostname: str
    ranks: int
    hosts: int
    checkpoint_bytes: int
    workload: str
    host_memory_bytes: float
    memory_entries: tuple[float, ...]  # host_memory_GB as written
    potential_caching: tuple[int, ...]
    phases: tuple[Phase, ...]
    edition: str | None = None  # the rules edition its run folder names (mlperf_runs.edition)
    ranked: Mapping[str, mlperf_runs.RankPhase] = field(default_factory=dict)  # per-rank stats beside it, by pattern

    @property
    def host(self) -> str:
        """The row's host: the one host, or `all` for a run over several."""
        return self.hostname if self.hosts == 1 else "all"

    def record(self) -> dict[str, Any]:
        """What the sidecar keeps of it."""
        return {
            "path": str(self.path),
            "sha256": self.sha256,
            "start": self.start,
            "end": self.end,
            "hostname": self.hostname,
            "num_accelerators": self.ranks,
            "num_hosts": self.hosts,
            "workload": self.workload,
            "checkpoint_size_GB": self.checkpoint_bytes / GIB,
            "host_memory_GB": list(self.memory_entries),
            "potential_caching": list(self.potential_caching),
            "phases": [phase.pattern for phase in self.phases],
            "rules_edition": self.edition,
            "per_rank_stats": {p: r.ranks for p, r in self.ranked.items()},
        }


def read_summary(path: Path) -> Summary:
    """A DLIO checkpointing summary.json, checked, with the per-rank stats beside it and the edition its folder
    names; SummaryError naming the file and key otherwise."""
    summary = parse(path, _read_file(path))
    ranked = mlperf_runs.rank_phases(summary.path, summary.ranks)
    return replace(summary, edition=mlperf_runs.edition(summary.path), ranked=ranked)


def parse(path: Path, data: bytes) -> Summary:
    """A summary.json's bytes (from `path`), checked; SummaryError naming the file and key otherwise."""
    doc = _decode(path, data)
    metric = doc.get("metric")
    if not isinstance(metric, dict):
        raise SummaryError(f"{path}: metric: expected an object of figures (got {_show(metric)})")
    found = phases(path, metric)
    ranks = _count(path, doc, "num_accelerators", 1, MAX_RANKS)
    hosts = _count(path, doc, "num_hosts", 1, ranks)
    size_gib = _real(path, metric, "checkpoint_size_GB", MAX_GIB, where="metric.")
    memory = _reals(path, doc, "host_memory_GB", hosts)
    if sum(memory) <= 0:
        raise SummaryError(f"{path}: host_memory_GB: every entry is 0; no host's memory is known")
    return Summary(
        path=path.absolute(),
        sha256=hashlib.sha256(data).hexdigest(),
        start=_timestamp(path, doc, "start"),
        end=_timestamp(path, doc, "end"),
        hostname=_hostname(path, doc),
        ranks=ranks,
        hosts=hosts,
        checkpoint_bytes=round(size_gib * GIB),
        workload=identify(path, ranks, size_gib),
        host_memory_bytes=host_memory(memory, hosts) * GIB,
        memory_entries=memory,
        potential_caching=_flags(path, doc, "potential_caching", hosts),
        phases=found,
    )


def _read_file(path: Path) -> bytes:
    """A summary.json's bytes, at most MAX_FILE_BYTES (real ones are a few KB); never blocks on a FIFO or a device."""
    return mlperf_runs.read_file(path, MAX_FILE_BYTES, "a DLIO summary.json", follow=True)


def _decode(path: Path, data: bytes) -> dict[str, Any]:
    """The JSON object of a summary: UTF-8, no repeated key, no Infinity (NaN only where DLIO writes it)."""
    try:
        doc = json.loads(data.decode("utf-8"), object_pairs_hook=_unique, parse_constant=_constant)
    except UnicodeDecodeError:
        raise SummaryError(f"{path}: not UTF-8 text; not a summary.json") from None
    except json.JSONDecodeError as exc:
        raise SummaryError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); not a summary.json") from None
    except (ValueError, RecursionError) as exc:
        raise SummaryError(f"{path}: not a summary.json ({str(exc)[:120]})") from None
    if not isinstance(doc, dict):
        raise SummaryError(f"{path}: expected a JSON object (got {_show(doc)}); not a summary.json")
    return doc


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys appear once (a repeated key would hide one of two values)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        twice = next(key for key, n in Counter(key for key, _ in pairs).items() if n > 1)
        raise ValueError(f"key {twice!r} appears more than once")
    return found


def _constant(name: str) -> float:
    """JSON's non-standard constants: NaN (numpy's mean of a phase that did not run), never an infinity."""
    if name == "NaN":
        return math.nan
    raise ValueError(f"{name} is not a figure")


def _show(value: Any) -> str:
    """A value for an error message, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _number(value: Any) -> TypeGuard[int | float]:
    """A JSON number (not a boolean)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _count(path: Path, doc: Mapping[str, Any], key: str, low: int, high: int) -> int:
    """A whole number in [low, high]."""
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise SummaryError(f"{path}: {key}: expected a whole number in {low}..{high} (got {_show(value)})")
    return value


def _real(path: Path, doc: Mapping[str, Any], key: str, high: float, where: str = "", zero: bool = False) -> float:
    """A finite number in (0, high], or [0, high] with `zero` (a standard deviation)."""
    value = doc.get(key)
    if not (_number(value) and math.isfinite(value) and (value >= 0 if zero else value > 0) and value <= high):
        span = f"[0, {high:g}]" if zero else f"(0, {high:g}]"
        raise SummaryError(f"{path}: {where}{key}: expected a finite number in {span} (got {_show(value)})")
    return float(value)


def _reals(path: Path, doc: Mapping[str, Any], key: str, length: int) -> tuple[float, ...]:
    """A list of `length` finite numbers in [0, MAX_GIB] (one per host)."""
    values = doc.get(key)
    if not isinstance(values, list) or len(values) != length:
        raise SummaryError(f"{path}: {key}: expected a list of {length} numbers, one per host (got {_show(values)})")
    for value in values:
        if not (_number(value) and math.isfinite(value) and 0 <= value <= MAX_GIB):
            raise SummaryError(f"{path}: {key}: expected numbers in [0, {MAX_GIB:g}] (got {_show(value)})")
    return tuple(float(v) for v in values)


def _flags(path: Path, doc: Mapping[str, Any], key: str, length: int) -> tuple[int, ...]:
    """A list of `length` 0/1 flags (one per host)."""
    values = doc.get(key)
    if not isinstance(values, list) or len(values) != length or not all(type(v) is int and v in (0, 1) for v in values):
        raise SummaryError(
            f"{path}: {key}: expected a list of {length} flags 0 or 1, one per host (got {_show(values)})"
        )
    return tuple(int(v) for v in values)


def _timestamp(path: Path, doc: Mapping[str, Any], key: str) -> str:
    """An ISO 8601 time as DLIO writes it (the host's local time)."""
    value = doc.get(key)
    try:
        if isinstance(value, str) and len(value) <= 40:
            datetime.fromisoformat(value)
            return value
    except ValueError:
        pass
    raise SummaryError(
        f"{path}: {key}: expected an ISO 8601 time such as 2026-07-08T06:46:18.666818 (got {_show(value)})"
    )


def _hostname(path: Path, doc: Mapping[str, Any]) -> str:
    """Rank 0's host name: letters, digits, dots, dashes and underscores."""
    value = doc.get("hostname")
    if not isinstance(value, str) or not HOSTNAME.fullmatch(value):
        raise SummaryError(f"{path}: hostname: expected a host name (got {_show(value)})")
    return value


def phases(path: Path, metric: Mapping[str, Any]) -> tuple[Phase, ...]:
    """The checkpoint phases a summary's metric has figures for (save, load or both)."""
    found = tuple(p for pattern, prefix in PHASES.items() if (p := _phase(path, metric, pattern, prefix)))
    if found:
        return found
    if any(key in metric for key in TRAINING_KEYS):
        raise SummaryError(f"{path}: metric: a training run's figures (train_*), not a checkpointing run's")
    raise SummaryError(f"{path}: metric: no save_checkpoint_* or load_checkpoint_* figures; not a checkpointing run")


def _phase(path: Path, metric: Mapping[str, Any], pattern: str, prefix: str) -> Phase | None:
    """One phase's figures; None where the summary has none (or only NaN: DLIO's mean of no checkpoint)."""
    keys = [f"{prefix}_io_mean_GB_per_second", f"{prefix}_duration_mean_seconds"]
    stdevs = [f"{prefix}_io_stdev_GB_per_second", f"{prefix}_duration_stdev_seconds"]
    present = [metric[k] for k in keys + stdevs if k in metric]
    if not present or all(isinstance(v, float) and math.isnan(v) for v in present):
        return None
    rate, duration = (_real(path, metric, k, high, "metric.") for k, high in zip(keys, (MAX_RATE_GIB, MAX_SECONDS)))
    rate_sd, duration_sd = (
        _real(path, metric, k, high, "metric.", zero=True) if k in metric else None
        for k, high in zip(stdevs, (MAX_RATE_GIB, MAX_SECONDS))
    )
    return Phase(pattern, rate * GIB, None if rate_sd is None else rate_sd * GIB, duration, duration_sd)


def identify(path: Path, ranks: int, size_gib: float) -> str:
    """The geometry (mlperf-llama3-8b, ...) whose bytes at `ranks` ranks are the summary's checkpoint_size_GB."""
    sizes = geometry_sizes(ranks)
    for name, size in sizes.items():
        if math.isclose(size, size_gib, rel_tol=1e-6):
            return name
    known = ", ".join(f"{name.removeprefix(mlperf.PREFIX)} {size:.1f}" for name, size in sizes.items()) or "none"
    raise SummaryError(
        f"{path}: metric.checkpoint_size_GB: {size_gib:.3f} GiB at {ranks} ranks is none of the MLPerf checkpoint "
        f"geometries (GiB at {ranks} ranks: {known})"
    )


@lru_cache(maxsize=64)
def geometry_sizes(ranks: int) -> dict[str, float]:
    """Each geometry's checkpoint in GiB at `ranks` ranks (those that allow that rank count)."""
    sizes = {}
    for name in mlperf.names():
        try:
            sizes[name] = mlperf.geometry(name, ranks).total_bytes() / GIB
        except ValueError:
            continue
    return sizes


def host_memory(entries: Sequence[float], hosts: int) -> float:
    """One host's memory in GiB: the largest entry where every host has one (the host most able to cache),
    else the entries' sum over the hosts (DLIO filed several hosts under one entry)."""
    return max(entries) if all(v > 0 for v in entries) else sum(entries) / hosts


def rows(summaries: Sequence[Summary], checkpoints: int) -> list[dict[str, Any]]:
    """The results rows of checked summaries: one per phase; repetitions counted per case, host and run."""
    made: list[dict[str, Any]] = []
    seen: Counter[tuple[str, str, str]] = Counter()
    for summary in summaries:
        for phase in summary.phases:
            row = _row(summary, phase, checkpoints, combined=len(summary.phases) > 1)
            key = (row["run_id"], row["case"], row["host"])
            seen[key] += 1
            made.append({**row, "repetition": seen[key]})
    return made


def run_id(summary: Summary) -> str:
    """A run per system: rank 0's host, the host count and their memory to the GiB (a system's write and read
    invocations share it; two systems whose rank 0 has one name, such as `localhost`, seldom do)."""
    system = f"{summary.hostname}/{summary.hosts}/{round(sum(summary.memory_entries))}"
    digest = hashlib.sha256(system.encode()).hexdigest()[:6]
    return f"dlio-{summary.hostname}-{summary.hosts}h-{digest}"


def _row(summary: Summary, phase: Phase, given: int, combined: bool) -> dict[str, Any]:
    """One phase of one summary as a row: the phase's bytes and I/O time over its checkpoints (counted in the
    per-rank stats, else `given`), DLIO's rate as bw_bytes, the ranks' longest duration where they timed it; a
    load's cache check (one invocation: nothing cleared the caches between its phases)."""
    ranked = summary.ranked.get(phase.pattern)
    checkpoints = ranked.checkpoints if ranked else given
    params = (("pattern", phase.pattern), ("workload", summary.workload), ("world_size", summary.ranks))
    case = Case(ENGINE, (*params, ("scale", 1), ("checkpoints", checkpoints)))
    cache = ("warm" if combined else "") if phase.pattern == "load" else ""
    return {
        "run_id": run_id(summary),
        "host": summary.host,
        "case": case.key,
        **case.row(),
        **TRAITS.row(case.row()),
        "status": "ok",
        "bytes": summary.checkpoint_bytes * checkpoints,
        "seconds": phase.checkpoint_seconds * checkpoints,
        "bw_bytes": phase.bw_bytes,
        "bw_stdev_bytes": phase.bw_stdev_bytes,
        "checkpoint_seconds": phase.checkpoint_seconds,
        "checkpoint_seconds_stdev": phase.checkpoint_seconds_stdev,
        "nodes": summary.hosts,
        "host_memory_bytes": summary.host_memory_bytes,
        "max_rank_seconds": ranked.max_rank_seconds if ranked else None,
        "rules_edition": summary.edition or "unknown",  # never empty: empty is a gdsbench run's (the current edition)
        "cache": cache,
        "started_at": summary.start,
        "note": note(summary, phase, checkpoints, cache),
        "command": shlex.join(["gdsbench", "import", str(summary.path)]),
    }


def note(summary: Summary, phase: Phase, checkpoints: int, cache: str) -> str:
    """Where the row came from and what its figures are."""
    shape = mlperf.geometry(summary.workload, summary.ranks)
    memory = "every host's entry" if all(v > 0 for v in summary.memory_entries) else "the entries' sum over the hosts"
    parts = [
        f"imported from DLIO summary.json {summary.path} (sha256 {summary.sha256[:16]}; {summary.start} to "
        f"{summary.end}, the host's clock); an MLPerf result only as MLCommons published it",
        f"MLPerf Storage checkpoint geometry {shape.model.name}: {summary.ranks} ranks on {summary.hosts} host(s), "
        f"{_judged(summary, shape)}, {summary.checkpoint_bytes / GIB:.1f} GiB per checkpoint",
        "DLIO's figures: the mean over the phase's checkpoints of checkpoint_size_GB / duration, timed on rank 0",
        _ranks_note(summary, phase, checkpoints),
        f"memory per host {summary.host_memory_bytes / GIB:.1f} GiB (host_memory_GB: {memory})",
    ]
    if phase.pattern == "load":
        data = summary.checkpoint_bytes * checkpoints / summary.hosts
        parts.append(mlperf.cache_rule(round(data), round(summary.host_memory_bytes), cache))
        parts.append(
            f"DLIO's potential_caching {''.join(map(str, summary.potential_caching))} compares training data, not "
            "checkpoints, with memory"
        )
    return "; ".join(parts)


def _judged(summary: Summary, shape: mlperf.Geometry) -> str:
    """The division under the edition the run's folder names (or, unnamed, the current one, said so)."""
    edition = mlperf.EDITIONS.get(summary.edition or "")
    if edition is not None:
        return f"{shape.judged(edition)} ({edition.rules})"
    if summary.edition:
        return (
            f"{shape.judged()} ({summary.edition}: an edition gdsbench does not know; judged by {mlperf.CURRENT.name})"
        )
    return f"{shape.judged()} (the folder names no edition: judged by {mlperf.CURRENT.name})"


def _ranks_note(summary: Summary, phase: Phase, checkpoints: int) -> str:
    """Where the per-rank figures and the checkpoint count came from."""
    ranked = summary.ranked.get(phase.pattern)
    if ranked is not None:
        return (
            f"per-rank stats of {ranked.ranks} ranks (<rank>_per_epoch_stats.json): {checkpoints} checkpoints, the "
            "longest rank per checkpoint as max_rank_seconds (min_rank_bw_bytes empty: DLIO records no rank's own "
            "bytes)"
        )
    return (
        f"no per-rank stats beside it (max_rank_seconds and min_rank_bw_bytes empty); bytes and seconds for "
        f"{checkpoints} checkpoints (the summary does not record the count: import --checkpoints, the rules' CLOSED "
        f"count {RULES_CHECKPOINTS})"
    )


def columns(made: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The file's columns: the core schema, the declared ones, then the case parameters (as a sweep's)."""
    declared = tuple(column.name for column in COLUMNS)
    extra = [name for name in made[0] if name not in results.COLUMNS and name not in declared]
    return (*results.COLUMNS, *declared, *extra)


def metadata(summaries: Sequence[Summary], checkpoints: int) -> dict[str, Any]:
    """The sidecar: the schema, the declared columns and what was imported from where."""
    return {
        "run_id": ",".join(dict.fromkeys(run_id(s) for s in summaries)),
        "schema_version": results.SCHEMA_VERSION,
        "imported": {
            "tool": "gdsbench import",
            "engine": ENGINE,
            "checkpoints": checkpoints,
            "summaries": [s.record() for s in summaries],
        },
        "columns": records(COLUMNS),
    }


def import_files(paths: Sequence[Path], output: Path, checkpoints: int = RULES_CHECKPOINTS) -> Path:
    """Check every summary, then write one results CSV and its sidecar into `output`; the CSV's path. Nothing is
    written unless every summary reads; an existing file is never replaced."""
    summaries = [read_summary(found) for path in paths for found in mlperf_runs.summaries_under(Path(path))]
    twice = [s.path for i, s in enumerate(summaries) if s.sha256 in {t.sha256 for t in summaries[:i]}]
    if twice:
        raise SummaryError(f"{twice[0]}: the same summary is given twice; each run counts once")
    known = imported_before(output)
    again = next((s for s in summaries if s.sha256 in known), None)
    if again is not None:
        raise SummaryError(
            f"{again.path}: already imported into {known[again.sha256]} (the same summary, byte for byte): each run "
            "counts once; remove that file to import it again"
        )
    made = rows(summaries, checkpoints)
    digest = hashlib.sha256("".join(s.sha256 for s in summaries).encode()).hexdigest()[:8]
    stamp = re.sub(r"[^0-9T]", "", min(s.start for s in summaries))[:15]
    target = output / f"{ENGINE}-{stamp}-{digest}.csv"
    sidecar = results.sidecar_path(target)
    for path in (target, sidecar):
        if os.path.lexists(path):
            raise SummaryError(f"{path}: already exists (these summaries were imported there before?)")
    header = columns(made)
    try:
        results.write_sidecar(target, metadata(summaries, checkpoints))
        try:
            replace_file(target, lambda out: _write_rows(out, header, made))
        except BaseException:
            sidecar.unlink(missing_ok=True)  # the sidecar this call wrote a moment ago
            raise
    except OSError as exc:
        raise SummaryError(f"{output}: cannot write the results there: {exc.strerror}") from None
    return target


def imported_before(output: Path) -> dict[str, str]:
    """The summaries earlier imports wrote into `output`, by their sha256: the results file each went to (read from
    the sidecars beside `<engine>-*.csv`; a sidecar that cannot be read counts for nothing)."""
    found: dict[str, str] = {}
    for csv_path in sorted(output.glob(f"{ENGINE}-*.csv")) if output.is_dir() else []:
        imported = (results.read_sidecar(csv_path).get("imported") or {}) if csv_path.is_file() else {}
        for summary in imported.get("summaries") or [] if isinstance(imported, dict) else []:
            if isinstance(summary, dict) and isinstance(summary.get("sha256"), str):
                found.setdefault(summary["sha256"], str(csv_path))
    return found


def _write_rows(out: Any, header: Sequence[str], made: Sequence[Mapping[str, Any]]) -> None:
    """The CSV text: the header, then each row (empty cells for what a row does not have)."""
    writer = csv.DictWriter(out, fieldnames=list(header), extrasaction="ignore")
    writer.writeheader()
    writer.writerows({name: "" if row.get(name) is None else row[name] for name in header} for row in made)
