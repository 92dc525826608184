"""The durability ladder's benchmark (issue 33, part 3): the tiered engine and its faults against the test cluster's
radosgw (real ckptio, real daemons), the baselines beside it (dcp_upload, s3torch_dcp's train pattern), the
expectations a fault row is held to, `tiers:`/`fault:` in configs, and the report's two-level goodput model against
hand-computed values."""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import SimpleNamespace as Found
from typing import Any

import pandas as pd
import pytest

from gdsbench import config
from gdsbench.cases import Case
from gdsbench.errors import ConfigError, ToolError
from gdsbench.report import goodput
from gdsbench.report import ladder as model
from gdsbench.runners import get
from gdsbench.runners.base import Measurement, RunContext, check_figures
from gdsbench.runners.checkpoint import kill_upload, tier_faults
from gdsbench.runners.checkpoint.tiered import tier_list
from gdsbench.runners.s3_client import Bucket
from tests.ceph_cluster import ceph_cluster, radosgw  # noqa: F401
from tests.helpers import assert_exits, write_config

MiB = 1 << 20


def case_of(engine: str, **params: Any) -> Case:
    """A train case as a config makes it: 4 MiB of llama3-8b, 4 steps of 10 ms, a checkpoint every 2."""
    matrix = {
        "engine": [engine],
        "pattern": ["train"],
        "checkpoint_size": ["4M"],
        "memory": ["as-is"],
        "steps": [4],
        "step_time": ["10ms"],
        "interval": [2],
        **{k: [v] for k, v in params.items()},
    }
    [case] = config.from_dict({"matrix": matrix}, "tiers.yaml").cases
    return case


# -- configs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "text"),
    [
        (["local", "s3"], "local+s3"),
        (["local"], "local"),
        ("s3", "s3"),
        ("local+s3", "local+s3"),
        ((" local", "s3 "), "local+s3"),
    ],
)
def test_tiers_are_a_ladder_of_local_then_s3_kept_as_text(given: Any, text: str) -> None:
    assert tier_list(given) == text


@pytest.mark.parametrize(
    ("matrix", "key", "said"),
    [
        ({"tiers": [["s3", "local"]]}, "matrix.tiers[0]", "[local], [local, s3], [memory], [memory, s3], [s3]"),
        ({"tiers": [["local", "local"]]}, "matrix.tiers[0]", "[local], [local, s3], [memory], [memory, s3], [s3]"),
        ({"tiers": [[]]}, "matrix.tiers[0]", "nearest first"),
        ({"tiers": [["local", 3]]}, "matrix.tiers[0]", "nearest first"),
        (
            {"fault": ["unplugged"]},
            "matrix.fault[0]",
            "one of none, corrupt_local, lose_local, store_down, kill_upload",
        ),
    ],
)
def test_a_bad_tiers_or_fault_value_names_the_key_and_what_was_expected(
    matrix: dict[str, Any], key: str, said: str, tmp_path: Path
) -> None:
    path = write_config(tmp_path, matrix={"engine": ["tiered"], "pattern": ["train"], **matrix})
    with pytest.raises(ConfigError) as caught:
        config.load(path)
    assert caught.value.key == key and said in str(caught.value)


def test_the_cli_refuses_a_bad_fault_with_one_line_and_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gdsbench.cli import cli

    path = write_config(tmp_path, matrix={"engine": ["tiered"], "pattern": ["train"], "fault": ["pulled_plug"]})
    result = CliRunner().invoke(cli, ["sweep", str(path), "--dry-run"])
    assert_exits(result, 2, one_line_error=True)
    assert "matrix.fault[0]" in result.output and "corrupt_local" in result.output


def test_faults_and_async_the_ladder_cannot_take_are_skipped_saying_why(tmp_path: Path) -> None:
    ctx, runner = RunContext(directory=tmp_path, file_size=4 * MiB), get("tiered")
    said = runner.unavailable(case_of("tiered", tiers=["local"], fault="corrupt_local"), ctx)
    assert said == "fault corrupt_local is a fault of the ladder: run it with tiers [local, s3]"
    said = runner.unavailable(case_of("tiered", tiers=["s3"], **{"async": True}), ctx)
    assert str(said).startswith("tiers [s3] saves straight to S3 with ckptio.save, which blocks")


# -- a fault row's expectations ---------------------------------------------------------------------------------


class Saved:
    """A TierSave as ckptio fills it (plain data: the expectations read nothing else)."""

    def __init__(self, step: int, durable: dict[int, float], errors: dict[int, str] | None = None) -> None:
        self.step, self.durable_seconds, self.errors = step, durable, errors or {}


def test_a_store_down_row_whose_drains_reached_the_store_fails_naming_it() -> None:
    loop = tier_faults.Loop(saves=[Saved(2, {0: 0.1, 1: 0.5}), Saved(4, {0: 0.1}, {1: "refused"})], risk=[2, 2])
    with pytest.raises(ToolError, match="store_down: 1 of 2 drains reached the object tier and 1 failed"):
        tier_faults.checked_saves("store_down", loop, 1)
    loop.saves[0] = Saved(2, {0: 0.1}, {1: "PutObject failed (no answer): refused"})
    figures, notes = tier_faults.checked_saves("store_down", loop, 1)
    assert (
        figures["drain_error"] == "PutObject failed (no answer): refused" and figures["durable_object_seconds"] is None
    )
    assert notes == ["0 of 2 checkpoints drained to the object tier", "2 drains failed"]


def test_a_newest_step_never_drained_or_a_silent_corrupt_restore_fails_the_row() -> None:
    loop = tier_faults.Loop(saves=[Saved(2, {0: 0.1, 1: 0.3}), Saved(4, {0: 0.1}, {1: "HTTP 503"})], risk=[2, 4])
    with pytest.raises(ToolError, match="step 4 never reached the object tier: HTTP 503"):
        tier_faults.checked_saves("none", loop, 1)
    quiet = tier_faults.Restore(tier=1, step=4, skipped=(), seconds=0.2)
    with pytest.raises(ToolError, match="did not say it skipped the corrupted local copy"):
        tier_faults.restored("corrupt_local", quiet, 1)


def test_a_torn_restore_or_an_upload_left_after_the_kills_fails_the_row() -> None:
    torn = Found(tier=1, step=6, skipped=[Found(tier=1, step=6, reason="checksum mismatch")], state={"killed": None})
    assert kill_upload.check_restore(torn, 1, 4, 6, lambda state: None) == "skipped tier 1 step 6: checksum mismatch"
    older = Found(tier=1, step=2, skipped=[], state={})
    assert "read step 2 from tier 1, expected step 4 or 6" in str(kill_upload.check_restore(older, 1, 4, 6, print))
    with pytest.raises(ToolError, match="kill_upload: 1 torn checkpoints after 3 kills: skipped tier 1"):
        kill_upload.figures(kill_upload.Kills(made=3, torn=["skipped tier 1 step 6: checksum mismatch"]), 0)
    with pytest.raises(ToolError, match="2 incomplete uploads of the key left after the final save"):
        kill_upload.figures(kill_upload.Kills(made=3, inside=2), 2)
    assert kill_upload.figures(kill_upload.Kills(made=3, inside=2), 0)["torn_seen"] == 0


# -- against the test cluster's radosgw -------------------------------------------------------------------------


def run(case: Case, ctx: RunContext) -> Measurement:
    runner = get(case.engine)
    assert runner.unavailable(case, ctx) is None
    return check_figures(runner, runner.run(case, ctx))


def leftovers(bucket: str, tmp_path: Path) -> tuple[list[Path], dict[str, int]]:
    """What a run left in its directory and its bucket (nothing, unless keep_files)."""
    store = Bucket(os.environ["AWS_ENDPOINT_URL"], bucket, "us-east-1", 16 * MiB)
    objects = store.sizes("gdsbench/") if store.exists() else {}
    return sorted(tmp_path.iterdir()), objects


@pytest.mark.slow
@pytest.mark.parametrize("fault", tier_faults.FAULTS)
def test_the_ladder_and_each_fault_restore_exactly_from_the_tier_they_should(
    fault: str,
    radosgw: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Every row: durable locally and (the store up) in S3, the local restore exact; the object restore exact from
    S3 after the local copies were removed, one byte flipped (skipped, with ckptio's reason) or the folder lost;
    with the store down, training went on, every drain failed with a named error and the local copy restored."""
    bucket, ctx = f"gdsbench-tiers-{fault.replace('_', '-')}", RunContext(directory=tmp_path, file_size=4 * MiB)
    kills = {"kills": 1} if fault == "kill_upload" else {}
    case = case_of("tiered", tiers=["local", "s3"], fault=fault, bucket=bucket, **{"async": True}, **kills)
    measured = run(case, ctx)
    row = measured.figures
    assert row["durable_local_seconds"] > 0 and row["restore_local_seconds"] > 0 and row["work_at_risk_steps"] >= 2
    assert row.get("fault_expected") == tier_faults.EXPECTED.get(fault)  # what the fault must do, on its row
    if fault in (
        "corrupt_local",
        "store_down",
        "exit_unpersisted",
    ):  # ckptio's warnings: the fault's proof, kept and marked expected
        assert row["ckptio_warnings"] >= 1 and f"expected for fault {fault}" in str(measured.note)
    if fault == "none":
        assert row["ckptio_warnings"] == 0 and "ckptio warned" not in str(measured.note)
    if fault == "store_down":
        assert row["durable_object_seconds"] is None and row.get("restore_object_seconds") is None
        assert "PutObject failed (no answer)" in row["drain_error"] and "REFUSED" in row["drain_error"]
        assert (row["restored_tier"], row["state_exact"]) == ("local", "yes")
        assert os.environ.get("AWS_ENDPOINT_URL_S3") is None  # the closed port's endpoint is gone with the fault
    elif fault == "exit_unpersisted":  # refused, never silent: the step named, S3's error quoted; then persisted
        assert "step 6, the newest save, is not durable in the farthest tier" in row["exit_refused"]
        assert "REFUSED" in row["exit_refused"] and row["ckptio_warnings"] >= 1
        assert row["restore_object_seconds"] > 0 and (row["restored_tier"], row["state_exact"]) == ("s3", "yes")
    elif fault == "kill_upload":  # killed children never left a torn checkpoint; the final save aborted their uploads
        assert (
            row["torn_seen"] == 0 and row["uploads_left"] == 0 and 0 <= row["kills_in_upload"] <= row["kills_made"] <= 1
        )
        assert row["restore_object_seconds"] > 0 and (row["restored_tier"], row["state_exact"]) == ("s3", "yes")
    else:
        assert row["durable_object_seconds"] >= row["durable_local_seconds"] and row["restore_object_seconds"] > 0
        said = {"none": None, "corrupt_local": "checksum mismatch", "lose_local": "cannot be listed"}[fault]
        assert said is None or said in row["skipped_reason"]
        assert fault == "none" or (row["restored_tier"], row["state_exact"]) == ("s3", "yes")
    ctx.resources.cleanup()
    assert leftovers(bucket, tmp_path) == ([], {})


@pytest.mark.slow
def test_the_baselines_train_straight_to_s3_and_by_hand(radosgw: Any, tmp_path: Path) -> None:  # noqa: F811
    """ckptio.save straight to S3, s3torchconnector's DCP layer and the hand-rolled ladder: each a train row with
    the object tier's figures, its restores verified, nothing left behind."""
    ctx = RunContext(directory=tmp_path, file_size=4 * MiB)
    direct = run(case_of("tiered", tiers=["s3"], bucket="gdsbench-tiers-direct"), ctx).figures
    s3torch = run(case_of("s3torch_dcp", threads=2, transfer="CPU_ONLY", bucket="gdsbench-tiers-s3t"), ctx).figures
    by_hand = run(case_of("dcp_upload", threads=2, transfer="CPU_CACHED", bucket="gdsbench-tiers-hand"), ctx).figures
    for row in (direct, s3torch):
        assert row["work_at_risk_steps"] == 2 and row["restore_object_seconds"] > 0 and row["bytes_on_disk"] > 4 * MiB
        assert row["durable_object_seconds"] >= row["stall_seconds"] * 0.5 and "durable_local_seconds" not in row
    assert by_hand["durable_object_seconds"] > by_hand["durable_local_seconds"] > 0
    assert by_hand["restore_object_seconds"] > 0 and by_hand["restore_local_seconds"] > 0
    ctx.resources.cleanup()
    for name in ("gdsbench-tiers-direct", "gdsbench-tiers-s3t", "gdsbench-tiers-hand"):
        assert leftovers(name, tmp_path) == ([], {})


# -- the report's two-level model -------------------------------------------------------------------------------


def test_two_level_goodput_by_hand() -> None:
    # C 10 s; M_l = M_n = 2 h, so M = 1 h. Local: R 20 s, lag 0; S3: R 60 s, lag 30 s. P = (20 + 90) / 2 = 55 s.
    # tau = 261.703 s (Daly at C 10 s, M 1 h: test_train); e^(55/3600) = 1.0153951, e^(271.703/3600) - 1 = 0.0783942,
    # 3600 x 1.0153951 x 0.0783942 = 286.564; 261.703 / 286.564 = 0.913245
    local, remote = model.Level(20, 0), model.Level(60, 30)
    assert model.penalty([(model.PROCESS, local), (model.CORRELATED, remote)], (7200, 7200)) == pytest.approx(55)
    interval, value = model.two_level(10, local, remote, 7200, 7200)
    assert interval == pytest.approx(261.703, abs=1e-3) and value == pytest.approx(0.913245, abs=1e-6)
    # one tier (S3 only): every failure pays 90 s; e^(90/3600) = 1.0253151, x 3600 x 0.0783942 = 289.363 -> 0.904409
    assert model.two_level(10, None, remote, 7200, 7200)[1] == pytest.approx(0.904409, abs=1e-6)
    assert math.isnan(model.two_level(10, local, None, 7200, 7200)[1])  # no copy survives a node loss


def test_without_node_losses_the_ladder_is_dalys_model_with_the_local_restore() -> None:
    local, remote = model.Level(30, 0), model.Level(600, 300)
    _, value = model.two_level(10, local, remote, 3600, 1e15)
    assert value == pytest.approx(goodput.goodput(goodput.daly_interval(10, 3600), 10, 30, 3600), rel=1e-9)
    assert model.lag(2.5, 0.5) == 2.0 and model.lag(0.4, 0.5) == 0.0  # a blocking save's copy: no lag


def test_one_failure_level_per_tier_by_hand() -> None:
    # [memory, peer, s3]: C 10 s; M_p = M_n = M_c = 3 h, so M = 1 h. Memory: R 5 s, lag 0; peer: R 15 s, lag 5 s;
    # S3: R 60 s, lag 30 s. A process lost reads memory (5), a node lost the peer (20), several nodes S3 (90):
    # P = (5 + 20 + 90) / 3 = 38.333 s; tau = 261.703 s (C 10 s, M 1 h); e^(38.333/3600) = 1.0107050,
    # 3600 x 1.0107050 x 0.0783942 = 285.240; 261.703 / 285.240 = 0.917483
    memory, peer, s3 = model.Level(5, 0), model.Level(15, 5), model.Level(60, 30)
    chain = [(model.PROCESS, memory), (model.NODE, peer), (model.CORRELATED, s3)]
    three = (3 * 3600.0,) * 3
    assert model.penalty(chain, three) == pytest.approx(115 / 3)
    interval, value = model.by_level(10, chain, three)
    assert interval == pytest.approx(261.703, abs=1e-3) and value == pytest.approx(0.917483, abs=1e-6)
    # [memory, peer] with correlated failures modelled: nothing outlives them, no goodput; not modelled: the
    # two levels alone (P = (5 + 20) / 2 at M_p = M_n = 2 h)
    assert math.isnan(model.by_level(10, chain[:2], three)[1])
    two = model.by_level(10, chain[:2], (7200.0, 7200.0, math.inf))[1]
    assert two == pytest.approx(goodput.goodput(goodput.daly_interval(10, 3600), 10, 12.5, 3600), rel=1e-9)
    # [local, s3] is issue 33's two-level model: a node lost and several nodes lost both read S3
    local, remote = model.Level(20, 0), model.Level(60, 30)
    pair = [(model.PROCESS, local), (model.CORRELATED, remote)]
    assert model.by_level(10, pair, (7200.0, 7200.0, math.inf)) == model.two_level(10, local, remote, 7200, 7200)
    assert model.penalty(pair, (7200.0, 14400.0, 14400.0)) == pytest.approx(55)


def ladder_rows() -> pd.DataFrame:
    """Train rows as the tiered engine and s3torch_dcp write them, and one with no ladder figures (fastpersist)."""
    from tests.test_report import row

    def one(engine: str, stall: float, **ladder: float | None) -> dict[str, Any]:
        return row(
            engine=engine,
            pattern="train",
            io_size=None,
            stall_seconds=stall,
            checkpoint_cost_seconds=stall,
            slowdown=0.0,
            restore_seconds=1.0,
            **ladder,
        )

    return pd.DataFrame(
        [
            one(
                "tiered",
                0.1,
                durable_local_seconds=0.1,
                durable_object_seconds=30.1,
                restore_local_seconds=20.0,
                restore_object_seconds=60.0,
                work_at_risk_steps=20.0,
            ),
            one("s3torch_dcp", 10.0, durable_object_seconds=10.0, restore_object_seconds=60.0, work_at_risk_steps=10.0),
            one("fastpersist", 0.2),
        ]
    )


def test_the_report_puts_the_ladder_beside_its_baseline_at_each_failure_pair() -> None:
    from gdsbench.report import summary

    table = summary.build(
        ladder_rows(), ["engine", "pattern"], {"mtbf_local": (7200.0,), "mtbf_node": (7200.0,)}
    ).table("ladder")
    assert table is not None and table.title == model.TITLE
    cells = [dict(zip(table.header, r)) for r in table.rows]
    # tiered: C 0.1 s, P = (20 + 60 + 30) / 2 = 55 s; s3torch_dcp: C 10 s, P = 60 s (one tier, lag 0)
    tiered = model.two_level(0.1, model.Level(20, 0), model.Level(60, 30), 7200, 7200)[1]
    direct = model.two_level(10, None, model.Level(60, 0), 7200, 7200)[1]
    assert [(c["engine"], c["tiers"], c["mtbf local"], c["at risk"], c["goodput"]) for c in cells] == [
        ("tiered", "local+s3", "2h", "20", f"{tiered:.4%}"),
        ("s3torch_dcp", "s3", "2h", "10", f"{direct:.4%}"),
    ]


def test_the_report_restores_each_failure_level_from_the_nearest_tier_that_outlives_it() -> None:
    from gdsbench.report import summary
    from tests.test_report import row

    def peers(tiers: str, **far: float) -> dict[str, Any]:
        figures = {"durable_local_seconds": 0.1, "durable_peer_seconds": 5.1, "restore_local_seconds": 5.0}
        return row(
            engine="tiered_ranks",
            pattern="train",
            io_size=None,
            tiers=tiers,
            stall_seconds=0.1,
            checkpoint_cost_seconds=10.0,
            restore_peer_seconds=15.0,
            **figures,
            **far,
        )

    frame = pd.DataFrame(
        [
            peers("memory+peer+s3", durable_object_seconds=30.1, restore_object_seconds=60.0),
            peers("memory+peer"),
            peers("memory+peer+local", durable_disk_seconds=2.1, restore_disk_seconds=4.0),
        ]
    )
    settings = {"mtbf_local": (10800.0,), "mtbf_node": (10800.0,), "mtbf_correlated": (10800.0,)}
    table = summary.build(frame, ["engine", "tiers"], settings).table("ladder")
    assert table is not None
    cells = {c["tiers"]: c for c in (dict(zip(table.header, r)) for r in table.rows)}
    chain = [
        (model.PROCESS, model.Level(5, 0)),
        (model.NODE, model.Level(15, 5)),
        (model.CORRELATED, model.Level(60, 30)),
    ]
    assert cells["memory+peer+s3"]["goodput"] == f"{model.by_level(10, chain, (10800.0,) * 3)[1]:.4%}"
    assert cells["memory+peer+s3"]["mtbf correlated"] == goodput.duration_text(10800.0)
    assert cells["memory+peer"]["goodput"] == "-"  # several nodes lost: no copy outlives them
    assert cells["memory+peer+local"]["goodput"] == "-"  # the local folder goes with its node too
    assert cells["memory+peer+local"]["restore disk s"] == "4.00"


def test_report_mtbf_local_and_node_take_durations_and_refuse_others(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gdsbench.cli import cli

    local, node, correlated = (setting.parse for setting in model.SETTINGS)
    assert model.levels_of({"mtbf_local": local("1h,24h")}) == (
        (3600.0, model.DEFAULT_MTBF_NODE, math.inf),
        (86400.0, model.DEFAULT_MTBF_NODE, math.inf),
    )
    assert model.levels_of({"mtbf_node": node("7d")}) == ((model.DEFAULT_MTBF_LOCAL, 604800.0, math.inf),)
    assert model.levels_of({"mtbf_correlated": correlated("90d")}) == (
        (model.DEFAULT_MTBF_LOCAL, model.DEFAULT_MTBF_NODE, 90 * 86400.0),
    )
    csv = tmp_path / "rows.csv"
    csv.write_text("x\n")
    result = CliRunner().invoke(cli, ["report", str(csv), "--mtbf-node", "often"])
    assert_exits(result, 2, one_line_error=True)
    assert "--mtbf-node: expected durations such as 24h,7d (got 'often')" in result.output


CORRUPT = "tier 0 step 20: checksum mismatch in 'w'"
REFUSED = "PutObject failed (no answer): CONNECTION_REFUSED"


def test_the_report_shows_each_fault_row_s_expectation_and_outcome() -> None:
    """One row per fault case: what it must do, ok or the failed row's reason, the tier restored, exact, what it
    found; cases without a fault are not in it."""
    from gdsbench.report import faults
    from gdsbench.report.derived import Inputs

    def faulted(fault: str, status: str = "ok", **more: Any) -> dict[str, Any]:
        expected = tier_faults.EXPECTED.get(fault)
        base = {"engine": "tiered", "pattern": "train", "fault": fault, "status": status, "repetition": 1}
        return {**base, "fault_expected": expected, **more}

    frame = pd.DataFrame(
        [
            faulted("none"),
            faulted("corrupt_local", restored_tier="s3", state_exact="yes", skipped_reason=CORRUPT, ckptio_warnings=1),
            faulted("store_down", restored_tier="local", state_exact="yes", drain_error=REFUSED, ckptio_warnings=4),
            faulted("kill_upload", kills_made=20.0, kills_in_upload=11.0, torn_seen=0.0, uploads_left=0.0),
            faulted("lose_local", status="failed", error="tiered: restore read step 15 from tier 0"),
        ]
    )
    table = faults.TABLE.build(Inputs(frame, {}), {}).table
    assert table is not None and table.title == faults.TITLE
    cells = {r[1]: dict(zip(table.header, r)) for r in table.rows}
    assert list(cells) == ["corrupt_local", "store_down", "kill_upload", "lose_local"]  # none: not a fault
    assert cells["corrupt_local"]["found"].startswith("tier 0 step 20: checksum mismatch")
    assert (cells["store_down"]["restored"], cells["store_down"]["warnings"]) == ("local", "4")
    assert cells["kill_upload"]["found"] == "20 kills made, 11 kills in upload, 0 torn seen, 0 uploads left"
    assert cells["lose_local"]["held"] == "FAILED: tiered: restore read step 15 from tier 0"
    assert cells["corrupt_local"]["expected"] == tier_faults.EXPECTED["corrupt_local"]


def test_ckptio_s_warnings_are_kept_for_the_row_not_printed(capfd: pytest.CaptureFixture[str]) -> None:
    import logging

    with tier_faults.ckptio_warnings() as said:
        logging.getLogger("ckptio").warning("tier %d (%s) step %d skipped: %s", 0, "/x", 3, "checksum mismatch")
    assert said == ["tier 0 (/x) step 3 skipped: checksum mismatch"] and capfd.readouterr().err == ""
    assert tier_faults.warnings_note("corrupt_local", said) == (
        "ckptio warned 1 time(s), expected for fault corrupt_local: tier 0 (/x) step 3 skipped: checksum mismatch"
    )
    assert (
        "unexpected" in str(tier_faults.warnings_note("none", said)) and tier_faults.warnings_note("none", []) is None
    )


def test_a_memory_tier_trains_restores_exactly_and_leaves_nothing_in_ram(tmp_path: Path) -> None:
    """tiers [memory]: the near tier a private folder in /dev/shm (ckptio's memory:// place), durable there, the
    restore from it exact; its rows say it is RAM (no page cache to set) and the folder is gone after the run."""
    from gdsbench.runners.checkpoint import tiered

    before = set(tiered.SHM.glob("gdsbench-tiers.*"))
    ctx = RunContext(directory=tmp_path, file_size=4 * MiB)
    case = case_of("tiered", tiers=["memory"], transfer="CPU_CACHED", **{"async": True})
    measured = run(case, ctx)
    row = measured.figures
    assert row["durable_local_seconds"] > 0 and row["restore_local_seconds"] > 0 and "durable_object_seconds" not in row
    assert "near-tier restore from memory (the tier is RAM: no page cache to set), verified" in str(measured.note)
    assert "memory:///dev/shm/gdsbench-tiers.*/" in get("tiered").command(case, ctx)
    assert set(tiered.SHM.glob("gdsbench-tiers.*")) == before
    assert "O_DIRECT has no meaning" in str(get("tiered").unavailable(case_of("tiered", tiers=["memory"]), ctx))


def test_the_report_names_the_near_tier_its_rows_name() -> None:
    """A ladder whose rows say tiers memory+s3 is named so (its local level the memory copy's: both go with the
    node); one whose rows carry no tiers is the local ladder, as before."""
    from gdsbench.report import summary

    rows = ladder_rows()
    rows.loc[rows["engine"] == "tiered", "tiers"] = "memory+s3"
    table = summary.build(rows, ["engine", "pattern"]).table("ladder")
    assert table is not None
    named = {dict(zip(table.header, r))["engine"]: dict(zip(table.header, r))["tiers"] for r in table.rows}
    assert named["s3torch_dcp"] == "s3" and any(v == "memory+s3" for k, v in named.items() if k.startswith("tiered"))
    assert "durable near s" in table.header


@pytest.mark.slow
def test_a_memory_ladder_drains_to_s3_and_restores_from_each_tier(radosgw: Any, tmp_path: Path) -> None:  # noqa: F811
    """tiers [memory, s3]: durable in RAM, then in S3; the object restore (the memory copies removed) exact."""
    ctx = RunContext(directory=tmp_path, file_size=4 * MiB)
    case = case_of("tiered", tiers=["memory", "s3"], transfer="CPU_CACHED", bucket="gdsbench-tiers-memory")
    row = run(case, ctx).figures
    assert row["durable_object_seconds"] >= row["durable_local_seconds"] > 0
    assert row["restore_local_seconds"] > 0 and row["restore_object_seconds"] > 0 and row["work_at_risk_steps"] >= 2
    ctx.resources.cleanup()
    assert leftovers("gdsbench-tiers-memory", tmp_path) == ([], {})


@pytest.mark.slow
def test_a_memory_only_exit_is_refused_then_persisted(radosgw: Any, tmp_path: Path) -> None:  # noqa: F811
    """tiers [memory, s3], exit_unpersisted: the exit after a save S3 never got raises NotDurable; the restarted job
    persists the step from RAM and it restores from S3, exactly."""
    ctx = RunContext(directory=tmp_path, file_size=4 * MiB)
    case = case_of(
        "tiered", tiers=["memory", "s3"], transfer="CPU_CACHED", fault="exit_unpersisted", bucket="gdsbench-tiers-exit"
    )
    row = run(case, ctx).figures
    assert "is not durable in the farthest tier" in row["exit_refused"] and "tier 1 (s3://" in row["exit_refused"]
    assert (row["restored_tier"], row["state_exact"]) == ("s3", "yes")
    ctx.resources.cleanup()
    assert leftovers("gdsbench-tiers-exit", tmp_path) == ([], {})


def test_loop_vs_memory_holds_a_row_to_the_ram_alone_row_of_the_same_loop_only() -> None:
    """A ladder's loop over the [memory] row of its own loop (engine, bytes, steps; any fault or transfer), never one
    of another checkpoint size in the same run: there it has no reference (NaN), not a wrong one."""
    loop = "engine=tiered_ranks,pattern=train,transfer=CPU_CACHED,checkpoint_size={size},steps=5,tiers={tiers}"
    rows = [
        ("memory", 8, "none", 2.0),
        ("memory+peer", 8, "none", 2.5),
        ("memory+peer", 8, "corrupt_peer", 3.0),
        ("memory+peer", 128, "kill_replicating", 9.0),
    ]
    found = pd.DataFrame(
        {
            "run_id": "r",
            "host": "h",
            "tiers": tiers,
            "case": loop.format(size=size << 20, tiers=tiers) + f",peer_fault={fault}",
            "loop_seconds": seconds,
        }
        for tiers, size, fault, seconds in rows
    )
    ratios = model.with_memory_reference(found)["loop_vs_memory"].tolist()
    assert ratios[:3] == [1.0, 1.25, 1.5] and math.isnan(ratios[3])
    assert model.loop_of("engine=tiered,transfer=CPU_ONLY,tiers=local+s3,fault=none,kills=3,steps=5") == (
        "engine=tiered,steps=5"
    )
