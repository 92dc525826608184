"""`gdsbench compare` on the real results sample and on copies of it with known changes."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from gdsbench import compare, results
from gdsbench.cli import cli
from tests.helpers import assert_exits

SAMPLE = sorted((Path(__file__).parents[1] / "results" / "sample").glob("*.csv"))[0]


def variant(tmp_path: Path, name: str, change) -> Path:
    """A copy of the sample CSV with `change(frame)` applied, as another run on another host."""
    frame = results.load([SAMPLE]).drop(columns="source")
    frame = change(frame.assign(host="other", run_id="20260101T000000Z-abcdef"))
    path = tmp_path / f"{name}.csv"
    frame.to_csv(path, index=False)
    return path


def scale(pattern: str, factor: float):
    """A change that multiplies every bandwidth of one pattern."""

    def apply(frame: pd.DataFrame) -> pd.DataFrame:
        frame.loc[frame["pattern"] == pattern, "bw_bytes"] *= factor
        return frame

    return apply


def flagged(table: pd.DataFrame) -> pd.Series:
    """Which compared cases carry a guard-rail flag on either side."""
    return table["base_flags"].astype(bool) | table["new_flags"].astype(bool)


def test_same_results_are_same_everywhere_but_where_their_flags_leave_them_inconclusive(tmp_path: Path) -> None:
    """The sample's unstable and page-cache rows are inconclusive, never 'same': their own flags say so; --strict
    fails on them (exit 3), --allow-flags judges them."""
    new = variant(tmp_path, "same", lambda f: f)  # other host and run: not part of the match
    result = compare.compare_files(SAMPLE, new)
    assert len(result.table) == 48 and not result.only_base and not result.only_new
    ok = result.table[result.table["verdict"] != "skipped"]
    assert len(ok) == 32 and (ok["ratio"] == 1.0).all()
    assert set(ok[~flagged(ok)]["verdict"]) == {"same"} and set(ok[flagged(ok)]["verdict"]) == {"inconclusive"}
    assert 0 < len(result.inconclusive) < len(ok) and not result.table["regression"].any()
    assert (result.table[result.table["verdict"] == "skipped"]["case"].str.contains("transfer=GDS")).all()
    run = CliRunner().invoke(cli, ["compare", str(SAMPLE), str(new)])
    assert run.exit_code == 0, run.output
    assert "0 regressions beyond 10%" in run.output
    assert f"inconclusive: {len(result.inconclusive)} case(s), their rows flagged page_cache,unstable" in run.output
    assert_exits(CliRunner().invoke(cli, ["compare", str(SAMPLE), str(new), "--strict"]), 3)
    allowed = CliRunner().invoke(
        cli, ["compare", str(SAMPLE), str(new), "--strict", "--allow-flags", "unstable,page_cache"]
    )
    assert allowed.exit_code == 0 and "inconclusive" not in allowed.output, allowed.output
    assert_exits(CliRunner().invoke(cli, ["compare", str(SAMPLE), str(new), "--allow-flags", "noisy"]), 2)


def test_halved_writes_are_regressions_and_exit_1(tmp_path: Path) -> None:
    new = variant(tmp_path, "slow", scale("write", 0.5))
    result = compare.compare_files(SAMPLE, new)
    direct = result.table[result.table["case"].str.contains("pattern=write,transfer=CPU_ONLY")]
    cached = result.table[result.table["case"].str.contains("pattern=write,transfer=CPU_CACHED")]
    reads = result.table[result.table["case"].str.contains("pattern=read,transfer=CPU_")]
    assert set(direct[~flagged(direct)]["verdict"]) == {"slower"} and direct[~flagged(direct)]["regression"].all()
    assert (
        set(direct[flagged(direct)]["verdict"]) == {"inconclusive"} and not direct[flagged(direct)]["regression"].any()
    )
    assert direct["ratio"].tolist() == pytest.approx([0.5] * 8)
    # Page-cache writes varied 3-6x between the two repetitions here (flagged unstable): never called a regression.
    assert "inconclusive" in set(cached["verdict"]) and cached["ratio"].tolist() == pytest.approx([0.5] * 8)
    assert set(reads["verdict"]) <= {"same", "inconclusive"} and not reads["regression"].any()
    run = CliRunner().invoke(cli, ["compare", str(SAMPLE), str(new)])
    assert_exits(run, 1)
    count = len(result.regressions)
    assert count >= 6 and f"{count} regressions beyond 10%" in run.output and "slower REGRESSION" in run.output
    assert CliRunner().invoke(cli, ["compare", str(SAMPLE), str(new), "--threshold", "60%"]).exit_code == 0


def test_doubled_reads_are_faster(tmp_path: Path) -> None:
    result = compare.compare_files(SAMPLE, variant(tmp_path, "fast", scale("read", 3.0)))
    reads = result.table[result.table["case"].str.contains("pattern=read,transfer=CPU_")]
    assert set(reads[~flagged(reads)]["verdict"]) == {"faster"} and not result.table["regression"].any()
    assert set(reads[flagged(reads)]["verdict"]) <= {"inconclusive"}


def side(n: int, median: float, low: float, high: float, status: str = "ok") -> pd.Series:
    """One case's summary as compare.summarise makes it."""
    return pd.Series({"n": n, "median": median, "min": low, "max": high, "status": status})


def test_verdict_rule_overlap_then_combined_spread() -> None:
    assert compare.verdict(side(3, 100, 90, 110), side(3, 108, 105, 112)) == "same"  # ranges overlap
    # No overlap, but one slow outlier widened BASE's range: 10% is within (55% + 7.3%) / 2.
    assert compare.verdict(side(3, 100, 50, 105), side(3, 110, 106, 114)) == "same"
    # No overlap and 12% is beyond (10% + 1.8%) / 2.
    assert compare.verdict(side(3, 100, 95, 105), side(3, 112, 111, 113)) == "faster"
    assert compare.verdict(side(1, 100, 100, 100), side(1, 99, 99, 99)) == "slower"
    assert (
        compare.verdict(side(2, 100, 99, 101), side(0, float("nan"), float("nan"), float("nan"), "failed")) == "failed"
    )


def test_failed_cases_are_regressions_and_one_sided_cases_listed(tmp_path: Path) -> None:
    def change(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame[~frame["case"].str.contains("pattern=read,transfer=CPU_CACHED,io_size=4096,")]
        broken = frame["case"].str.contains("pattern=write,transfer=CPU_ONLY,io_size=4096,threads=1,")
        frame.loc[broken, ["status", "bw_bytes", "error"]] = ["failed", float("nan"), "fio: exit 1"]
        return frame

    result = compare.compare_files(SAMPLE, variant(tmp_path, "partial", change))
    assert len(result.only_base) == 2 and all("transfer=CPU_CACHED,io_size=4096," in c for c in result.only_base)
    assert result.only_new == ()
    assert result.regressions["verdict"].tolist() == ["failed"]
    text = compare.render(result, "markdown", "base.csv", "new.csv")
    assert text.startswith("### NEW new.csv vs BASE base.csv")
    assert "| pattern | transfer | io_size | threads | base bw | new bw | new/base | verdict |" in text
    assert "- only in base.csv: engine=fio,pattern=read,transfer=CPU_CACHED,io_size=4K," in text
    assert "| write | CPU_ONLY | 4K | 1 |" in text


@pytest.mark.parametrize("threshold", ["ten", "-5%", "100%"])
def test_bad_threshold_is_a_usage_error(threshold: str) -> None:
    run = CliRunner().invoke(cli, ["compare", str(SAMPLE), str(SAMPLE), "--threshold", threshold])
    assert_exits(run, 2, one_line_error=True)
    assert run.output.startswith("gdsbench: error: --threshold: expected")


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    run = CliRunner().invoke(cli, ["compare", str(SAMPLE), str(tmp_path / "nope.csv")])
    assert_exits(run, 2, one_line_error=True)
    assert "no such results file" in run.output


def with_new_default_key(frame: pd.DataFrame) -> pd.DataFrame:
    """The same rows as a newer version writes them: `unlink=False` (its default) in every fio case."""
    return frame.assign(case=frame["case"].str.replace(",gpu=", ",unlink=False,gpu=", regex=False))


def test_a_baseline_from_an_earlier_version_still_matches_every_case(tmp_path: Path) -> None:
    """The committed sample has no `unlink` key; current rows name it at its default: every case matches
    (0 cases matched, and the gate passed, before)."""
    new = variant(tmp_path, "new", with_new_default_key)
    assert "unlink=False" in results.load([new])["case"].iloc[0]
    result = compare.compare_files(SAMPLE, new)
    assert len(result.table) == results.load([SAMPLE])["case"].nunique()
    assert not result.only_base and not result.only_new
    assert set(result.table["verdict"]) <= {"same", "skipped", "inconclusive"} and "same" in set(
        result.table["verdict"]
    )


def test_a_non_default_value_still_tells_cases_apart(tmp_path: Path) -> None:
    new = variant(tmp_path, "new", lambda f: f.assign(case=f["case"].str.replace(",gpu=", ",unlink=True,gpu=")))
    with pytest.raises(Exception, match="no case in common"):
        compare.compare_files(SAMPLE, new)


def test_runs_with_no_case_in_common_are_an_error_not_a_pass(tmp_path: Path) -> None:
    new = variant(tmp_path, "new", lambda f: f.assign(case=f["case"].str.replace("iodepth=8", "iodepth=3")))
    result = CliRunner().invoke(cli, ["compare", str(SAMPLE), str(new)])
    assert_exits(result, 2, one_line_error=True)
    assert "no case in common" in result.output and "nothing was compared" in result.output
    assert f"between BASE {SAMPLE} (48 cases) and NEW {new} (48)" in result.output


def test_a_partial_match_says_how_many_cases_each_side_left_out(tmp_path: Path) -> None:
    def drop_one(frame: pd.DataFrame) -> pd.DataFrame:
        first = frame["case"].iloc[0]
        return frame[frame["case"] != first]

    new = variant(tmp_path, "new", drop_one)
    text = compare.render(compare.compare_files(SAMPLE, new), "text", "base.csv", "new.csv")
    assert "left out: 1 case(s) of BASE and 0 of NEW have no match" in text


def test_a_long_one_sided_list_is_cut_short_and_counted(tmp_path: Path) -> None:
    def drop_seven(frame: pd.DataFrame) -> pd.DataFrame:
        return frame[~frame["case"].isin(frame["case"].unique()[:7])]

    text = compare.render(compare.compare_files(SAMPLE, variant(tmp_path, "new", drop_seven)), "text", "b.csv", "n.csv")
    assert text.count("only in b.csv: engine=") == 5 and "... and 2 more only in b.csv" in text
    assert "left out: 7 case(s) of BASE and 0 of NEW have no match" in text


def test_parameters_named_in_another_order_still_match(tmp_path: Path) -> None:
    def reorder(frame: pd.DataFrame) -> pd.DataFrame:
        return frame.assign(case=frame["case"].map(lambda c: ",".join(reversed(c.split(",")))))

    result = compare.compare_files(SAMPLE, variant(tmp_path, "new", reorder))
    assert len(result.table) == 48 and not result.only_base and not result.only_new


def test_files_without_a_schema_version_are_version_1_and_the_change_is_named(tmp_path: Path) -> None:
    """The committed sample predates schema_version: it reads as 1; a current run (2) still matches it."""
    assert results.schema_version(results.read_sidecar(SAMPLE)) == 1 and results.SCHEMA_VERSION == 2
    new = variant(tmp_path, "new", with_new_default_key)
    results.write_sidecar(new, {"schema_version": results.SCHEMA_VERSION})
    result = compare.compare_files(SAMPLE, new)
    assert len(result.table) == 48 and "results schema differs: BASE 1 -> NEW 2" in result.warnings[0]
    run = CliRunner().invoke(cli, ["compare", str(SAMPLE), str(new)])
    assert run.exit_code == 0 and f"results schema differs: {SAMPLE} 1 -> {new} 2" in run.output
