"""Engines declare their traits and result columns; the sweep writes them, reports, flags and qualify read them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from gdsbench import config, qualify, results, runners, sweep
from gdsbench.columns import CLUSTER, DISTRIBUTED, FILES, OBJECTS, SINGLE_PROCESS, records
from gdsbench.errors import ToolError
from gdsbench.report import render
from gdsbench.runners.base import Measurement, check_figures

ROOT = Path(__file__).parent.parent
MiB = 1 << 20


def s3_config(tmp_path: Path) -> config.SweepConfig:
    """A sweep of the s3 engine's writes at two object sizes."""
    path = tmp_path / "s3.yaml"
    matrix = {"engine": ["s3"], "pattern": ["write"], "transfer": ["CPU_ONLY"], "io_size": ["1M", "4M"]}
    document = {"name": "s3", "directory": str(tmp_path), "endpoint": "http://127.0.0.1:9", "matrix": matrix}
    path.write_text(yaml.safe_dump(document))
    return config.load(path)


def test_a_figure_the_engine_does_not_declare_is_refused() -> None:
    s3 = runners.get("s3")
    measured = Measurement(bytes=MiB, seconds=1.0, bw_bytes=MiB, figures={"requests": 4})
    assert check_figures(s3, measured).row()["requests"] == 4
    with pytest.raises(ToolError, match="s3 measured bogus, which it does not declare"):
        check_figures(s3, Measurement(bytes=MiB, seconds=1.0, bw_bytes=MiB, figures={"bogus": 1}))
    with pytest.raises(ToolError, match="fio measured requests"):
        check_figures(runners.get("fio"), measured)
    with pytest.raises(ToolError, match="s3 resolved threads, which it does not leave to its library"):
        check_figures(s3, Measurement(bytes=MiB, seconds=1.0, bw_bytes=MiB, resolved={"threads": 4}))


def test_rows_carry_the_traits_their_engine_declares() -> None:
    loaded = config.load(ROOT / "configs" / "s3.yaml")
    traits = {case.engine: sweep._row(case, 1, "r")["stores_on"] for case in loaded.cases}
    assert traits["s3"] == OBJECTS and traits["s3torch_save"] == OBJECTS
    ceilings = {case.engine: sweep._row(case, 1, "r")["ceiling"] for case in loaded.cases}
    assert ceilings["s3torch_save"] == "s3" and ceilings["s3"] == ""
    fio = runners.get("fio").traits
    assert fio.where({"ioengine": "rbd"}) == CLUSTER and fio.where({"ioengine": "libaio"}) == FILES
    assert runners.get("torch_save").traits.row({}) == {
        "stores_on": FILES,
        "ceiling": "fio",
        "baseline": SINGLE_PROCESS,
    }
    assert runners.get("dcp").traits.row({})["baseline"] == DISTRIBUTED  # the references the report divides by
    assert {runners.get(e).traits.baseline for e in ("dcp_fast", "fastpersist", "fio")} == {""}


def traits_of(sample: str, by: str) -> dict[str, dict[str, str]]:
    """The traits a sample result set's rows are read with, by engine (or ioengine)."""
    frame = results.load(sorted((ROOT / "results/sample" / sample).glob("*.csv")))
    return frame.groupby(by)[["stores_on", "ceiling"]].first().fillna("").to_dict("index")


def test_old_files_read_their_traits_the_legacy_way() -> None:
    """Files written before rows carried traits (every sample) read them as gdsbench read such files before."""
    objects = traits_of("s3-checkpoints", "engine")
    assert objects["s3"] == {"stores_on": OBJECTS, "ceiling": ""}
    assert objects["s3torch_save"] == objects["s3torch_dcp"] == {"stores_on": OBJECTS, "ceiling": "s3"}
    assert traits_of("checkpoint", "engine")["dcp"] == {"stores_on": FILES, "ceiling": "fio"}
    baselines = results.load(sorted((ROOT / "results/sample/checkpoint").glob("*.csv"))).groupby("engine")["baseline"]
    assert baselines.first().fillna("").to_dict() == {  # files from before the trait: by the engines' names
        **dict.fromkeys(baselines.groups, ""),
        "dcp": DISTRIBUTED,
        "torch_save": SINGLE_PROCESS,
    }
    cluster = traits_of("ceph-local", "ioengine")
    assert cluster["rbd"]["stores_on"] == cluster["rados"]["stores_on"] == CLUSTER
    assert cluster["libaio"]["stores_on"] == FILES


def written(tmp_path: Path) -> Path:
    """A results file the sweep's own pieces write: two s3 cases x 2 repetitions, 4 and 16 requests each."""
    loaded = s3_config(tmp_path)
    path = tmp_path / "s3.csv"
    writer = results.ResultWriter(path, sweep.columns(loaded))
    for case in loaded.cases:
        for repetition in (1, 2):
            requests = case["io_size"] // MiB * 4
            measured = Measurement(
                bytes=requests * MiB, seconds=1.0, bw_bytes=requests * MiB, figures={"requests": requests}
            )
            writer.write(sweep._row(case, repetition, "r1", status="ok", **measured.row()))
    writer.close()
    declared = records(sweep.declared(loaded).values())
    results.write_sidecar(path, {"schema_version": results.SCHEMA_VERSION, "columns": declared})
    return path


def test_a_declared_column_goes_from_the_row_to_the_csv_the_report_and_qualify(tmp_path: Path) -> None:
    path = written(tmp_path)
    header = results.read_header(path)
    assert header.index("requests") == len(results.COLUMNS)  # after the core, before the options
    frame = results.load([path])
    assert list(frame["requests"]) == [4, 4, 16, 16] and frame["requests"].dtype.kind in "if"
    assert "requests" not in results.parameters(frame.columns, results.figures_of(frame))
    table = render(frame, None, "markdown")
    assert "| requests |" in table and "| 16 |" in table.replace("  ", "")
    checks = [{"where": {"engine": "s3"}, "max_requests": 10}, {"where": {"io_size": "1M"}, "max_requests": 10}]
    outcomes = qualify.evaluate_all(qualify.parse_checks(str(tmp_path / "q.yaml"), checks), frame)
    assert [o.status for o in outcomes] == ["fail", "pass"] and "worst 16" in outcomes[0].message


#: Figures only some engines measure, once Measurement fields, now declared by the engines that fill them.
ENGINE_FIGURES = {
    "s3": {"lat_first_us", "seconds_min", "bw_min_bytes", "bw_max_bytes", "spread_seconds", "straggler"},
    "fio": {"seconds_min", "bw_min_bytes", "bw_max_bytes", "spread_seconds", "straggler", "bw_sum_bytes"},
    "torch_save": {"bytes_on_disk", "staging_bytes"},
    "s3torch_save": {"bytes_on_disk", "staging_bytes"},
    "dcp_fast": {"bytes_on_disk", "staging_bytes", "max_rank_seconds", "min_rank_bw_bytes", "compression_ratio"},
}


def test_engine_figures_are_declared_by_their_engines_not_measurement_fields() -> None:
    core = {f.name for f in dataclasses.fields(Measurement)}
    for engine, names in ENGINE_FIGURES.items():
        assert names <= {column.name for column in runners.get(engine).columns}, engine
        assert not names & core, engine
    assert {"bytes", "seconds", "bw_bytes", "iops", "lat_p99_us", "cpu_seconds", "note"} <= core


def test_declared_figures_keep_their_place_in_the_header_and_out_of_the_sidecar(tmp_path: Path) -> None:
    """Old and new files have the same header: a figure that predates declarations stays where it was."""
    header = sweep.columns(s3_config(tmp_path))
    spread = ("lat_first_us", "bw_min_bytes", "bw_max_bytes", "max_rank_seconds", "min_rank_bw_bytes", "seconds_min")
    assert header[header.index("lat_p999_us") + 1 :][: len(spread)] == spread
    assert len(set(header)) == len(header) and header[len(results.COLUMNS)] == "requests"
    assert list(sweep.declared(s3_config(tmp_path))) == ["requests"]  # what the report shows as a figure column


def test_the_io_options_an_engine_ran_with_are_settings_never_figures() -> None:
    """Every IOOptions field is recorded (io_<field>), but as a setting: reports do not take its median as a
    figure and qualify offers no min_/max_ gate on it."""
    from gdsbench import qualify
    from gdsbench.columns import SETTING
    from gdsbench.runners.checkpoint import io_options

    columns = io_options.columns()
    assert columns and {c.kind for c in columns} == {SETTING}
    assert "io_threads" in {c.name for c in columns}
    assert not [name for name in qualify.declared_limits() if name.endswith("_io_threads")]


def test_declared_figures_read_as_the_core_ones_by_their_unit() -> None:
    """A declared figure's cell is written as a core figure of its unit would be, never as raw 4-digit floats."""
    from gdsbench.report.tables import bw_text, figure_text

    assert figure_text("bytes/s", 2.5e9) == bw_text(2.5e9)
    assert figure_text("bytes", 1 << 30) == "1024MiB"
    assert figure_text("s", 0.41234) == "0.412s" and figure_text("ratio", 2.3456) == "2.35"
    assert figure_text("count", 16.0) == "16" and figure_text("count", 2.5) == "2.5"
    assert figure_text("us", 1500.0) == "1500us" and figure_text("s", float("nan")) == "-"
