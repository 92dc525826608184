"""The train pattern's arithmetic against hand-computed cases, and its loop against a clock."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdsbench.report import goodput as model
from gdsbench.runners.checkpoint import train


def test_dalys_interval_for_a_10_s_checkpoint_and_a_1_h_mtbf():
    # sqrt(2 x 10 x 3600) = 268.328; x (1 + sqrt(10/7200)/3 + (10/7200)/9) = 1.0125769; - 10
    assert model.daly_interval(10, 3600) == pytest.approx(261.703, abs=1e-3)
    assert model.daly_interval(8000, 3600) == 3600  # a checkpoint dearer than 2 MTBF: once per MTBF


@pytest.mark.parametrize(("mtbf_h", "minutes"), [(24, 117), (6, 57), (0.25, 9.1)])
def test_dalys_interval_matches_his_published_cases(mtbf_h, minutes):
    """Daly 2006, figures 3-5: R = 10 min, delta = 5 min; M = 24 h, 6 h, 15 min -> tau_opt 117, 57, 9.1 min."""
    assert model.daly_interval(300, mtbf_h * 3600) / 60 == pytest.approx(minutes, abs=0.5 if minutes > 10 else 0.05)


def test_goodput_by_hand():
    # tau 261.703 s, C 10 s, R 30 s, M 3600 s: e^(30/3600) = 1.0083682, e^(271.703/3600) - 1 = 0.0783941,
    # 3600 x 1.0083682 x 0.0783941 = 284.580; 261.703 / 284.580 = 0.91961
    assert model.goodput(261.703, 10, 30, 3600) == pytest.approx(0.91961, abs=1e-4)
    # no failures to speak of: only the checkpoints' share is lost
    assert model.goodput(90, 10, 0, 1e12) == pytest.approx(0.9, abs=1e-6)


@given(
    cost=st.floats(0.01, 600),
    restart=st.floats(0, 600),
    mtbf=st.floats(600, 30 * 86400),
)
def test_the_optimal_interval_beats_half_and_double_it(cost, restart, mtbf):
    best = model.daly_interval(cost, mtbf)
    at_best = model.goodput(best, cost, restart, mtbf)
    assert 0 < at_best < 1
    assert at_best >= model.goodput(best / 2, cost, restart, mtbf) - 1e-9
    assert at_best >= model.goodput(best * 2, cost, restart, mtbf) - 1e-9


def test_summary_of_a_loop_with_two_slowed_steps_per_checkpoint():
    times = train.LoopTimes(
        steps=[0.2, 0.2, 0.3, 0.26, 0.2, 0.2, 0.3, 0.26],
        draining=[False, False, True, True, False, False, True, True],
        stalls=[0.5, 0.7],
        durable=[2.0, 2.2],
    )
    figures = train.summarize(times, restore_seconds=4.0)
    assert figures["stall_seconds"] == pytest.approx(0.6)
    assert figures["slowdown"] == pytest.approx(0.28 / 0.2 - 1)  # median slowed step 0.28 s over 0.2 s
    assert figures["checkpoint_cost_seconds"] == pytest.approx(0.6 + (0.1 + 0.06 + 0.1 + 0.06) / 2)
    assert figures["durable_seconds"] == pytest.approx(2.1)


def test_a_train_row_keeps_what_was_measured_as_its_declared_figures():
    """The row carries the measured figures under the columns the runner declares; the model is the report's."""
    figures = {
        "stall_seconds": 0.6,
        "slowdown": 0.4,
        "checkpoint_cost_seconds": 0.76,
        "loop_seconds": 13.2,
        "restore_seconds": 4.0,
        "step_seconds": 0.2,
        "durable_seconds": 2.1,
    }
    m = train.measurement(figures, 1 << 30, [])
    assert m.figures == {
        "stall_seconds": 0.6,
        "slowdown": 0.4,
        "checkpoint_cost_seconds": 0.76,
        "loop_seconds": 13.2,
        "restore_seconds": 4.0,
    }
    assert set(m.figures) == {c.name for c in train.COLUMNS} and m.blocking_seconds == 0.6
    assert "goodput" not in m.row() and "optimal_interval_seconds" not in m.row()


def test_a_loop_s_time_is_its_steps_and_its_stalls():
    times = train.LoopTimes(steps=[0.2, 0.3, 0.25], draining=[False, True, False], stalls=[0.5], durable=[1.0])
    assert train.summarize(times, 2.0)["loop_seconds"] == pytest.approx(1.25)


def test_a_synchronous_loop_stalls_for_the_whole_save_and_never_drains():
    times = train.run_loop(lambda: time.sleep(0.01), 6, 3, lambda: time.sleep(0.05))
    assert len(times.steps) == 6 and not any(times.draining)
    assert len(times.stalls) == 2 and all(0.05 <= s < 0.1 for s in times.stalls)
    assert all(0.05 <= d < 0.1 for d in times.durable)


def test_a_background_save_drains_behind_the_steps_and_the_next_one_waits_for_it():
    ended: list[float] = []
    called: list[float] = []

    def save() -> None:
        time.sleep(0.1)
        ended.append(time.perf_counter())

    def checkpoint() -> Any:
        called.append(time.perf_counter())
        return pool.submit(save)

    with ThreadPoolExecutor(1) as pool:
        times = train.run_loop(lambda: time.sleep(0.02), 6, 2, checkpoint)
    assert times.draining[2] and times.draining[3]  # the save after step 2 runs behind steps 3 and 4
    assert times.stalls[0] < 0.02  # the first checkpoint only starts its save
    # the second waits for the first to end: called only once it ended, and its stall, with the two steps and the
    # first checkpoint's own (the save begins inside it), spans the first save's 0.1 s
    assert called[1] >= ended[0] and called[2] >= ended[1]
    assert times.stalls[0] + times.steps[2] + times.steps[3] + times.stalls[1] >= 0.1 - 0.005
    assert len(times.durable) == 3 and all(d >= 0.1 for d in times.durable)


def test_a_step_is_calibrated_to_its_time():
    """A longer step does more matmuls, and a step's CPU never exceeds its time much (busy cores slow the
    calibration down too, so a step can only come out shorter: its thread's CPU time is what is asserted)."""
    short, step = train.Step(0.02), train.Step(0.2)
    started = time.thread_time()
    step()
    assert time.thread_time() - started < 0.4 and step.reps > 3 * short.reps >= 3


def train_rows():
    import pandas as pd

    from tests.test_report import row

    def one(engine: str, rep: int, stall: float, restore: float) -> dict:
        return row(
            engine=engine,
            pattern="train",
            io_size=None,
            repetition=rep,
            stall_seconds=stall,
            checkpoint_cost_seconds=stall,
            restore_seconds=restore,
        )

    return pd.DataFrame([one("dcp_fast", 1, 0.05, 0.5), one("dcp_fast", 2, 0.07, 0.5), one("dcp", 1, 2.0, 3.0)])


@pytest.mark.parametrize(
    ("entry", "status", "said"),
    [
        ({"where": {"engine": "dcp_fast"}, "max_stall": "100ms"}, "pass", "0.060s"),
        ({"where": {"engine": "dcp"}, "max_stall": "100ms"}, "fail", "2.000s"),
        # goodput at the check's mtbf (dcp: C 2 s, R 3 s): 96.6% at 1 h, 99.3% at a day (the default)
        ({"where": {"pattern": "train"}, "min_goodput": 0.98, "mtbf": "1h"}, "fail", "0.9662"),
        ({"where": {"pattern": "train"}, "min_goodput": 0.98}, "pass", "0.9932"),
        ({"where": {"pattern": "train"}, "min_goodput": 0.98, "mtbf": "24h"}, "pass", "0.9932"),
        ({"where": {"engine": "dcp_fast"}, "min_goodput": 0.99, "mtbf": "1h"}, "pass", "0.9941"),  # median of 2
    ],
)
def test_qualify_judges_stall_and_goodput_on_each_cases_median(entry, status, said):
    from gdsbench import qualify

    outcome = qualify.evaluate(qualify.parse_check("x.yaml", "checks[0]", entry), train_rows())
    assert outcome.status == status and said in outcome.message + outcome.details


def test_a_goodput_check_on_rows_without_goodput_fails_instead_of_passing():
    from gdsbench import qualify

    rows = train_rows().drop(columns=["checkpoint_cost_seconds"])
    outcome = qualify.evaluate(qualify.parse_check("x.yaml", "checks[0]", {"where": {}, "min_goodput": 0.5}), rows)
    assert outcome.status == "fail" and "no goodput values" in outcome.message
    with pytest.raises(Exception, match="fraction"):
        qualify.parse_check("x.yaml", "checks[0]", {"where": {}, "min_goodput": 1.5})


@pytest.mark.parametrize(
    ("entry", "key", "said"),
    [
        ({"where": {}, "min_goodput": 0.9, "mtbf": "often"}, "checks[0].mtbf", "a duration such as 24h"),
        ({"where": {}, "max_stall": "1s", "mtbf": "1h"}, "checks[0].mtbf", "mtbf only with min_goodput"),
        ({"where": {"mtbf": "24h"}, "min_goodput": 0.9}, "checks[0].where.mtbf", "beside a check's min_goodput"),
    ],
)
def test_a_checks_mtbf_is_a_duration_beside_min_goodput_never_a_where(entry, key, said):
    from gdsbench import qualify
    from gdsbench.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        qualify.parse_check("x.yaml", "checks[0]", entry)
    assert caught.value.key == key and said in str(caught.value)


def test_train_keys_are_parameters_of_train_cases_only(tmp_path):
    from gdsbench import config
    from tests.helpers import write_config

    matrix = {"engine": ["fastpersist", "dcp_fast"], "pattern": ["save", "train"], "interval": [5, 10]}
    cases = config.load(write_config(tmp_path, matrix=matrix)).cases
    saves = [c for c in cases if c.pattern.value == "save"]
    trains = [c for c in cases if c.pattern.value == "train"]
    assert len(saves) == 2, "interval does not multiply the saves"
    assert all(c.get("steps") is None and c.get("interval") is None for c in saves)
    assert {(c.engine, c.get("steps"), c.get("interval")) for c in trains} == {
        (engine, 60, interval) for engine in ("fastpersist", "dcp_fast") for interval in (5, 10)
    }


def test_a_bad_train_key_names_the_file_key_and_what_was_expected(tmp_path):
    from gdsbench import config
    from gdsbench.errors import ConfigError
    from tests.helpers import write_config

    path = write_config(tmp_path, matrix={"engine": ["fastpersist"], "pattern": ["train"], "step_time": ["often"]})
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    assert caught.value.key == "matrix.step_time[0]" and "duration such as 200ms" in str(caught.value)


@pytest.mark.parametrize("where", ["matrix", "top"])
def test_mtbf_is_no_case_axis_and_the_error_says_where_it_went(tmp_path, where):
    """mtbf changed no measurement (each loop ran once per value): a config naming it is told to use the report's."""
    from gdsbench import config
    from gdsbench.errors import ConfigError
    from tests.helpers import write_config

    matrix = {"engine": ["fastpersist"], "pattern": ["train"], **({"mtbf": ["1h", "24h"]} if where == "matrix" else {})}
    path = write_config(tmp_path, matrix=matrix, **({"mtbf": "24h"} if where == "top" else {}))
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    assert caught.value.key == ("matrix.mtbf" if where == "matrix" else "mtbf")
    assert "gdsbench report --mtbf 1h,24h" in str(caught.value)


def measured_rows():
    """Train rows as this version writes them: what was measured, no mtbf, no model figures."""
    return train_rows().assign(slowdown=0.1, checkpoint_cost_seconds=[0.2, 0.2, 2.0], restore_seconds=3.0)


def test_the_report_puts_engines_side_by_side_best_goodput_first():
    import json

    from gdsbench import report
    from gdsbench.report import summary

    built = summary.build(measured_rows(), ["engine", "pattern"], {"mtbf": (3600.0,)})
    table = built.table("goodput")
    assert table is not None and table.title == model.TITLE
    cells = [dict(zip(table.header, r)) for r in table.rows]
    assert [(c["engine"], c["mtbf"], c["n"], c["goodput"]) for c in cells] == [
        ("dcp_fast", "1h", "2", "98.8672%"),  # C 0.2 s, R 3 s: tau 37.8 s
        ("dcp", "1h", "1", "96.6230%"),
    ]
    assert cells[0]["stall s"] == "0.060" and cells[0]["slowdown"] == "+10.0%" and cells[0]["interval"] == "37.8s"
    document = json.loads(report.render(measured_rows(), ["engine", "pattern"], "json", {"mtbf": (3600.0,)}))
    assert [r["engine"] for r in document["goodput"]] == ["dcp_fast", "dcp"]
    assert document["goodput"][0]["goodput"] == pytest.approx(0.9886718, abs=1e-6)


def test_the_report_evaluates_the_model_at_each_mtbf_asked_else_a_day():
    from gdsbench.report import summary

    def goodputs(**asked) -> list[tuple[str, str, str]]:
        table = summary.build(measured_rows(), ["engine", "pattern"], asked).table("goodput")
        assert table is not None
        return [(r[table.header.index("engine")], r[table.header.index("mtbf")], r[-1]) for r in table.rows]

    assert goodputs(mtbf=[3600.0, 86400.0]) == [
        ("dcp_fast", "1h", "98.8672%"),
        ("dcp", "1h", "96.6230%"),
        ("dcp_fast", "24h", "99.7815%"),
        ("dcp", "24h", "99.3177%"),
    ]
    assert goodputs() == goodputs(mtbf=[model.DEFAULT_MTBF])  # rows that recorded no mtbf: a day


def test_old_rows_are_read_at_the_mtbf_they_recorded_unless_the_report_names_one():
    """Files from when mtbf was a case axis: each loop at its recorded mtbf (the goodput it recorded, to the
    digit); --mtbf evaluates every loop, both of them, at the mtbf asked."""
    from gdsbench.report import summary

    old = measured_rows().iloc[[0, 2]]
    old = pd.concat([old.assign(mtbf=3600.0), old.assign(mtbf=86400.0)], ignore_index=True)
    old = old.assign(
        goodput=[
            model.goodput(model.daly_interval(c, m), c, 3.0, m)
            for c, m in zip(old["checkpoint_cost_seconds"], old["mtbf"])
        ]
    )
    recorded = summary.build(old, ["engine", "pattern", "mtbf"]).figures("goodput")
    assert recorded is not None and len(recorded) == 4
    for _, r in recorded.iterrows():
        assert r["goodput"] == old[(old["engine"] == r["engine"]) & (old["mtbf"] == r["mtbf"])]["goodput"].item()
    asked = summary.build(old, ["engine", "pattern", "mtbf"], {"mtbf": (3600.0,)}).figures("goodput")
    assert asked is not None and list(asked["n"]) == [2, 2] and set(asked["mtbf"]) == {3600.0}


def test_report_mtbf_takes_durations_as_a_config_spells_them(tmp_path):
    from click.testing import CliRunner

    from gdsbench.cli import cli
    from gdsbench.errors import UsageError

    assert model.parse_mtbf("1h, 24h") == (3600.0, 86400.0) and model.parse_mtbf("90m") == (5400.0,)
    for bad in ("1h,often", "0", ""):
        with pytest.raises(UsageError, match="--mtbf: expected durations such as 1h,24h"):
            model.parse_mtbf(bad)
    path = tmp_path / "train.csv"
    measured_rows().to_csv(path, index=False)
    out = CliRunner().invoke(cli, ["report", str(path), "--mtbf", "1h,24h", "--format", "json"])
    assert out.exit_code == 0, out.output
    found = [(r["engine"], r["mtbf"], round(r["goodput"], 6)) for r in json.loads(out.output)["goodput"]]
    assert found == [
        ("dcp_fast", 3600, 0.988672),
        ("dcp", 3600, 0.96623),
        ("dcp_fast", 86400, 0.997815),
        ("dcp", 86400, 0.993177),
    ]
