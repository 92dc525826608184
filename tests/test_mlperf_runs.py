"""`gdsbench import` of a whole MLPerf Storage v3.0 submission folder (tests/data/mlperf-submission: Alluxio's
llama3-8b checkpointing runs as MLCommons published them, README.md names them): every summary.json under it, the
per-rank stats beside each (the checkpoints counted, the rules' longest-rank duration), the edition its path names;
a run folder with a rank's stats missing, forged or planted is refused by name."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from gdsbench import mlperf_import, mlperf_runs, results
from gdsbench.cli import cli
from gdsbench.errors import SummaryError
from gdsbench.report import summary as report_summary

SUBMISSION = Path(__file__).parent / "data" / "mlperf-submission"
MODEL = SUBMISSION / "closed/Alluxio/results/aws_r5n24xlarge_i3en12xlarge_1c_1s_8h/checkpointing/llama3-8b"
WRITE, READ = MODEL / "20260708_064613", MODEL / "20260708_065100"


def longest_rank(folder: Path, pattern: str) -> float:
    """The rules' duration, computed here from the files: per checkpoint the longest rank's, then the mean."""
    per_rank = []
    for rank in range(8):
        epoch = json.loads((folder / f"{rank}_per_epoch_stats.json").read_text())["1"]
        per_rank.append([epoch[f"{pattern}_ckpt{n}"]["duration"] for n in range(1, 11)])
    return statistics.fmean(max(durations) for durations in zip(*per_rank))


def test_a_submission_folder_imports_every_run_with_its_ranks_and_its_edition(tmp_path: Path) -> None:
    assert mlperf_runs.summaries_under(SUBMISSION) == [WRITE / "summary.json", READ / "summary.json"]
    done = CliRunner().invoke(cli, ["import", str(SUBMISSION), "-o", str(tmp_path)])
    assert done.exit_code == 0, done.output
    frame = results.load([Path(done.output.strip())]).set_index("pattern")
    assert list(frame["rules_edition"]) == ["v3.0", "v3.0"] and list(frame["checkpoints"]) == [10, 10]
    for pattern, folder in (("save", WRITE), ("load", READ)):
        assert frame.loc[pattern, "max_rank_seconds"] == pytest.approx(longest_rank(folder, pattern), rel=1e-12)
        assert "per-rank stats of 8 ranks" in frame.loc[pattern, "note"]
        assert "closed (MLPerf Storage v3.0 checkpointing rules)" in frame.loc[pattern, "note"]
    assert frame.loc["save", "max_rank_seconds"] >= frame.loc["save", "checkpoint_seconds"] * 0.99
    table = report_summary.build(results.load([Path(done.output.strip())])).table("mlperf_geometry")
    assert table is not None
    [cells] = [dict(zip(table.header, r)) for r in table.rows]
    assert (cells["rules"], cells["ranks"]) == ("v3.0", "8 (closed)") and cells["write max rank s"] != "-"


def test_a_summary_alone_names_no_edition_and_keeps_the_given_count(tmp_path: Path) -> None:
    """Outside its run folder nothing says the edition or the checkpoints: said so, never guessed."""
    alone = tmp_path / "summary.json"
    shutil.copy(WRITE / "summary.json", alone)
    summary = mlperf_import.read_summary(alone)
    assert summary.edition is None and summary.ranked == {}
    [row] = mlperf_import.rows([summary], 7)
    assert row["checkpoints"] == 7 and row["max_rank_seconds"] is None and row["rules_edition"] == "unknown"
    assert "the folder names no edition: judged by v3.0" in row["note"] and "no per-rank stats" in row["note"]


def copied_run(tmp_path: Path) -> Path:
    """The write invocation's folder, copied under a v3.0 submission's path."""
    run = tmp_path / "closed/Org/results/sys/checkpointing/llama3-8b/20260708_064613"
    shutil.copytree(WRITE, run)
    return run


def test_a_run_folder_missing_a_rank_s_stats_is_refused_naming_it(tmp_path: Path) -> None:
    run = copied_run(tmp_path)
    (run / "5_per_epoch_stats.json").unlink()
    with pytest.raises(SummaryError, match=r"per-rank stats for 7 of the summary's 8 ranks \(missing rank 5\)"):
        mlperf_import.read_summary(run / "summary.json")


@pytest.mark.parametrize(
    ("forge", "said"),
    [
        (lambda d: d["1"]["save_ckpt3"].update(duration=-1.0), r"1\.save_ckpt3\.duration: expected seconds above 0"),
        (lambda d: d["1"]["save_ckpt3"].update(duration="22"), r"1\.save_ckpt3\.duration: expected seconds"),
        (lambda d: d["1"].pop("save_ckpt10"), r"ranks' save checkpoints differ in number \(\[9, 10\]\)"),
    ],
)
def test_a_forged_rank_file_is_refused_by_name(tmp_path: Path, forge, said: str) -> None:
    run = copied_run(tmp_path)
    path = run / "3_per_epoch_stats.json"
    doc = json.loads(path.read_text())
    forge(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(SummaryError, match=said):
        mlperf_import.read_summary(run / "summary.json")


def test_a_planted_link_or_fifo_is_never_read(tmp_path: Path) -> None:
    run = copied_run(tmp_path)
    secret = tmp_path / "secret.json"
    secret.write_text("{}")
    (run / "2_per_epoch_stats.json").unlink()
    (run / "2_per_epoch_stats.json").symlink_to(secret)
    with pytest.raises(SummaryError, match=r"2_per_epoch_stats\.json: cannot open"):
        mlperf_import.read_summary(run / "summary.json")
    (run / "2_per_epoch_stats.json").unlink()
    os.mkfifo(run / "2_per_epoch_stats.json")
    with pytest.raises(SummaryError, match=r"2_per_epoch_stats\.json: not a regular file"):
        mlperf_import.read_summary(run / "summary.json")


def test_a_folder_without_a_summary_is_a_named_error(tmp_path: Path) -> None:
    with pytest.raises(SummaryError, match=r"no summary\.json under it"):
        mlperf_runs.summaries_under(tmp_path)
    done = CliRunner().invoke(cli, ["import", str(tmp_path), "-o", str(tmp_path / "out")])
    assert done.exit_code == 2 and "no summary.json under it" in done.output and "Traceback" not in done.output


def test_v2_0_s_run_folder_is_named_by_its_metadata(tmp_path: Path) -> None:
    """mlpstorage v2.0's path (no submission levels) and metadata (args.closed, a boolean) say v2.0; its v2.0 rules
    accepted subsets that v3.0's do not."""
    run = tmp_path / "results/checkpointing/llama3-8b/20250601_120000"
    shutil.copytree(WRITE, run)
    assert mlperf_runs.edition(run / "summary.json") is None  # the path alone says nothing
    (run / "checkpointing_20250601_120000_metadata.json").write_text(json.dumps({"args": {"closed": True}}))
    assert mlperf_runs.edition(run / "summary.json") == "v2.0"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["1", "2", "save_ckpt1", "load_ckpt2", "duration", "x"]), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(doc=JSON)
def test_any_rank_file_reads_or_is_refused_by_name(doc: object) -> None:
    """Whatever a rank file holds, it gives durations (each above 0, in checkpoint order) or a SummaryError naming the
    file; never another exception."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "0_per_epoch_stats.json"
        path.write_text(json.dumps(doc))
        try:
            found = mlperf_runs._durations(path)
        except SummaryError as exc:
            assert str(path) in str(exc)
            return
    assert set(found) <= {"save", "load"} and all(d > 0 for durations in found.values() for d in durations)


def test_a_summary_link_inside_a_folder_is_not_followed(tmp_path: Path) -> None:
    run = copied_run(tmp_path)
    (run / "summary.json").unlink()
    (run / "summary.json").symlink_to("/etc/passwd")
    with pytest.raises(SummaryError, match=r"summary\.json: a link, not followed inside a folder"):
        mlperf_runs.summaries_under(tmp_path)


def test_the_code_image_s_version_names_the_edition(tmp_path: Path) -> None:
    """A v3.0 run's `.mlps-code-image` leads to its organisation's `code-<hash8>/.code-hash.json` (the layout of
    mlcommons/storage_results_v3.0): its mlpstorage_version is the edition, whatever the path's shape."""
    org = tmp_path / "NVIDIA"
    run = org / "results/sys/checkpointing/llama3-8b/20260708_064613"
    shutil.copytree(WRITE, run)
    digest = "98929eb5a35d1bd743b626279a4171ab"
    (run / ".mlps-code-image").write_text(f"md5-tree-v2:{digest}")
    (org / "code-98929eb5").mkdir()
    (org / "code-98929eb5/.code-hash.json").write_text(json.dumps({"hash": digest, "mlpstorage_version": "3.0.40"}))
    assert mlperf_runs.edition(run / "summary.json") == "v3.0"
    (org / "code-98929eb5/.code-hash.json").write_text(json.dumps({"mlpstorage_version": "4.1.2"}))
    assert mlperf_runs.edition(run / "summary.json") == "v4.1"


def test_the_geometry_table_names_each_import_s_edition(tmp_path: Path) -> None:
    """A bare summary's rows read `edition unknown`; a system's write from a v3.0 folder and its read from a bare
    copy are one row of the table, which says the two disagree."""
    alone = tmp_path / "bare"
    alone.mkdir()
    shutil.copy(READ / "summary.json", alone / "summary.json")
    csv = mlperf_import.import_files([alone, WRITE], tmp_path / "out")
    table = report_summary.build(results.load([csv])).table("mlperf_geometry")
    assert table is not None
    assert [dict(zip(table.header, r))["rules"] for r in table.rows] == ["mixed: unknown, v3.0"]
    bare = mlperf_import.import_files([alone], tmp_path / "bare-out")
    only = report_summary.build(results.load([bare])).table("mlperf_geometry")
    assert only is not None and [dict(zip(only.header, r))["rules"] for r in only.rows] == ["edition unknown"]
