"""Compare two results files case by case: new median bandwidth / base median, with a noise-aware verdict.

Cases match on the `case` column (engine and every parameter, in any order, a parameter one file does not
name counting as its default: files written before a parameter existed still match) and, in multi-host
sweeps, on the host: a fio server's label or `all` (a host present in one run only is named). No case in
common is a UsageError (exit 2): a gate that compared nothing must not pass. The machine a sweep ran on
is not part of the match, so a run compares with an older run of the same sweep on another day or
machine; when the two runs' topology fingerprints differ (sidecars), the differing fields are named.
Each case shows the guard-rail flags of both sides (flags.annotate).

The verdict rule, per case (ok rows only; `spread` = (max - min) / median over repetitions):
- `same` when the min-max ranges of BASE and NEW overlap, or when |ratio - 1| is within the combined
  relative spread, (base spread + new spread) / 2: the change is not larger than the noise already seen
  (this catches skewed ranges, e.g. one slow outlier repetition that widens a side's range downwards);
- otherwise `faster` (ratio > 1) or `slower` (ratio < 1).
A case is a regression when it is `slower` and its ratio is below 1 - threshold, or when NEW has only
failed rows for a case BASE measured (`failed`); `compare` exits 1 on any regression. With one
repetition a side the ranges are points, so any difference is faster or slower: use repetitions.

A case whose rows (either side's) carry a guard-rail flag not allowed (`--allow-flags`) is `inconclusive`
instead of same, faster or slower: its own flags say the measurement is not to be trusted (a busy machine, a
spread, the page cache), so it is never a regression nor a pass; the notes name the flags and their remedies.
`compare --strict` fails on an inconclusive case (exit 3); without it a run with no conclusive case exits 3 too
(a gate that judged nothing must not pass).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from gdsbench import flags, results
from gdsbench.errors import UsageError
from gdsbench.hosts import AGGREGATE
from gdsbench.report import tables, textout

DEFAULT_THRESHOLD = 0.10


@dataclass(frozen=True)
class Comparison:
    """Per-case ratios and verdicts, plus the cases only one side has."""

    table: pd.DataFrame
    only_base: tuple[str, ...]
    only_new: tuple[str, ...]
    threshold: float
    warnings: tuple[str, ...] = ()  # hosts in one run only, fingerprint fields that differ

    @property
    def regressions(self) -> pd.DataFrame:
        """The cases that make `compare` fail."""
        return self.table[self.table["regression"]]

    @property
    def inconclusive(self) -> pd.DataFrame:
        """The cases whose flags left them unjudged."""
        return self.table[self.table["verdict"] == flags.INCONCLUSIVE]

    def exit_status(self, strict: bool = False) -> int:
        """1 on a regression; 3 on an inconclusive case with `strict`, or when no case was judged; else 0."""
        if len(self.regressions):
            return 1
        judged = self.table["verdict"].isin(["same", "faster", "slower"]).any()
        return 3 if len(self.inconclusive) and (strict or not judged) else 0


def parse_threshold(text: str) -> float:
    """'10%' or '0.1' -> 0.1; refuse negatives and values of 100% or more."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(f"--threshold: expected a fraction such as 10% or 0.1 (got {text!r})") from None
    if not 0 <= value < 1:
        raise UsageError(f"--threshold: expected a value from 0% to below 100% (got {text!r})")
    return value


def host_keys(frame: pd.DataFrame, servers: set[str]) -> pd.Series:
    """The host part of each row's match: a fio server's label or `all`; '' for the machine a sweep ran on."""
    return frame["host"].astype(str).where(frame["host"].astype(str).isin(servers | {AGGREGATE}), "")


def match_key(case: str, defaults: Mapping[str, str]) -> str:
    """A case's identity for matching: its parameters, less those at their default value or unset (None: as a
    version before the parameter had it), in name order (so a version that names its parameters in another order
    still matches)."""
    parts = [part.split("=", 1) for part in case.split(",")]
    pairs = (p if len(p) == 2 else (p[0], "") for p in parts)
    kept = [f"{k}={v}" for k, v in pairs if defaults.get(k) != v and v != "None"]
    return ",".join(sorted(kept))


def summarise(
    frame: pd.DataFrame, servers: set[str] | None = None, defaults: Mapping[str, str] | None = None
) -> pd.DataFrame:
    """Per (case, host): repetitions, median, min and max bandwidth of ok rows, whether any row failed,
    and the flags of its rows; indexed by the case's match key, `case` the first spelling seen."""
    matched = frame["case"].astype(str).map(lambda c: match_key(c, defaults or {}))
    frame = frame.assign(host_key=host_keys(frame, servers or set()), flags=frame.get("flags"), match=matched)
    keys = ["match", "host_key"]
    ok = frame[frame["status"] == "ok"].groupby(keys, sort=False)["bw_bytes"].agg(["size", "median", "min", "max"])
    statuses = frame.groupby(keys, sort=False)["status"].agg(lambda s: ",".join(sorted(set(s))))
    marks = frame.groupby(keys, sort=False)["flags"].agg(
        lambda cells: flags.text(n for cell in cells for n in flags.parse(cell))
    )
    cases = frame.groupby(keys, sort=False)["case"].first()
    table = ok.rename(columns={"size": "n"}).reindex(statuses.index).join(statuses).join(marks).join(cases)
    table["n"] = table["n"].fillna(0).astype(int)
    return table


def verdict(base: pd.Series, new: pd.Series) -> str:
    """faster / slower / same for one case, from both sides' medians and min-max ranges (see module doc)."""
    if new["n"] == 0:
        return "failed" if "failed" in str(new["status"]) else "skipped"
    if base["n"] == 0:
        return "new"
    if base["min"] <= new["max"] and new["min"] <= base["max"]:
        return "same"
    ratio = new["median"] / base["median"]
    noise = ((base["max"] - base["min"]) / base["median"] + (new["max"] - new["min"]) / new["median"]) / 2
    if abs(ratio - 1) <= noise:
        return "same"
    return "faster" if ratio > 1 else "slower"


def compare(
    base: pd.DataFrame,
    new: pd.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    servers: set[str] | None = None,
    warnings: tuple[str, ...] = (),
    sides: tuple[str, str] = ("BASE", "NEW"),
    allowed: frozenset[str] = frozenset(),
) -> Comparison:
    """Match (case, host) pairs and compute ratio, verdict and regression for each; `servers` are the
    fio server labels of multi-host sweeps (rows of other hosts match whatever machine they ran on).
    UsageError when the two runs (`sides` names them) have no case in common: a gate that compared
    nothing must not pass."""
    from gdsbench.config import case_defaults

    defaults = case_defaults()
    left, right = summarise(base, servers, defaults), summarise(new, servers, defaults)
    common = [key for key in left.index if key in right.index]
    if not common:
        raise UsageError(
            f"compare: no case in common between {sides[0]} ({len(left)} cases) and {sides[1]} ({len(right)}): "
            "nothing was compared; are these runs of the same sweep?"
        )
    rows = []
    for key in common:
        b, n = left.loc[key], right.loc[key]
        ratio = n["median"] / b["median"] if b["n"] and n["n"] else float("nan")
        word = verdict(b, n)
        if b["n"] == 0 and n["n"] == 0:
            word = "skipped"
        if word in ("same", "faster", "slower") and (
            flags.distrusted(b["flags"], allowed) or flags.distrusted(n["flags"], allowed)
        ):
            word = flags.INCONCLUSIVE
        regression = (word == "failed" and b["n"] > 0) or (word == "slower" and ratio < 1 - threshold)
        rows.append(
            {
                "case": n["case"],
                "host": key[1],
                "base_n": b["n"],
                "base_bw": b["median"],
                "new_n": n["n"],
                "new_bw": n["median"],
                "ratio": ratio,
                "verdict": word,
                "regression": bool(regression),
                "base_flags": b["flags"] or "",
                "new_flags": n["flags"] or "",
            }
        )
    table = pd.DataFrame(rows, columns=COLUMNS)
    only_base = tuple(_name((left.loc[k, "case"], k[1])) for k in left.index if k not in right.index)
    only_new = tuple(_name((right.loc[k, "case"], k[1])) for k in right.index if k not in left.index)
    return Comparison(table, only_base, only_new, threshold, (*host_warnings(left, right), *warnings))


COLUMNS = [
    "case",
    "host",
    "base_n",
    "base_bw",
    "new_n",
    "new_bw",
    "ratio",
    "verdict",
    "regression",
    "base_flags",
    "new_flags",
]


def _name(key: tuple[str, str]) -> str:
    """A (case, host) key as text: the case, with `on <host>` for a multi-host row."""
    return f"{key[0]} on {key[1]}" if key[1] else key[0]


def host_warnings(left: pd.DataFrame, right: pd.DataFrame) -> list[str]:
    """Hosts that appear in one run only."""
    base = {h for _, h in left.index if h}
    new = {h for _, h in right.index if h}
    return [f"host {h} only in BASE" for h in sorted(base - new)] + [
        f"host {h} only in NEW" for h in sorted(new - base)
    ]


def compare_files(
    base: Path, new: Path, threshold: float = DEFAULT_THRESHOLD, allowed: frozenset[str] = frozenset()
) -> Comparison:
    """compare() on two results CSVs, flags judged, hosts matched and fingerprints compared by their sidecars."""
    metas = results.read_sidecar(base), results.read_sidecar(new)
    servers = {label for meta in metas for label in (meta.get("settings") or {}).get("hosts") or []}
    frames = [flags.annotate(results.load([path])) for path in (base, new)]
    notes = (*schema_change(*metas), *fingerprint_changes(*metas))
    return compare(frames[0], frames[1], threshold, servers, notes, (f"BASE {base}", f"NEW {new}"), allowed)


def schema_change(base: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """'results schema differs: BASE 1 -> NEW 2 (...)' when the runs' sidecars record different versions."""
    versions = results.schema_version(base), results.schema_version(new)
    if versions[0] == versions[1]:
        return []
    return [
        f"results schema differs: BASE {versions[0]} -> NEW {versions[1]} (a case parameter one file does not "
        "name is matched at its default)"
    ]


#: Fingerprint fields that say how a fact was gathered, not what the host is.
_NOT_COMPARED = ("collected",)


def fingerprint_changes(base: Mapping[str, Any], new: Mapping[str, Any], most: int = 12) -> list[str]:
    """'fingerprint of <host> differs: <field>: <base> -> <new>' for each differing fact of hosts in both
    runs' sidecars (this machine's fingerprints are compared whatever its name)."""
    left, right = _fingerprints(base), _fingerprints(new)
    lines = []
    for host in [h for h in left if h in right]:
        a, b = _flat(left[host]), _flat(right[host])
        for field in sorted(set(a) | set(b)):
            if a.get(field) != b.get(field) and not field.startswith(_NOT_COMPARED):
                lines.append(
                    f"fingerprint of {host or 'this machine'} differs: {field}: {a.get(field)!r} -> {b.get(field)!r}"
                )
    return lines[:most] + ([f"... and {len(lines) - most} more fingerprint differences"] if len(lines) > most else [])


def _fingerprints(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A sidecar's fingerprints by host key: fio server labels as they are, the sweep's machine as ''."""
    hosts = dict((meta.get("fingerprint") or {}).get("hosts") or {})
    machine = (meta.get("machine") or {}).get("host")
    if machine in hosts:
        hosts[""] = hosts.pop(machine)
    return hosts


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested facts as {dotted.path: value}, list items numbered."""
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return {prefix: value}
    flat: dict[str, Any] = {}
    for key, item in items:
        flat.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def render(comparison: Comparison, fmt: str, base: str = "BASE", new: str = "NEW") -> str:
    """The comparison as text (fitted to the terminal), markdown or JSON: a table per family of cases
    (storage I/O, checkpoints), then one-sided cases, warnings and the regression summary."""
    if fmt == "json":
        return to_json(comparison, base, new)
    title = f"NEW {new} vs BASE {base}"
    blocks = [(name or "cases", *case_rows(part)) for name, part in _families(comparison.table)]
    notes = summary_notes(comparison, base, new)
    if fmt == "markdown":
        drawn = [
            line for t, header, rows, _ in blocks for line in (f"#### {t}", "", *textout.md_table(header, rows), "")
        ]
        return "\n".join([f"### {title}", "", *drawn, *(f"- {n}" for n in notes)]) + "\n"
    width = textout.terminal_width()
    drawn = [textout.text_table(t, header, rows, keys, width) for t, header, rows, keys in blocks]
    return "\n\n".join([title, *drawn, "\n".join(notes)]) + "\n"  # prose lines: the terminal wraps them


def _families(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The compared cases split into storage I/O and checkpoints (unnamed when only one kind is there)."""
    patterns = table["case"].map(lambda case: tables.parse_case(case).get("pattern", ""))
    parts = tables.families(table.assign(pattern=patterns))
    return [("" if len(parts) == 1 else name, part) for name, part in parts] or [("", table)]


def case_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]], int]:
    """Header, cells and the number of identity columns of a comparison table: the parameters that differ
    between its cases (blank where one does not apply), the host in a multi-host sweep, both medians,
    the ratio, the verdict, the repetitions and the flags (columns empty everywhere left out)."""
    names, cells = tables.case_labels(list(table["case"]))
    hosts = bool(table["host"].astype(bool).any())
    header = [*names, *(["host"] * hosts), "base bw", "new bw", "new/base", "verdict", "n base/new", "flags"]
    rows = [
        [
            *cell,
            *([r.host] * hosts),
            tables.bw_text(r.base_bw),
            tables.bw_text(r.new_bw),
            tables.number(r.ratio, 2),
            r.verdict + (" REGRESSION" if r.regression else ""),
            f"{r.base_n}/{r.new_n}",
            _flag_change(r.base_flags, r.new_flags),
        ]
        for cell, r in zip(cells, table.itertuples())
    ]
    keys = len(names) + hosts
    header, rows = tables.drop_empty(header, rows, keys)
    return header, rows, keys


def summary_notes(comparison: Comparison, base: str, new: str) -> list[str]:
    """One-sided cases, how many each side left out, warnings, and the count of regressions."""
    notes = [*_one_sided(base, comparison.only_base), *_one_sided(new, comparison.only_new)]
    if comparison.only_base or comparison.only_new:
        notes.append(
            f"left out: {len(comparison.only_base)} case(s) of BASE and {len(comparison.only_new)} of NEW have no "
            "match on the other side"
        )
    notes += [f"warning: {line.replace('BASE', base).replace('NEW', new)}" for line in comparison.warnings]
    notes += inconclusive_notes(comparison)
    count = len(comparison.regressions)
    notes.append(
        f"{count} regression{'s' if count != 1 else ''} beyond {comparison.threshold:.0%} "
        f"({len(comparison.table)} cases compared; verdict 'same' = ranges overlap or change within combined spread)"
    )
    return notes


def inconclusive_notes(comparison: Comparison) -> list[str]:
    """How many cases were left unjudged, on which flags, and what to do about each flag."""
    unjudged = comparison.inconclusive
    if unjudged.empty:
        return []
    raised = flags.text(
        n for cells in unjudged[["base_flags", "new_flags"]].values for c in cells for n in flags.parse(c)
    )
    return [
        f"inconclusive: {len(unjudged)} case(s), their rows flagged {raised}: their own measurement says it is not to "
        "be trusted (no regression or pass is called on them; --strict fails on them, --allow-flags judges them anyway)",
        *(f"inconclusive because {line}" for line in flags.remedies(raised.split(","))),
    ]


def to_json(comparison: Comparison, base: str, new: str) -> str:
    """The comparison for machines: both files, the threshold, every matched case in base units (its
    parameters parsed), the one-sided cases, the warnings and the number of regressions."""
    cases = json.loads(comparison.table.to_json(orient="records"))
    for case in cases:
        case["parameters"] = tables.parse_case(case["case"])
    document = {
        "schema": "gdsbench.compare/1",
        "base": base,
        "new": new,
        "threshold": comparison.threshold,
        "regressions": len(comparison.regressions),
        "inconclusive": len(comparison.inconclusive),
        "cases": cases,
        "only_base": list(comparison.only_base),
        "only_new": list(comparison.only_new),
        "warnings": list(comparison.warnings),
    }
    return json.dumps(document, indent=2) + "\n"


def _one_sided(side: str, cases: tuple[str, ...], most: int = 5) -> list[str]:
    """'only in <side>: <case>' for the first `most` cases one side has alone, then how many more."""
    lines = [f"only in {side}: {tables.case_text(case)}" for case in cases[:most]]
    return lines + ([f"... and {len(cases) - most} more only in {side}"] if len(cases) > most else [])


def _flag_change(base: str, new: str) -> str:
    """The flags of a case: the new run's, with the base's when they differ."""
    return new if base == new else f"{base or '-'} -> {new or '-'}"
