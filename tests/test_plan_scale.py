"""benchmarks/plan_scale.py: the CSV it writes, the model's faithfulness to real gloo runs, the validation."""

from __future__ import annotations

import csv
import dataclasses
import gc
import inspect
import pickle
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.needs_torch, pytest.mark.needs_odirect]


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    """The benchmark freezes the heap (gc.freeze) before each phase; the test process gets it back after."""
    yield
    gc.unfreeze()


@pytest.fixture(scope="module")
def ps() -> Any:
    """The benchmark's package (benchmarks/ is a directory of scripts, imported as a namespace package)."""
    from benchmarks import planscale

    return planscale


@pytest.fixture(scope="module")
def model_csv(ps: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, str]], list[str], Path]:
    """The model at 2 and 5 ranks, both engines, two repetitions (at 5 the model keeps only sampled peers' plans
    after the first load, as at scale): its CSV rows, header and plot."""
    out = tmp_path_factory.mktemp("plan-scale")
    args = [
        "--world-sizes",
        "2,5",
        "--reps",
        "2",
        "--layers",
        "2",
        "--csv",
        str(out / "p.csv"),
        "--plot",
        str(out / "p.png"),
    ]
    assert ps.main([*args, "--dir", str(out)]) == 0
    with open(out / "p.csv", newline="") as f:
        header = next(csv.reader(f))
    with open(out / "p.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, header, out


def test_csv_has_the_exact_columns_and_one_row_per_size_engine_and_phase(ps: Any, model_csv: Any) -> None:
    rows, header, out = model_csv
    assert header == ["world_size", "engine", "phase", "seconds", "metadata_bytes"]
    keys = [(r["world_size"], r["engine"], r["phase"]) for r in rows]
    assert sorted(keys) == sorted((w, e, p) for w in ("2", "5") for e in ps.ENGINES for p in ps.PHASES)
    assert all(float(r["seconds"]) > 0 and int(r["metadata_bytes"]) > 0 for r in rows)
    assert (out / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in out.iterdir() if p.name.startswith("plan-scale-")]  # checkpoints removed


def test_metadata_grows_with_world_size(model_csv: Any) -> None:
    rows, _, _ = model_csv
    size = {(r["world_size"], r["engine"], r["phase"]): int(r["metadata_bytes"]) for r in rows}
    for (world, engine, phase), nbytes in size.items():
        if world == "2":
            assert size[("5", engine, phase)] > nbytes


def test_the_check_of_the_peers_refuses_a_plan_the_real_planner_would_not_make(ps: Any) -> None:
    import torch
    from torch.distributed.checkpoint import DefaultSavePlanner

    specs = ps.model_specs()[:4]
    wrong = [ps.Spec(s.name, s.shape, torch.float16) for s in specs]
    with ps.fake_group(4, 1) as mesh:
        planner = DefaultSavePlanner()
        planner.set_up_planner(ps.dtensor_state(specs, mesh, 4, 1), None, False)
        real = planner.create_local_plan()
    ps.check_equal(real, ps.Peers("dcp", 4, specs).save_plan(1), "right")
    with pytest.raises(AssertionError, match="model mismatch"):
        ps.check_equal(real, ps.Peers("dcp", 4, wrong).save_plan(1), "wrong")


def test_the_timer_keeps_the_signatures_dcp_inspects(ps: Any, tmp_path: Path) -> None:
    from torch.distributed.checkpoint import DefaultSavePlanner

    planner, writer, timer = DefaultSavePlanner(), ps.make_writer("dcp_fast", tmp_path), ps.Timer()
    timer.watch(planner)
    timer.watch(writer)
    assert "storage_meta" in inspect.signature(planner.set_up_planner).parameters
    assert "kwargs" in inspect.signature(writer.set_up_storage_writer).parameters
    writer.prepare_local_plan(ps.Peers("dcp_fast", 2, ps.model_specs(2)).save_plan(0))
    assert timer.take()["seconds"] > 0


def plans(blob: bytes) -> list[Any]:
    """Pickled plans, each load plan's commit (the seal of the checkpoint its rank read) as its length: the real
    and the modelled runs save different checkpoints."""
    return [
        dataclasses.replace(p, storage_data=len(p.storage_data)) if isinstance(p.storage_data, bytes) else p
        for p in pickle.loads(blob)
    ]


@pytest.mark.slow
def test_the_model_hands_rank_0_what_a_real_two_rank_gloo_run_does(ps: Any, tmp_path: Path) -> None:
    setup = ps.Setup(tmp_path / "real", ("dcp_fast",), reps=1, layers=2)
    real = ps.real_run(2, setup, capture=True)["dcp_fast"]["captured"]
    peers = ps.Peers("dcp_fast", 2, ps.model_specs(2))
    timer = ps.Timer()
    timer.capture = True
    with ps.fake_group(2) as mesh, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = ps.dtensor_state(peers.specs, mesh, 2, 0)
        with ps.modelled(peers):
            ps.sequence("dcp_fast", state, tmp_path / "model", timer, peers)
    model = timer.captured
    assert set(real) == set(model) == {"save_plans", "cached_plans", "load_plans", "metadata"}
    for key in ("save_plans", "cached_plans", "load_plans"):  # what create_global_plan got, rank by rank
        assert plans(model[key]) == plans(real[key])
    got, want = pickle.loads(model["metadata"]), pickle.loads(real["metadata"])
    assert got.state_dict_metadata == want.state_dict_metadata and got.planner_data == want.planner_data
    assert got.storage_data.keys() == want.storage_data.keys()
    for index, record in want.storage_data.items():  # the same records but for save ids and checksums
        same = ("nbytes", "dtype", "shape", "codec", "chunk_bytes", "chunks", "checksum", "format")
        assert all(getattr(got.storage_data[index], f) == getattr(record, f) for f in same)
    assert abs(len(model["metadata"]) - len(real["metadata"])) < 100  # checkpoint paths differ in length


@pytest.mark.slow
def test_validation_against_real_gloo_runs_at_two_ranks(
    ps: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "validate.csv"
    args = ["--validate", "2", "--engines", "dcp", "--reps", "1", "--layers", "2", "--csv", str(out)]
    assert ps.main([*args, "--dir", str(tmp_path)]) == 0
    with open(out, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["world_size"], r["engine"], r["phase"]) for r in rows] == [("2", "dcp", p) for p in ps.PHASES]
    assert all(float(r["cpu_ratio"]) > 0 and float(r["wall_ratio"]) > 0 for r in rows)
    assert all(0.98 < float(r["metadata_ratio"]) < 1.02 for r in rows)
    assert "model within 2x of the real runs: planning CPU time" in capsys.readouterr().out
