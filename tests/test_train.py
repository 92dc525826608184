"""The train pattern's arithmetic against hand-computed cases, and its loop against a clock."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdsbench.runners.checkpoint import train


def test_dalys_interval_for_a_10_s_checkpoint_and_a_1_h_mtbf():
    # sqrt(2 x 10 x 3600) = 268.328; x (1 + sqrt(10/7200)/3 + (10/7200)/9) = 1.0125769; - 10
    assert train.daly_interval(10, 3600) == pytest.approx(261.703, abs=1e-3)
    assert train.daly_interval(8000, 3600) == 3600  # a checkpoint dearer than 2 MTBF: once per MTBF


@pytest.mark.parametrize(("mtbf_h", "minutes"), [(24, 117), (6, 57), (0.25, 9.1)])
def test_dalys_interval_matches_his_published_cases(mtbf_h, minutes):
    """Daly 2006, figures 3-5: R = 10 min, delta = 5 min; M = 24 h, 6 h, 15 min -> tau_opt 117, 57, 9.1 min."""
    assert train.daly_interval(300, mtbf_h * 3600) / 60 == pytest.approx(minutes, abs=0.5 if minutes > 10 else 0.05)


def test_goodput_by_hand():
    # tau 261.703 s, C 10 s, R 30 s, M 3600 s: e^(30/3600) = 1.0083682, e^(271.703/3600) - 1 = 0.0783941,
    # 3600 x 1.0083682 x 0.0783941 = 284.580; 261.703 / 284.580 = 0.91961
    assert train.goodput(261.703, 10, 30, 3600) == pytest.approx(0.91961, abs=1e-4)
    # no failures to speak of: only the checkpoints' share is lost
    assert train.goodput(90, 10, 0, 1e12) == pytest.approx(0.9, abs=1e-6)


@given(
    cost=st.floats(0.01, 600),
    restart=st.floats(0, 600),
    mtbf=st.floats(600, 30 * 86400),
)
def test_the_optimal_interval_beats_half_and_double_it(cost, restart, mtbf):
    best = train.daly_interval(cost, mtbf)
    at_best = train.goodput(best, cost, restart, mtbf)
    assert 0 < at_best < 1
    assert at_best >= train.goodput(best / 2, cost, restart, mtbf) - 1e-9
    assert at_best >= train.goodput(best * 2, cost, restart, mtbf) - 1e-9


def test_summary_of_a_loop_with_two_slowed_steps_per_checkpoint():
    times = train.LoopTimes(
        steps=[0.2, 0.2, 0.3, 0.26, 0.2, 0.2, 0.3, 0.26],
        draining=[False, False, True, True, False, False, True, True],
        stalls=[0.5, 0.7],
        durable=[2.0, 2.2],
    )
    figures = train.summarize(times, restore_seconds=4.0, mtbf=3600)
    assert figures["stall_seconds"] == pytest.approx(0.6)
    assert figures["slowdown"] == pytest.approx(0.28 / 0.2 - 1)  # median slowed step 0.28 s over 0.2 s
    assert figures["checkpoint_cost_seconds"] == pytest.approx(0.6 + (0.1 + 0.06 + 0.1 + 0.06) / 2)
    assert figures["optimal_interval_seconds"] == pytest.approx(train.daly_interval(0.76, 3600))
    assert figures["goodput"] == pytest.approx(train.goodput(figures["optimal_interval_seconds"], 0.76, 4.0, 3600))
    assert figures["durable_seconds"] == pytest.approx(2.1)


def test_a_synchronous_loop_stalls_for_the_whole_save_and_never_drains():
    times = train.run_loop(lambda: time.sleep(0.01), 6, 3, lambda: time.sleep(0.05))
    assert len(times.steps) == 6 and not any(times.draining)
    assert len(times.stalls) == 2 and all(0.05 <= s < 0.1 for s in times.stalls)
    assert all(0.05 <= d < 0.1 for d in times.durable)


def test_a_background_save_drains_behind_the_steps_and_the_next_one_waits_for_it():
    with ThreadPoolExecutor(1) as pool:
        times = train.run_loop(lambda: time.sleep(0.02), 6, 2, lambda: pool.submit(time.sleep, 0.1))
    assert times.draining[2] and times.draining[3]  # the save after step 2 runs behind steps 3 and 4
    assert times.stalls[0] < 0.02  # the first checkpoint only starts its save
    assert times.stalls[1] >= 0.04  # the second waits for the first to end (0.1 s less two steps)
    assert len(times.durable) == 3 and all(d >= 0.1 for d in times.durable)


def test_a_step_takes_about_its_calibrated_time():
    step = train.Step(0.05)
    started = time.perf_counter()
    step()
    assert 0.02 < time.perf_counter() - started < 0.15 and step.reps >= 1


def train_rows():
    import pandas as pd

    from tests.test_report import row

    def one(engine: str, rep: int, stall: float, goodput: float) -> dict:
        return row(engine=engine, pattern="train", io_size=None, repetition=rep, stall_seconds=stall, goodput=goodput)

    return pd.DataFrame([one("dcp_fast", 1, 0.05, 0.991), one("dcp_fast", 2, 0.07, 0.989), one("dcp", 1, 2.0, 0.95)])


@pytest.mark.parametrize(
    ("entry", "status", "said"),
    [
        ({"where": {"engine": "dcp_fast"}, "max_stall": "100ms"}, "pass", "0.060s"),
        ({"where": {"engine": "dcp"}, "max_stall": "100ms"}, "fail", "2.000s"),
        ({"where": {"pattern": "train"}, "min_goodput": 0.98}, "fail", "0.9500"),
        ({"where": {"engine": "dcp_fast"}, "min_goodput": 0.98}, "pass", "0.9900"),
    ],
)
def test_qualify_judges_stall_and_goodput_on_each_cases_median(entry, status, said):
    from gdsbench import qualify

    outcome = qualify.evaluate(qualify.parse_check("x.yaml", "checks[0]", entry), train_rows())
    assert outcome.status == status and said in outcome.message + outcome.details


def test_a_goodput_check_on_rows_without_goodput_fails_instead_of_passing():
    from gdsbench import qualify

    rows = train_rows().drop(columns=["goodput"])
    outcome = qualify.evaluate(qualify.parse_check("x.yaml", "checks[0]", {"where": {}, "min_goodput": 0.5}), rows)
    assert outcome.status == "fail" and "no goodput values" in outcome.message
    with pytest.raises(Exception, match="fraction"):
        qualify.parse_check("x.yaml", "checks[0]", {"where": {}, "min_goodput": 1.5})


def test_train_keys_are_parameters_of_train_cases_only(tmp_path):
    from gdsbench import config
    from tests.helpers import write_config

    matrix = {"engine": ["fastpersist", "dcp_fast"], "pattern": ["save", "train"], "mtbf": ["1h", "24h"]}
    cases = config.load(write_config(tmp_path, matrix=matrix)).cases
    saves = [c for c in cases if c.pattern.value == "save"]
    trains = [c for c in cases if c.pattern.value == "train"]
    assert len(saves) == 2, "mtbf does not multiply the saves"
    assert all(c.get("steps") is None and c.get("mtbf") is None for c in saves)
    assert {(c.engine, c.get("mtbf"), c.get("steps"), c.get("interval")) for c in trains} == {
        (engine, mtbf, 60, 10) for engine in ("fastpersist", "dcp_fast") for mtbf in (3600.0, 86400.0)
    }


def test_a_bad_train_key_names_the_file_key_and_what_was_expected(tmp_path):
    from gdsbench import config
    from gdsbench.errors import ConfigError
    from tests.helpers import write_config

    path = write_config(tmp_path, matrix={"engine": ["fastpersist"], "pattern": ["train"], "mtbf": ["often"]})
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    assert caught.value.key == "matrix.mtbf[0]" and "duration such as 1h" in str(caught.value)


def test_the_report_puts_engines_side_by_side_best_goodput_first():
    import json

    from gdsbench import report
    from gdsbench.report import goodput, summary

    rows = train_rows().assign(mtbf=3600.0, slowdown=0.1, restore_seconds=3.0, checkpoint_cost_seconds=0.2,
                               optimal_interval_seconds=120.0)  # fmt: skip
    built = summary.build(rows, ["engine", "pattern"])
    assert built.goodput is not None and built.goodput.title == goodput.TITLE
    cells = [dict(zip(built.goodput.header, r)) for r in built.goodput.rows]
    assert [(c["engine"], c["mtbf"], c["n"], c["goodput"]) for c in cells] == [
        ("dcp_fast", "1h", "2", "99.0000%"),
        ("dcp", "1h", "1", "95.0000%"),
    ]
    assert cells[0]["stall s"] == "0.060" and cells[0]["slowdown"] == "+10.0%" and cells[0]["interval"] == "2m 0s"
    document = json.loads(report.render(rows, ["engine", "pattern"], "json"))
    assert [r["engine"] for r in document["goodput"]] == ["dcp_fast", "dcp"]
    assert document["goodput"][0]["goodput"] == pytest.approx(0.99)
