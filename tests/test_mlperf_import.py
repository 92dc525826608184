"""`gdsbench import` of MLPerf Storage / DLIO checkpointing summary.json files: two real summaries from the
published v3.0 results (tests/data/mlperf-summary, README.md names them) parsed to their exact values, forged
and hostile ones refused by name, and the imported file beside the committed run of configs/mlperf-checkpoint.yaml
in one report, the rules' cache condition judged on both."""

from __future__ import annotations

import copy
import json
import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gdsbench import mlperf, mlperf_import, results
from gdsbench.cli import cli
from gdsbench.errors import SummaryError
from gdsbench.report import summary as report_summary

DATA = Path(__file__).parent / "data" / "mlperf-summary"
SAVE_8B = DATA / "alluxio-1host-llama3-8b-save.summary.json"
LOAD_70B = DATA / "hpe-16host-llama3-70b-load.summary.json"
SAMPLE = Path(__file__).parents[1] / "results/sample/mlperf-checkpoint/mlperf-checkpoint-20261125-155503.csv"
GIB = 1 << 30


def real(path: Path) -> dict[str, Any]:
    """A fixture as a JSON document (to forge variants of it)."""
    return json.loads(path.read_text())


def parse(doc: Any) -> mlperf_import.Summary:
    """A document parsed as if read from forged.json."""
    return mlperf_import.parse(Path("forged.json"), json.dumps(doc).encode())


def test_the_single_host_save_parses_to_its_exact_values() -> None:
    """Alluxio's llama3-8b write: one host, 8 ranks; DLIO's GB are GiB (its checkpoint_size_GB is the geometry's
    bytes over 2**30, to the last bit), the rate is GiB/s."""
    got = mlperf_import.read_summary(SAVE_8B)
    assert (got.workload, got.ranks, got.hosts, got.host, got.hostname) == (
        "mlperf-llama3-8b",
        8,
        1,
        "ip-172-31-18-171",
        "ip-172-31-18-171",
    )
    assert got.checkpoint_bytes == mlperf.geometry("mlperf-llama3-8b", 8).total_bytes() == 112425623552
    assert got.checkpoint_bytes == 104.70452117919922 * 2**30
    assert got.host_memory_bytes == 747.9131889343262 * 2**30  # the one host's entry
    assert got.potential_caching == (1,) and got.start == "2026-07-08T06:46:18.666818"
    [phase] = got.phases
    assert phase == mlperf_import.Phase(
        "save", 4.643973844563218 * 2**30, 0.24652423273229437 * 2**30, 22.6081011, 1.168297264853723
    )
    assert phase.bw_bytes != 4.643973844563218 * 1e9  # binary, not decimal


def test_the_16_host_load_parses_with_dlio_s_collapsed_host_entries() -> None:
    """HPE's llama3-70b read: 64 ranks on 16 hosts, whose memory DLIO filed under 4 entries (each 4 hosts' worth):
    a host's memory is their sum over 16 (188 GiB, /proc/meminfo's MemTotal of rank 0's host), not an entry."""
    got = mlperf_import.read_summary(LOAD_70B)
    assert (got.workload, got.ranks, got.hosts, got.host) == ("mlperf-llama3-70b", 64, 16, "all")
    assert got.checkpoint_bytes == mlperf.geometry("mlperf-llama3-70b", 64).total_bytes() == 978406572032
    entries = (752.3539161682129, 752.3611755371094, 752.3603019714355, 751.7835388183594, *[0.0] * 12)
    assert got.memory_entries == entries and got.host_memory_bytes == sum(entries) / 16 * 2**30
    assert abs(got.host_memory_bytes - 197223052 * 1024) < 0.001 * got.host_memory_bytes
    assert got.potential_caching == (1, 1, 1, 1, *[0] * 12)
    [phase] = got.phases
    assert (phase.pattern, phase.bw_bytes, phase.checkpoint_seconds) == (
        "load",
        110.22794945362989 * GIB,
        8.268132300000001,
    )


def test_rows_carry_the_geometry_the_rules_figures_and_the_cache_check() -> None:
    """One row per phase in the sweep's units: the phase's bytes and I/O time over 10 checkpoints, DLIO's rate as
    bw_bytes, no per-rank figures; the 70b read is 569.5 GiB per host against 3 x 188 GiB: beyond the cache."""
    save, load = mlperf_import.rows([mlperf_import.read_summary(p) for p in (SAVE_8B, LOAD_70B)], 10)
    assert (
        save["case"] == "engine=mlperf-dlio,pattern=save,workload=mlperf-llama3-8b,world_size=8,scale=1,checkpoints=10"
    )
    assert (save["bytes"], save["seconds"], save["bw_bytes"]) == (
        10 * 112425623552,
        10 * 22.6081011,
        4.643973844563218 * GIB,
    )
    assert save.get("max_rank_seconds") is None and save.get("min_rank_bw_bytes") is None
    assert (save["status"], save["repetition"], save["nodes"], save["cache"], save["ceiling"]) == ("ok", 1, 1, "", "")
    assert (load["host"], load["nodes"], load["world_size"]) == ("all", 16, 64)
    assert "569.5 GiB read per host vs 3x memory = 564 GiB: beyond the page cache" in load["note"]
    assert str(LOAD_70B.absolute()) in load["note"] and load["command"] == f"gdsbench import {LOAD_70B.absolute()}"


def test_a_summary_is_identified_by_its_checkpoint_size() -> None:
    """NVIDIA's published llama3-1t write (1024 ranks, 15426.589264154434 GiB) is the 1t geometry; a size no model
    has at that rank count is refused with the sizes the geometries have there."""
    assert mlperf_import.identify(Path("x"), 1024, 15426.589264154434) == "mlperf-llama3-1t"
    with pytest.raises(SummaryError, match=r"x: metric.checkpoint_size_GB: 105.000 GiB at 64 ranks .*70b 911.2"):
        mlperf_import.identify(Path("x"), 64, 105.0)


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(mlperf.names()),
    replicas=st.integers(1, 4),
    extra=st.integers(0, 9),
    scale=st.sampled_from([Fraction(1), Fraction(1, 64), Fraction(1, 8192)]),
)
def test_total_bytes_counts_whole_replicas_as_the_sum_over_ranks(
    name: str, replicas: int, extra: int, scale: Fraction
) -> None:
    """Counting two replicas and multiplying (so a forged rank count costs nothing) gives every rank's sum."""
    model = mlperf.MODELS[name.removeprefix(mlperf.PREFIX)]
    mp = model.tensor * model.pipeline
    world = (
        replicas * mp
        if replicas * mp > model.closed_ranks or extra == 0
        else min(replicas * mp + extra, model.closed_ranks - 1)
    )
    shape = mlperf.geometry(name, max(world, 1), scale)
    assert shape.total_bytes() == sum(shape.rank_bytes(r) for r in range(shape.world_size))


@pytest.mark.timeout(60)
def test_a_forged_rank_count_is_judged_quickly() -> None:
    """The largest rank count accepted is sized in a few rank steps (every geometry of 65536 ranks)."""
    doc = real(SAVE_8B) | {"num_accelerators": mlperf_import.MAX_RANKS}
    with pytest.raises(SummaryError, match="at 65536 ranks is none of"):
        parse(doc)


def forged(change: Any) -> dict[str, Any]:
    """The real 70b read with one change applied (a function of the document)."""
    doc = copy.deepcopy(real(LOAD_70B))
    change(doc)
    return doc


def _set(path: str, value: Any) -> Any:
    """A change that sets a dotted key."""

    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            doc = doc[key]
        doc[last] = value

    return apply


def _drop(path: str) -> Any:
    """A change that removes a dotted key."""

    def apply(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            doc = doc[key]
        del doc[last]

    return apply


RATE = "metric.load_checkpoint_io_mean_GB_per_second"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (_set("num_accelerators", "64"), "num_accelerators: expected a whole number"),
        (_set("num_accelerators", True), "num_accelerators: expected a whole number"),
        (_set("num_accelerators", 10**9), "num_accelerators: expected a whole number in 1..65536"),
        (_set("num_hosts", 65), "num_hosts: expected a whole number in 1..64"),
        (_drop("num_hosts"), "num_hosts: expected a whole number"),
        (_set(RATE, -110.2), "load_checkpoint_io_mean_GB_per_second: expected a finite number in \\(0"),
        (_set(RATE, 0), "load_checkpoint_io_mean_GB_per_second: expected a finite number"),
        (_set(RATE, 1e300), "load_checkpoint_io_mean_GB_per_second: expected a finite number"),
        (_set(RATE, "110"), "load_checkpoint_io_mean_GB_per_second: expected a finite number"),
        (_drop(RATE), "load_checkpoint_io_mean_GB_per_second: expected a finite number"),
        (
            _set("metric.load_checkpoint_io_stdev_GB_per_second", -1),
            "io_stdev_GB_per_second: expected a finite number in \\[0",
        ),
        (_set("metric.load_checkpoint_duration_mean_seconds", None), "duration_mean_seconds: expected a finite number"),
        (_set("metric.checkpoint_size_GB", 1e12), "checkpoint_size_GB: expected a finite number"),
        (_set("metric.checkpoint_size_GB", 900.0), "checkpoint_size_GB: 900.000 GiB at 64 ranks is none of"),
        (_set("metric", [1, 2]), "metric: expected an object"),
        (_set("metric", {"checkpoint_size_GB": 911.2121276855469}), "no save_checkpoint_\\* or load_checkpoint_\\*"),
        (_set("metric", {"train_au_mean_percentage": 99.0}), "a training run's figures"),
        (_set("host_memory_GB", [188.0] * 15), "host_memory_GB: expected a list of 16 numbers"),
        (_set("host_memory_GB", [-1.0] * 16), "host_memory_GB: expected numbers in \\[0"),
        (_set("host_memory_GB", [0.0] * 16), "host_memory_GB: every entry is 0"),
        (_set("potential_caching", [2] * 16), "potential_caching: expected a list of 16 flags"),
        (_set("potential_caching", [True] * 16), "potential_caching: expected a list of 16 flags"),
        (_set("hostname", "c-ftc0001\nall"), "hostname: expected a host name"),
        (_set("hostname", "../../etc"), "hostname: expected a host name"),
        (_set("start", "yesterday"), "start: expected an ISO 8601 time"),
        (_drop("end"), "end: expected an ISO 8601 time"),
    ],
)
def test_a_forged_summary_is_refused_naming_the_key(change: Any, named: str) -> None:
    """Wrong types, negative, huge, missing: a SummaryError naming the file and the key, never another error."""
    with pytest.raises(SummaryError, match=f"forged.json: .*{named}"):
        parse(forged(change))


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"num_hosts": 1, "num_hosts": 2}', "key 'num_hosts' appears more than once"),
        (b'{"metric": {"load_checkpoint_io_mean_GB_per_second": Infinity}}', "Infinity is not a figure"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"[" * 100_000, "not a summary.json|not JSON"),
        (b'{"n": 1' + b"0" * 5000 + b"}", "not a summary.json"),
    ],
)
def test_text_that_is_no_summary_is_refused(text: bytes, named: str) -> None:
    """Not JSON, not an object, a repeated key, an infinity, not UTF-8, nesting or digits beyond reason."""
    with pytest.raises(SummaryError, match=named):
        mlperf_import.parse(Path("bad.json"), text)


def test_what_is_no_regular_file_or_too_large_is_refused_unread(tmp_path: Path) -> None:
    """A directory, a FIFO (never waited on), a missing file and one over 1 MiB: named errors."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (mlperf_import.MAX_FILE_BYTES + 1))
    for path, named in (
        (tmp_path, "not a regular file"),
        (fifo, "not a regular file"),
        (big, "over 1048576 bytes"),
        (tmp_path / "none.json", "cannot open: No such file"),
    ):
        with pytest.raises(SummaryError, match=named):
            mlperf_import.read_summary(path)


def test_a_phase_dlio_did_not_run_is_nan_and_left_out() -> None:
    """DLIO's mean of no checkpoint is NaN (numpy): such a phase is no row; NaN in a phase that ran is refused."""
    doc = real(SAVE_8B)
    nan = {f"load_checkpoint_{k}": float("nan") for k in ("io_mean_GB_per_second", "duration_mean_seconds")}
    assert [p.pattern for p in parse(doc | {"metric": doc["metric"] | nan}).phases] == ["save"]
    with pytest.raises(SummaryError, match="save_checkpoint_duration_mean_seconds: expected a finite"):
        parse(doc | {"metric": doc["metric"] | {"save_checkpoint_duration_mean_seconds": float("nan")}})


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
KEYS = [
    "num_accelerators",
    "num_hosts",
    "hostname",
    "start",
    "end",
    "metric",
    "host_memory_GB",
    "potential_caching",
    "metric.checkpoint_size_GB",
    RATE,
    "metric.load_checkpoint_duration_mean_seconds",
    "metric.load_checkpoint_io_stdev_GB_per_second",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(changes=st.lists(st.tuples(st.sampled_from(KEYS), JSON), min_size=1, max_size=3))
def test_any_value_at_any_key_reads_or_is_refused_by_name(changes: list[tuple[str, Any]]) -> None:
    """Whatever JSON replaces the real summary's values, the result is a checked summary or a SummaryError."""
    doc = real(LOAD_70B)
    for key, value in changes:
        try:
            _set(key, value)(doc)
        except (TypeError, KeyError):
            return  # the parent of a dotted key was replaced by a non-object
    try:
        got = parse(doc)
    except SummaryError as exc:
        assert str(exc).startswith("forged.json: ")
        return
    assert got.workload in mlperf.names() and got.phases and 1 <= got.hosts <= got.ranks
    assert all(p.bw_bytes > 0 and p.checkpoint_seconds > 0 for p in got.phases)


def test_one_invocation_s_read_is_warm_and_misses_the_rules_below_3x_memory() -> None:
    """A summary with both phases (one invocation: nothing cleared the caches between them) reads 1047 GiB per
    host against 3 x 748 GiB: the rules ask caches cleared, so its read is warm and does not follow them."""
    doc = real(SAVE_8B)
    loads = {"load_checkpoint_io_mean_GB_per_second": 5.5, "load_checkpoint_duration_mean_seconds": 19.0}
    save, load = mlperf_import.rows([parse(doc | {"metric": doc["metric"] | loads})], 10)
    assert (save["cache"], load["cache"], load["repetition"]) == ("", "warm", 1)
    assert (
        "1047.0 GiB read per host vs 3x memory = 2244 GiB: the rules ask caches cleared first; this warm read"
        in load["note"]
    )


def test_the_cache_verdict_says_when_nothing_recorded_the_caches() -> None:
    """An imported read below 3x memory with no word on the caches: not recorded (never 'cleared')."""
    assert (
        mlperf.cache_verdict(10 * GIB, 24 * GIB, "")
        == "the rules ask caches cleared first; whether they were is not recorded"
    )
    assert mlperf.cache_verdict(80 * GIB, 24 * GIB, "") == "beyond the page cache, no clearing needed by the rules"


def test_import_writes_a_results_file_the_report_shows_beside_a_gdsbench_run(tmp_path: Path) -> None:
    """The CLI writes one CSV and sidecar and prints the path; report places the imported rows in the MLPerf
    geometry table beside the committed gdsbench run, the read's cache condition judged on both; no fio
    ceiling is asked of an imported run."""
    out = tmp_path / "imported"
    done = CliRunner().invoke(cli, ["import", str(SAVE_8B), str(LOAD_70B), "-o", str(out)])
    assert done.exit_code == 0, done.output
    csv = Path(done.output.strip())
    assert csv.parent == out and sorted(p.name for p in out.iterdir()) == [csv.name, results.sidecar_path(csv).name]
    meta = results.read_sidecar(csv)
    assert [s["sha256"][:8] for s in meta["imported"]["summaries"]] == ["26c0e8d8", "8812ab51"]
    assert set(meta["columns"]) == {
        "bw_stdev_bytes",
        "checkpoint_seconds",
        "checkpoint_seconds_stdev",
        "nodes",
        "host_memory_bytes",
        "rules_edition",
    }
    frame = results.load([SAMPLE, csv])
    built = report_summary.build(frame)
    table = built.table("mlperf_geometry")
    assert table is not None
    rows = {(r[1], r[5]): dict(zip(table.header, r)) for r in table.rows}  # (host, engine) -> cells
    assert rows[("vm", "torch_save_ranks")]["read caches"] == "cleared"  # 4.1 GiB vs 3 x 23.5 GiB, cold
    assert rows[("ip-172-31-18-171", "mlperf-dlio")]["write GiB/s"] == "4.644"
    assert (
        rows[("all", "mlperf-dlio")]["read GiB/s"] == "110.228"
        and rows[("all", "mlperf-dlio")]["read caches"] == "over 3x RAM"
    )
    assert (rows[("vm", "dcp")]["geometry"], rows[("all", "mlperf-dlio")]["geometry"]) == ("llama3-8b", "llama3-70b")
    ceilings = built.figures("ceilings")
    assert ceilings is not None and "mlperf-dlio" not in set(ceilings["engine"])
    assert not any("has no durable fio write" in w for w in built.notes.warnings)


def test_a_read_without_a_word_on_the_caches_is_a_warning(tmp_path: Path) -> None:
    """The 70b read imported as 2 checkpoints per phase (182 GiB per host, below 3 x 188): not recorded, warned."""
    done = CliRunner().invoke(cli, ["import", str(LOAD_70B), "--checkpoints", "2", "-o", str(tmp_path)])
    assert done.exit_code == 0, done.output
    built = report_summary.build(results.load([Path(done.output.strip())]))
    [line] = built.figures("mlperf_geometry").to_dict("records")  # type: ignore[union-attr]
    assert (line["read_caches"], line["checkpoints"]) == ("not recorded", 2)
    assert any(
        "mlperf-dlio llama3-70b read (not recorded)" in w.replace("mlperf-llama3-70b", "llama3-70b")
        for w in built.notes.warnings
    )


def test_a_bad_summary_among_good_ones_writes_nothing(tmp_path: Path) -> None:
    """Exit 2, one line naming the file and key, no traceback, no file; an existing import is never replaced."""
    bad = tmp_path / "summary.json"
    bad.write_text(json.dumps(forged(_set("num_hosts", -1))))
    out = tmp_path / "out"
    done = CliRunner().invoke(cli, ["import", str(SAVE_8B), str(bad), "-o", str(out)])
    assert done.exit_code == 2 and "Traceback" not in done.output
    assert f"gdsbench: error: {bad}: num_hosts: expected a whole number in 1..64 (got -1)" in done.output
    assert not out.exists()
    first = CliRunner().invoke(cli, ["import", str(SAVE_8B), "-o", str(out)])
    written = Path(first.output.strip()).read_bytes()
    again = CliRunner().invoke(cli, ["import", str(SAVE_8B), "-o", str(out)])
    assert again.exit_code == 2 and "already imported into" in again.output and "counts once" in again.output
    beside = CliRunner().invoke(
        cli, ["import", str(SAVE_8B), str(LOAD_70B), "-o", str(out)]
    )  # with another: still once
    assert beside.exit_code == 2 and f"{SAVE_8B}: already imported into" in beside.output, beside.output
    twice = CliRunner().invoke(cli, ["import", str(SAVE_8B), str(SAVE_8B), "-o", str(tmp_path / "o2")])
    assert twice.exit_code == 2 and "given twice" in twice.output
    assert Path(first.output.strip()).read_bytes() == written and len(list(out.iterdir())) == 2


def test_a_system_s_invocations_are_one_run_and_its_repeats_repetitions() -> None:
    """The rules' five runs of one system are repetitions 1..n of one case in one run (the report averages them);
    another system (another rank-0 host, or other memory behind the same name) is another run."""
    doc = real(SAVE_8B)
    again = parse(doc | {"start": "2026-07-08T07:00:00"})
    other = parse(doc | {"hostname": "node2"})
    bigger = parse(doc | {"host_memory_GB": [1024.0]})
    first, second, third, fourth = mlperf_import.rows([parse(doc), again, other, bigger], 10)
    assert (first["run_id"], first["repetition"]) == (second["run_id"], 1) and second["repetition"] == 2
    assert len({first["run_id"], third["run_id"], fourth["run_id"]}) == 3 and third["repetition"] == 1


def test_compare_and_qualify_read_an_imported_file(tmp_path: Path) -> None:
    """compare matches the imported cases on (case, host); qualify selects them by their parameters."""
    from gdsbench import qualify

    done = CliRunner().invoke(cli, ["import", str(SAVE_8B), str(LOAD_70B), "-o", str(tmp_path)])
    csv = done.output.strip()
    compared = CliRunner().invoke(cli, ["compare", csv, csv])
    assert compared.exit_code == 0 and "2 cases compared" in compared.output, compared.output
    frame = results.load([csv])
    entry = {"where": {"workload": "mlperf-llama3-70b", "pattern": "load"}, "min_bw": "100GiB/s"}
    assert qualify.evaluate(qualify.parse_check("x.yaml", "checks[0]", entry), frame).status == "pass"
    entry = {"where": {"workload": "mlperf-llama3-8b", "pattern": "save"}, "min_bw": "5GiB/s"}
    assert qualify.evaluate(qualify.parse_check("x.yaml", "checks[0]", entry), frame).status == "fail"
