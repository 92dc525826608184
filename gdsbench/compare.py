"""Compare two results files case by case: new median bandwidth / base median, with a noise-aware verdict.

Cases match on the `case` column (engine and every parameter); host and run_id are not part of the
match, so a run compares with an older run of the same sweep on another day or machine.

The verdict rule, per case (ok rows only; `spread` = (max - min) / median over repetitions):
- `same` when the min-max ranges of BASE and NEW overlap, or when |ratio - 1| is within the combined
  relative spread, (base spread + new spread) / 2: the change is not larger than the noise already seen
  (this catches skewed ranges, e.g. one slow outlier repetition that widens a side's range downwards);
- otherwise `faster` (ratio > 1) or `slower` (ratio < 1).
A case is a regression when it is `slower` and its ratio is below 1 - threshold, or when NEW has only
failed rows for a case BASE measured (`failed`); `compare` exits 1 on any regression. With one
repetition a side the ranges are points, so any difference is faster or slower: use repetitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from gdsbench import results
from gdsbench.errors import UsageError
from gdsbench.report import tables

DEFAULT_THRESHOLD = 0.10


@dataclass(frozen=True)
class Comparison:
    """Per-case ratios and verdicts, plus the cases only one side has."""

    table: pd.DataFrame
    only_base: tuple[str, ...]
    only_new: tuple[str, ...]
    threshold: float

    @property
    def regressions(self) -> pd.DataFrame:
        """The cases that make `compare` fail."""
        return self.table[self.table["regression"]]


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


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per case: repetitions, median, min and max bandwidth of ok rows, and whether any row failed."""
    ok = frame[frame["status"] == "ok"].groupby("case", sort=False)["bw_bytes"].agg(["size", "median", "min", "max"])
    statuses = frame.groupby("case", sort=False)["status"].agg(lambda s: ",".join(sorted(set(s))))
    table = ok.rename(columns={"size": "n"}).reindex(statuses.index).join(statuses)  # file order
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


def compare(base: pd.DataFrame, new: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Match cases by their `case` key and compute ratio, verdict and regression for each."""
    left, right = summarise(base), summarise(new)
    common = [case for case in left.index if case in right.index]
    rows = []
    for case in common:
        b, n = left.loc[case], right.loc[case]
        ratio = n["median"] / b["median"] if b["n"] and n["n"] else float("nan")
        word = verdict(b, n)
        if b["n"] == 0 and n["n"] == 0:
            word = "skipped"
        regression = (word == "failed" and b["n"] > 0) or (word == "slower" and ratio < 1 - threshold)
        rows.append(
            {
                "case": case,
                "base_n": b["n"],
                "base_bw": b["median"],
                "new_n": n["n"],
                "new_bw": n["median"],
                "ratio": ratio,
                "verdict": word,
                "regression": bool(regression),
            }
        )
    table = pd.DataFrame(
        rows, columns=["case", "base_n", "base_bw", "new_n", "new_bw", "ratio", "verdict", "regression"]
    )
    only_base = tuple(c for c in left.index if c not in right.index)
    only_new = tuple(c for c in right.index if c not in left.index)
    return Comparison(table, only_base, only_new, threshold)


def compare_files(base: Path, new: Path, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """compare() on two results CSVs."""
    return compare(results.load([base]), results.load([new]), threshold)


def labels(cases: list[str]) -> tuple[list[str], list[list[str]]]:
    """The parameters that differ between cases, as columns and cells (4K/16M sizes), instead of long keys."""
    parsed = [dict(part.split("=", 1) for part in case.split(",") if "=" in part) for case in cases]
    names = list(dict.fromkeys(name for params in parsed for name in params))
    varying = [n for n in names if len({p.get(n) for p in parsed}) > 1] or ["engine"]
    return varying, [
        [tables.cell(n, _number(p.get(n))) if n in tables.SIZE_COLUMNS else p.get(n, "-") for n in varying]
        for p in parsed
    ]


def _number(text: str | None) -> float | None:
    """A parsed number for size cells, None when missing or not numeric."""
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def render(comparison: Comparison, fmt: str, base: str = "BASE", new: str = "NEW") -> str:
    """The comparison as a text or markdown table, then one-sided cases and the regression summary."""
    table = comparison.table
    names, cells = labels(list(table["case"]))
    header = [*names, "base bw", "new bw", "new/base", "verdict"]
    rows = [
        [
            *cell,
            f"{tables.bw_text(r.base_bw)} n={r.base_n}",
            f"{tables.bw_text(r.new_bw)} n={r.new_n}",
            tables.number(r.ratio, 2),
            r.verdict + (" REGRESSION" if r.regression else ""),
        ]
        for cell, r in zip(cells, table.itertuples())
    ]
    notes = [f"only in {base}: {case}" for case in comparison.only_base]
    notes += [f"only in {new}: {case}" for case in comparison.only_new]
    count = len(comparison.regressions)
    notes.append(
        f"{count} regression{'s' if count != 1 else ''} beyond {comparison.threshold:.0%} "
        f"({len(table)} cases compared; verdict 'same' = ranges overlap or change within combined spread)"
    )
    if fmt == "markdown":
        return (
            "\n".join([f"### {new} vs {base}", "", *tables.md_table(header, rows), "", *(f"- {n}" for n in notes)])
            + "\n"
        )
    return tables.plain_text(tables.rich_table(f"{new} vs {base}", header, rows), *notes)
