"""Hardware qualification: thresholds written under a config's `checks:`, judged against sweep results.

Each check selects rows with `where:` (parameter values, e.g. {pattern: read, io_size: 16M}) and is one of:
- absolute, per case (median over repetitions): `min_bw: 20GiB/s`, `max_bw`, `min_iops: 100000`,
  `max_blocking: 500ms` (checkpoint saves: what the caller waited), `min_compression_ratio: 1.2`,
  `max_lat_mean: 500us`, `max_lat_p99: 2ms`; for `pattern: train` rows `max_stall: 500ms` (median wall time
  a checkpoint stopped the loop) and `min_goodput: 0.95` (the goodput model evaluated at the check's `mtbf: 24h`,
  else at the mtbf a row recorded, else a day: report.goodput); for checkpoints saved or loaded by ranks, the MLPerf
  Storage rules' metrics `min_rank_bw: 2GiB/s` (the slowest rank's throughput) and `max_rank_time: 30s` (the
  longest rank's duration per checkpoint); `min_<column>` and `max_<column>` of any numeric column an engine
  declares (Runner.columns, e.g. the s3 engine's `max_requests: 100000`), parsed by the column's unit;
- relative between rows of the same case parameters: `ratio: {of: {transfer: GDS}, to: {transfer: CPU_GPU},
  min: 1.5}` (and/or `max:`), pairing rows that agree on every parameter `of`/`to` do not name;
- relative to a stored baseline of the same host: `baseline: path.csv, min_ratio: 0.9` (relative paths are
  from the config file's folder; a baseline from another host fails the check, naming both hosts).

In a multi-host sweep a check judges every host's rows and the aggregate's unless it names `host:` (a
server's label, or `all` for the aggregate); `per_host: true` makes it one check per host (one JUnit
case each), the aggregate left out. A check whose rows a guard rail flagged (gdsbench.flags: their measurement is
not to be trusted) is `inconclusive`, whichever way its threshold went, naming the flags, the rows, the measured
value and the remedy, unless the config allows the flag: `allow_flags: [page_cache]` at the top level or in the
check. `qualify --strict` fails the gate on an inconclusive check (JUnit failure type Inconclusive; else a
skipped test case); a run in which nothing passed and something was inconclusive exits 3 either way.

A check whose rows all failed or that matched no rows fails; one whose rows were all skipped is skipped
(with the runner's reason); skipped rows beside ok ones are ignored. Checks are validated when the config
is read: a bad entry raises ConfigError naming `checks[i].key`.
"""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gdsbench import config, flags, results
from gdsbench.cases import plain
from gdsbench.errors import ConfigError
from gdsbench.keys import duration
from gdsbench.report import goodput, tables
from gdsbench.report.junit import FAIL, INCONCLUSIVE, PASS, SKIP, Outcome
from gdsbench.units import latency_text, parse_duration, parse_size

RUN_COLUMNS = ("host", "run_id")


def parse_bandwidth(text: Any) -> float:
    """'20GiB/s', '200MiB/s', '1.5GB/s' -> bytes per second."""
    raw = str(text).strip()
    if not raw.endswith("/s"):
        raise ValueError(f"not a bandwidth: {text!r}")
    return float(parse_size(raw[:-2]))


def parse_latency_us(text: Any) -> float:
    """'2ms', '500us', '0.5s' -> microseconds (a bare number is seconds, as in parse_duration)."""
    return parse_duration(text) * 1e6


def parse_fraction(text: Any) -> float:
    """A fraction above 0 and at most 1, such as 0.95."""
    value = parse_number(text)
    if value > 1:
        raise ValueError(f"not a fraction of at most 1: {text!r}")
    return value


def parse_number(text: Any) -> float:
    """A positive number such as 1.5 or 100000."""
    if isinstance(text, bool) or not isinstance(text, (int, float)) or text <= 0:
        raise ValueError(f"not a positive number: {text!r}")
    return float(text)


@dataclass(frozen=True)
class Limit:
    """An absolute threshold kind: the column it reads, the comparison, how to parse and print values."""

    column: str
    compare: Callable[[float, float], bool]
    symbol: str
    parse: Callable[[Any], float]
    text: Callable[[float], str]
    expected: str


#: How a limit on a declared column is parsed, printed and described, by the column's unit (others: a number).
UNIT_LIMITS: dict[str, tuple[Callable[[Any], float], Callable[[float], str], str]] = {
    "bytes/s": (parse_bandwidth, tables.bw_text, "a bandwidth such as 2GiB/s"),
    "s": (parse_duration, lambda v: f"{v:.3f}s", "a duration such as 30s"),
    "us": (parse_latency_us, latency_text, "a duration such as 2ms"),
    "count": (parse_number, lambda v: f"{v:.0f}", "a positive number"),
}


def declared_limits() -> dict[str, Limit]:
    """`min_<column>` and `max_<column>` for every numeric column an engine declares (config.declared_columns)."""
    limits = {}
    for column in config.declared_columns().values():
        if column.kind != results.NUMBER:
            continue
        parse, text, expected = UNIT_LIMITS.get(column.unit, (parse_number, lambda v: f"{v:g}", "a positive number"))
        limits[f"min_{column.name}"] = Limit(column.name, operator.ge, ">=", parse, text, expected)
        limits[f"max_{column.name}"] = Limit(column.name, operator.le, "<=", parse, text, expected)
    return limits


LIMITS: dict[str, Limit] = {
    **declared_limits(),
    "min_bw": Limit("bw_bytes", operator.ge, ">=", parse_bandwidth, tables.bw_text, "a bandwidth such as 20GiB/s"),
    "max_bw": Limit("bw_bytes", operator.le, "<=", parse_bandwidth, tables.bw_text, "a bandwidth such as 20GiB/s"),
    "min_iops": Limit("iops", operator.ge, ">=", parse_number, lambda v: f"{v:.0f} IOPS", "a positive number"),
    "max_lat_mean": Limit("lat_mean_us", operator.le, "<=", parse_latency_us, latency_text, "a duration such as 500us"),
    "max_lat_p99": Limit("lat_p99_us", operator.le, "<=", parse_latency_us, latency_text, "a duration such as 2ms"),
    "max_blocking": Limit(
        "blocking_seconds", operator.le, "<=", parse_duration, lambda v: f"{v:.3f}s", "a duration such as 500ms"
    ),
    "min_compression_ratio": Limit(
        "compression_ratio", operator.ge, ">=", parse_number, lambda v: f"{v:.2f}x", "a ratio such as 1.2"
    ),
    "max_stall": Limit(
        "stall_seconds", operator.le, "<=", parse_duration, lambda v: f"{v:.3f}s", "a duration such as 500ms"
    ),
    "min_goodput": Limit("goodput", operator.ge, ">=", parse_fraction, lambda v: f"{v:.4f}", "a fraction such as 0.95"),
    "min_rank_bw": Limit(
        "min_rank_bw_bytes", operator.ge, ">=", parse_bandwidth, tables.bw_text, "a bandwidth such as 2GiB/s"
    ),
    "max_rank_time": Limit(
        "max_rank_seconds", operator.le, "<=", parse_duration, lambda v: f"{v:.3f}s", "a duration such as 30s"
    ),
}
KINDS = (*LIMITS, "ratio", "baseline")
CHECK_KEYS = ("name", "where", *KINDS, "min_ratio", "mtbf", "host", "per_host", "allow_flags")
AGGREGATE = "all"


@dataclass(frozen=True)
class Check:
    """One validated check: which rows, what kind, and its threshold(s)."""

    name: str
    where: tuple[tuple[str, Any], ...]
    kind: str
    limit: float | None = None
    of: tuple[tuple[str, Any], ...] = ()
    to: tuple[tuple[str, Any], ...] = ()
    bounds: tuple[float | None, float | None] = (None, None)
    baseline: Path | None = field(default=None)
    host: str | None = None  # only this host's rows (a server's label, or `all`: the aggregate)
    per_host: bool = False  # one outcome per host (the aggregate left out)
    allow: frozenset[str] = frozenset()  # guard-rail flags that do not fail this check
    mtbf: float | None = None  # min_goodput: the mean time between failures the goodput model is evaluated at


def checks_of(loaded: config.SweepConfig) -> tuple[Check, ...]:
    """A loaded config's checks, with its top-level `allow_flags`, as `qualify` judges them."""
    return parse_checks(loaded.source, list(loaded.checks), loaded.raw.get("allow_flags"))


def parse_checks(source: str, entries: Any, allow_flags: Any = None) -> tuple[Check, ...]:
    """Validate a config's `checks:` list (and its top-level `allow_flags`); every problem is a
    ConfigError naming checks[i].key."""
    if not isinstance(entries, (list, tuple)) or not entries:
        raise ConfigError(source, "checks", "a non-empty list of checks (each with where: and a threshold)")
    allowed = parse_flags(source, "allow_flags", allow_flags) if allow_flags is not None else frozenset()
    checks = (parse_check(source, f"checks[{index}]", entry) for index, entry in enumerate(entries))
    return tuple(dataclasses.replace(check, allow=check.allow | allowed) for check in checks)


def parse_flags(source: str, key: str, value: Any) -> frozenset[str]:
    """A list of guard-rail flag names (gdsbench.flags.RULES)."""
    expected = "a list of flag names: " + ", ".join(flags.RULES)
    if not isinstance(value, list) or not all(isinstance(v, str) and v in flags.RULES for v in value):
        raise ConfigError(source, key, expected, value)
    return frozenset(value)


def _scope(source: str, where_key: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A check's host, per_host and allow_flags keys, validated."""
    host = entry.get("host")
    if host is not None and (not isinstance(host, str) or not host.strip()):
        raise ConfigError(source, f"{where_key}.host", "a host label, or all for the aggregate", host)
    per_host = entry.get("per_host", False)
    if not isinstance(per_host, bool) or (per_host and host is not None):
        raise ConfigError(source, f"{where_key}.per_host", "true or false (and no host: beside true)", per_host)
    allow = entry.get("allow_flags")
    allowed = parse_flags(source, f"{where_key}.allow_flags", allow) if allow is not None else frozenset()
    return {"host": host, "per_host": per_host, "allow": allowed}


def parse_check(source: str, where_key: str, entry: Any) -> Check:
    """One `checks:` entry -> Check."""
    check = _parse_kind(source, where_key, entry)
    return dataclasses.replace(check, **_scope(source, where_key, entry))


def _parse_kind(source: str, where_key: str, entry: Any) -> Check:
    """A `checks:` entry's selection and threshold."""
    if not isinstance(entry, Mapping):
        raise ConfigError(source, where_key, "a mapping with where: and one of " + ", ".join(KINDS), entry)
    for key in entry:
        if key not in CHECK_KEYS:
            raise ConfigError(source, f"{where_key}.{key}", "a check key: " + ", ".join(CHECK_KEYS))
    kinds = [k for k in KINDS if k in entry]
    if len(kinds) != 1:
        raise ConfigError(source, where_key, "exactly one of " + ", ".join(KINDS), kinds or None)
    kind = kinds[0]
    where = parse_where(source, f"{where_key}.where", entry.get("where", {}))
    name = entry.get("name") or f"{kind} {entry[kind]} where " + where_text(where)
    if not isinstance(name, str):
        raise ConfigError(source, f"{where_key}.name", "a string", name)
    if "min_ratio" in entry and kind != "baseline":
        raise ConfigError(source, f"{where_key}.min_ratio", "min_ratio only with baseline:")
    if "mtbf" in entry and kind != "min_goodput":
        raise ConfigError(source, f"{where_key}.mtbf", "mtbf only with min_goodput:")
    if kind in LIMITS:
        limit = _value(source, f"{where_key}.{kind}", LIMITS[kind].parse, LIMITS[kind].expected, entry[kind])
        mtbf = entry.get("mtbf")
        at = _value(source, f"{where_key}.mtbf", duration, "a duration such as 24h", mtbf) if mtbf is not None else None
        return Check(name, where, kind, limit=limit, mtbf=at)
    if kind == "ratio":
        return _ratio_check(source, f"{where_key}.ratio", name, where, entry["ratio"])
    return _baseline_check(source, where_key, name, where, entry)


def _value(source: str, key: str, parse: Callable[[Any], Any], expected: str, value: Any) -> Any:
    """Parse one value, turning ValueError into a ConfigError at `key`."""
    try:
        return parse(value)
    except (ValueError, TypeError):
        raise ConfigError(source, key, expected, value) from None


def parse_where(source: str, key: str, block: Any) -> tuple[tuple[str, Any], ...]:
    """A `where:`-style mapping of parameter column -> value, each value parsed by the key the sweep's
    matrix parses it with (so `checkpoint_size: 4G` is 4294967296, as the results column holds it)."""
    if not isinstance(block, Mapping):
        raise ConfigError(source, key, "a mapping of parameter: value, e.g. {pattern: read, io_size: 16M}", block)
    keys = config.axis_keys()
    pairs = []
    for name, value in block.items():
        if name not in keys:
            raise ConfigError(source, f"{key}.{name}", config.unknown(name, keys, "a parameter column"))
        if value is None:
            raise ConfigError(source, f"{key}.{name}", keys[name].expected)
        pairs.append((name, _value(source, f"{key}.{name}", keys[name].parse, keys[name].expected, value)))
    return tuple(pairs)


def _ratio_check(source: str, key: str, name: str, where: tuple, block: Any) -> Check:
    """ratio: {of: {...}, to: {...}, min: x, max: y}."""
    if not isinstance(block, Mapping) or "of" not in block or "to" not in block:
        raise ConfigError(source, key, "a mapping {of: {...}, to: {...}, min: 1.5}", block)
    unknown = [k for k in block if k not in ("of", "to", "min", "max")]
    if unknown:
        raise ConfigError(source, f"{key}.{unknown[0]}", "one of of, to, min, max")
    bounds = tuple(
        _value(source, f"{key}.{b}", parse_number, "a positive number", block[b]) if b in block else None
        for b in ("min", "max")
    )
    if bounds == (None, None):
        raise ConfigError(source, key, "min: and/or max: (the allowed of/to ratio)")
    of, to = parse_where(source, f"{key}.of", block["of"]), parse_where(source, f"{key}.to", block["to"])
    if not of or not to:
        raise ConfigError(source, key, "non-empty of: and to: selections")
    return Check(name, where, "ratio", of=of, to=to, bounds=(bounds[0], bounds[1]))


def _baseline_check(source: str, key: str, name: str, where: tuple, entry: Mapping[str, Any]) -> Check:
    """baseline: path.csv with min_ratio: x; relative paths are from the config file's folder."""
    raw = entry["baseline"]
    if not isinstance(raw, str) or not raw:
        raise ConfigError(source, f"{key}.baseline", "a path to a results CSV", raw)
    path = Path(raw) if Path(raw).is_absolute() else Path(source).parent / raw
    if not path.is_file():
        raise ConfigError(
            source, f"{key}.baseline", "an existing results CSV (relative to the config's folder)", str(path)
        )
    if "min_ratio" not in entry:
        raise ConfigError(source, f"{key}.min_ratio", "a ratio such as 0.9 (new / baseline median bandwidth)")
    ratio = _value(source, f"{key}.min_ratio", parse_number, "a positive number such as 0.9", entry["min_ratio"])
    return Check(name, where, "baseline", bounds=(ratio, None), baseline=path)


def where_text(where: tuple[tuple[str, Any], ...]) -> str:
    """{pattern: read, io_size: 16M} as 'pattern=read io_size=16M'."""
    return " ".join(f"{k}={tables.cell(k, plain(v))}" for k, v in where) or "(all rows)"


def select(frame: pd.DataFrame, where: tuple[tuple[str, Any], ...]) -> pd.DataFrame:
    """The rows whose parameter columns equal every where value (numbers numerically, others as text)."""
    mask = pd.Series(True, index=frame.index)
    for name, value in where:
        if name not in frame.columns:
            return frame.iloc[0:0]
        value = plain(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            mask &= pd.to_numeric(frame[name], errors="coerce") == value
        else:
            mask &= frame[name].astype(str) == str(value)
    return frame[mask]


def evaluate(check: Check, frame: pd.DataFrame) -> Outcome:
    """Judge one check against the results (flags judged by flags.annotate, as the CLI loads them)."""
    rows = select(frame, check.where)
    if check.host is not None:
        rows = rows[rows["host"].astype(str) == check.host]
    if rows.empty:
        scope = f" on host {check.host}" if check.host is not None else ""
        return Outcome(
            check.name,
            FAIL,
            f"no rows match {where_text(check.where)}{scope}; check where: against the sweep",
            failure="NoMatchingRows",
        )
    ok, failed = rows[rows["status"] == "ok"], rows[rows["status"] == "failed"]
    seconds = float(ok["seconds"].fillna(0).sum()) if "seconds" in ok else 0.0
    if not failed.empty:
        first = failed.iloc[0]
        return Outcome(
            check.name,
            FAIL,
            f"{failed['case'].nunique()} case(s) failed: {first['error']}",
            details=tables.case_text(first["case"]),
            seconds=seconds,
            failure="CaseFailed",
        )
    if ok.empty:
        reason = str(rows.iloc[0]["error"]).removeprefix("skipped: ")
        return Outcome(check.name, SKIP, f"all {rows['case'].nunique()} matching case(s) skipped: {reason}")
    return _judged(check, ok, seconds)


def _judged(check: Check, ok: pd.DataFrame, seconds: float) -> Outcome:
    """The threshold's verdict on the ok rows, unless a row carries a flag the check does not allow: then the
    check is inconclusive, whichever way the threshold went (the measurement is not to be trusted)."""
    status, message, details = JUDGES[check.kind](check, ok)
    names = _unallowed(check, ok)
    hit = ok[names.map(bool)]
    if hit.empty:
        return Outcome(check.name, status, message, details, seconds, "ThresholdNotMet")
    raised = flags.text(n for found in names for n in found)
    listing = "\n".join(
        f"{tables.case_text(r['case'])} host={r.get('host')} rep={r['repetition']}: {r['flags']}"
        for _, r in hit.iterrows()
    )
    details = f"{listing}\n{details}".strip()
    said = _inconclusive(check, hit, raised, message, status)
    return Outcome(check.name, INCONCLUSIVE, said, details, seconds, "Inconclusive")


def _unallowed(check: Check, ok: pd.DataFrame) -> pd.Series:
    """Each row's guard-rail flags that the check does not allow (an empty list for a clean row)."""
    cells = ok["flags"] if "flags" in ok else pd.Series("", index=ok.index)
    return cells.map(lambda cell: flags.distrusted(cell, check.allow))


def _inconclusive(check: Check, hit: pd.DataFrame, raised: str, measured: str, status: str) -> str:
    """An inconclusive check's message: what was measured and which way it went, which flag on which row, the
    remedy, and the exact line that judges such rows anyway."""
    first = hit.iloc[0]
    accept = f"allow_flags: [{', '.join(sorted({*check.allow, *raised.split(',')}))}]"
    went = "would pass" if status == PASS else "would fail"
    return (
        f"inconclusive: flagged {raised} on {len(hit)} row(s), first {tables.case_text(first['case'])} "
        f"rep {first['repetition']} (measured: {measured}; {went}): the rows' own flags say the measurement is not to "
        f"be trusted; {'; '.join(flags.remedies(raised.split(',')))}; if the flag is expected here, add `{accept}` "
        "to this check"
    )


def _limit(check: Check, ok: pd.DataFrame) -> tuple[str, str, str]:
    """An absolute threshold on each case's median."""
    limit = LIMITS[check.kind]
    threshold = check.limit
    ok = _modelled(check, ok)
    assert threshold is not None  # parse_check sets it for every absolute kind
    medians = ok.groupby([*RUN_COLUMNS, "case"])[limit.column].median().dropna() if limit.column in ok else ok[[]]
    if medians.empty:
        return FAIL, f"no {limit.column} values in the matching rows", ""
    bad = medians[~medians.map(lambda v: limit.compare(v, threshold))]
    worst = medians.min() if limit.symbol == ">=" else medians.max()
    need = f"{limit.symbol} {limit.text(threshold)}"
    details = "\n".join(f"{tables.case_text(case)}: {limit.text(v)}" for (_, _, case), v in medians.items())
    if len(bad):
        return FAIL, f"{len(bad)} of {len(medians)} case(s) miss {need}: worst {limit.text(worst)}", details
    return PASS, f"{len(medians)} case(s), worst {limit.text(worst)} {need}", details


def _modelled(check: Check, ok: pd.DataFrame) -> pd.DataFrame:
    """The rows with the goodput model's figures where the check reads one, at its mtbf (report.goodput.at_mtbf)."""
    measured = {"checkpoint_cost_seconds", "restore_seconds"} <= set(ok.columns)
    if LIMITS[check.kind].column not in goodput.MODELLED or not measured:
        return ok
    return goodput.at_mtbf(ok, (check.mtbf,) if check.mtbf else ())


def _ratio(check: Check, ok: pd.DataFrame) -> tuple[str, str, str]:
    """of/to median bandwidth ratio, pairing rows that agree on the other parameters."""
    named = {name for name, _ in (*check.of, *check.to)}
    keys = [*RUN_COLUMNS, *(c for c in results.parameters(ok.columns, results.figures_of(ok)) if c not in named)]
    top = select(ok, check.of).groupby(keys, dropna=False)["bw_bytes"].median()
    bottom = select(ok, check.to).groupby(keys, dropna=False)["bw_bytes"].median()
    ratios = (top / bottom).dropna()
    if ratios.empty:
        return (
            FAIL,
            (f"no pairs of rows with {where_text(check.of)} and {where_text(check.to)} at the same parameters"),
            "",
        )
    return _bounded(check, ratios, f"{where_text(check.of)} / {where_text(check.to)}")


def _bounded(check: Check, ratios: pd.Series, what: str) -> tuple[str, str, str]:
    """Pass when every ratio is within the check's (min, max)."""
    low, high = check.bounds
    bad = ratios[((ratios < low) if low is not None else False) | ((ratios > high) if high is not None else False)]
    need = " and ".join(t for t in (low is not None and f">= {low:g}", high is not None and f"<= {high:g}") if t)
    span = f"{ratios.min():.2f}x-{ratios.max():.2f}x"
    details = "\n".join(f"{_label(key)}: {value:.3f}x" for key, value in ratios.items())
    if len(bad):
        return FAIL, f"{what}: {len(bad)} of {len(ratios)} ratio(s) outside {need} ({span})", details
    return PASS, f"{what}: {len(ratios)} ratio(s) {span}, all {need}", details


def _label(key: Any) -> str:
    """A group key (tuple or case string) as text for details."""
    return " ".join(map(str, key)) if isinstance(key, tuple) else tables.case_text(str(key))


def _baseline(check: Check, ok: pd.DataFrame) -> tuple[str, str, str]:
    """Each case's median against the same case's median in a baseline of the same host."""
    assert check.baseline is not None  # parse_check sets it for every baseline check
    base = results.load([check.baseline])
    base_hosts, hosts = set(base["host"].astype(str)), set(ok["host"].astype(str))
    if base_hosts != hosts:
        return (
            FAIL,
            (
                f"baseline {check.baseline} is from host {', '.join(sorted(base_hosts))} but these results are "
                f"from {', '.join(sorted(hosts))}; record a baseline on this host"
            ),
            "",
        )
    base_ok = select(base[base["status"] == "ok"], check.where)
    ratios = (ok.groupby("case")["bw_bytes"].median() / base_ok.groupby("case")["bw_bytes"].median()).dropna()
    if ratios.empty:
        return FAIL, f"baseline {check.baseline} has no ok rows for the cases {where_text(check.where)} selects", ""
    return _bounded(check, ratios, f"new / baseline {check.baseline.name}")


JUDGES: dict[str, Callable[[Check, pd.DataFrame], tuple[str, str, str]]] = {
    **dict.fromkeys(LIMITS, _limit),
    "ratio": _ratio,
    "baseline": _baseline,
}


def evaluate_all(checks: tuple[Check, ...], frame: pd.DataFrame) -> list[Outcome]:
    """Every check's outcome, in config order; a per_host check gives one outcome per host."""
    return [evaluate(one, frame) for check in checks for one in per_host(check, frame)]


def per_host(check: Check, frame: pd.DataFrame) -> list[Check]:
    """The check itself, or (per_host: true) one check per host of the results, named `<name> [<host>]`."""
    if not check.per_host:
        return [check]
    hosts = [h for h in dict.fromkeys(select(frame, check.where)["host"].astype(str)) if h != AGGREGATE]
    return [dataclasses.replace(check, name=f"{check.name} [{host}]", host=host, per_host=False) for host in hosts]


def to_json(outcomes: list[Outcome], suite: str, properties: dict[str, str]) -> str:
    """The outcomes for machines: the suite, what was judged, each check (status, message, failure type
    when it failed, details) and the totals."""
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASS, FAIL, INCONCLUSIVE, SKIP)}
    checks = [{**dataclasses.asdict(o), "failure": o.failure if o.status == FAIL else None} for o in outcomes]
    document = {"schema": "gdsbench.qualify/1", "suite": suite, **properties, "counts": counts, "checks": checks}
    return json.dumps(document, indent=2) + "\n"


def summary_lines(outcomes: list[Outcome]) -> list[str]:
    """'PASS name: message' per check, then the totals."""
    lines = [f"{o.status.upper():4} {o.name}: {o.message}" for o in outcomes]
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASS, FAIL, INCONCLUSIVE, SKIP)}
    lines.append(
        f"{len(outcomes)} checks: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[INCONCLUSIVE]} inconclusive, "
        f"{counts[SKIP]} skipped"
    )
    return lines
