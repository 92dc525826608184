"""Checkpoint workloads: seeded, never zeros, the dtype mix asked for, scaled to the size asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gdsbench import workloads
from gdsbench.workloads import PRESETS, WorkloadSpec

torch = pytest.importorskip("torch")
SMALL = 4 << 20


def test_same_seed_same_tensors_other_seed_other_values():
    first = workloads.generate(WorkloadSpec("llama3-8b", SMALL, "mixed", seed=7))
    again = workloads.generate(WorkloadSpec("llama3-8b", SMALL, "mixed", seed=7))
    other = workloads.generate(WorkloadSpec("llama3-8b", SMALL, "mixed", seed=8))
    assert list(first.tensors) == list(again.tensors) == list(other.tensors)
    assert all(torch.equal(first.tensors[k], again.tensors[k]) for k in first.tensors)
    assert not any(
        torch.equal(first.tensors[k], other.tensors[k]) for k in first.tensors if first.tensors[k].numel() > 1
    )


@pytest.mark.parametrize("preset", list(PRESETS))
def test_values_are_random_never_zero_and_shaped_like_the_model(preset):
    workload = workloads.generate(WorkloadSpec(preset, SMALL, "mixed", seed=0))
    for name, tensor in workload.tensors.items():
        assert int((tensor == 0).sum()) == 0, name
        if tensor.numel() > 1000:
            assert tensor.unique().numel() > 100, name  # not a constant fill
    matrices = [t for n, t in workload.tensors.items() if t.dim() >= 2 and "embed" not in n and "wte" not in n]
    assert matrices and abs(float(matrices[0].float().std()) - 0.02) < 0.002  # N(0, 0.02) like an initialised model
    assert workload.nbytes == sum(t.numel() * t.element_size() for t in workload.tensors.values())


def test_dtype_mixes():
    mixed = workloads.generate(WorkloadSpec("llama3-8b", SMALL, "mixed"))
    assert mixed.tensors["model.layers.0.self_attn.q_proj.weight"].dtype == torch.bfloat16
    assert mixed.tensors["model.layers.0.input_layernorm.weight"].dtype == torch.float32
    assert mixed.tensors["model.embed_tokens.weight"].dtype == torch.float32
    for dtype, expected in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
        tensors = workloads.generate(WorkloadSpec("resnet", SMALL, dtype)).tensors
        floats = {t.dtype for t in tensors.values() if t.is_floating_point()}
        assert floats == {expected}
        assert tensors["layers.0.bn.num_batches_tracked"].dtype == torch.int64
        assert int(tensors["layers.0.bn.num_batches_tracked"]) >= 1


def row_bytes(preset: workloads.Preset, plan: workloads.Layout, dtype: str) -> int:
    """Bytes one more embedding row adds: the granularity a layout can hit."""
    grown = {**plan.dims, preset.rows: plan.dims[preset.rows] + 1}
    return workloads.nbytes_of(preset.fixed, grown, dtype) - workloads.nbytes_of(preset.fixed, plan.dims, dtype)


@settings(max_examples=200, deadline=None)
@given(
    preset=st.sampled_from(list(PRESETS)),
    dtype=st.sampled_from(list(workloads.DTYPE_MIXES)),
    size=st.integers(min_value=1 << 20, max_value=64 << 30),
)
def test_layout_lands_within_one_row_below_the_requested_size(preset, dtype, size):
    plan = workloads.layout(PRESETS[preset], size, dtype)
    assert plan.layers >= 1
    assert 0 <= size - plan.nbytes < row_bytes(PRESETS[preset], plan, dtype)


def test_bigger_sizes_add_layers_at_the_reference_width():
    small = workloads.layout(PRESETS["gpt2-xl"], 4 << 30, "bf16")
    big = workloads.layout(PRESETS["gpt2-xl"], 8 << 30, "bf16")
    assert small.dims["h"] == big.dims["h"] == 1600 and big.layers > small.layers


def test_generated_bytes_match_the_layout():
    spec = WorkloadSpec("gpt2-xl", 3 << 20, "fp32", 1)
    assert workloads.generate(spec).nbytes == workloads.layout(PRESETS["gpt2-xl"], spec.size, "fp32").nbytes


def test_too_small_a_size_says_the_minimum():
    with pytest.raises(ValueError, match=r"too small for preset llama3-8b \(at least \d+ bytes\)"):
        workloads.layout(PRESETS["llama3-8b"], 1000, "bf16")


def test_source_is_a_preset_or_an_existing_state_dict_file(tmp_path):
    assert workloads.parse_source("gpt2-xl") == "gpt2-xl"
    good = tmp_path / "model.pt"
    good.write_bytes(b"x")
    assert workloads.parse_source(str(good)) == str(good)
    for bad in ("gpt3", str(tmp_path / "missing.pt"), str(tmp_path / "model.txt"), "", 5):
        with pytest.raises(ValueError):
            workloads.parse_source(bad)


def test_a_real_state_dict_file_is_flattened_into_unshared_copies(tmp_path):
    weight = torch.randn(64, 32)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": {"w": weight, "tied": weight}, "step": 3, "opt": [torch.ones(5, dtype=torch.float64)]}, path)
    workload = workloads.read_file(WorkloadSpec(str(path), 1))
    assert set(workload.tensors) == {"model.w", "model.tied", "opt.0"}
    assert torch.equal(workload.tensors["model.tied"], weight)
    assert (
        workload.tensors["model.w"].untyped_storage().data_ptr()
        != workload.tensors["model.tied"].untyped_storage().data_ptr()
    )
    assert workload.nbytes == 2 * 64 * 32 * 4 + 5 * 8


def test_one_workload_is_cached_at_a_time():
    workloads.release()
    a = workloads.get(WorkloadSpec("resnet", SMALL, "bf16"))
    assert workloads.get(WorkloadSpec("resnet", SMALL, "bf16")) is a
    workloads.get(WorkloadSpec("resnet", SMALL, "fp32"))
    assert list(workloads._CACHE) == [WorkloadSpec("resnet", SMALL, "fp32")]
    workloads.release()


def test_importing_workloads_and_the_runners_does_not_import_torch():
    code = "import sys, gdsbench.workloads, gdsbench.runners.checkpoint; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_workload_kind_answers_what_the_runners_ask_so_none_asks_which_it_is():
    """A preset, a state-dict file and an MLPerf geometry answer the same questions (workloads.Kind): whose tensors,
    how it is named and sized, why it cannot run, its bytes, which rank's checkpoint a rank loads."""
    from fractions import Fraction

    from gdsbench import mlperf

    preset, file, geometry = (workloads.kind(s) for s in ("gpt2-xl", "/data/model.safetensors", "mlperf-llama3-8b"))
    assert [(k.own_tensors, k.from_file, k.warmup_saves) for k in (preset, file, geometry)] == [
        (False, False, 1),
        (False, True, 1),
        (True, False, 0),
    ]
    assert [k.label(16 << 20, "bf16", 1 / 64) for k in (preset, file, geometry)] == [
        "gpt2-xl.16M.bf16",
        "model.16M.bf16",
        "mlperf-llama3-8b.x0.015625",
    ]
    assert geometry.words(1, "bf16", 0.5, 3) == ["scale=0.5", "checkpoints=3"]
    shape = mlperf.geometry("mlperf-llama3-8b", 8, Fraction(1, 64))
    assert geometry.facts(8, 1 / 64) == (shape.total_bytes(), shape.describe()) and preset.facts(8, 1.0) is None
    assert geometry.rank_tensors(3, 8, 1 / 64) == shape.rank_tensors(3) and preset.rank_tensors(3, 8, 1.0) is None
    assert (geometry.source_rank(1, 8, 4), preset.source_rank(1, 8, 4)) == (5, 1)
    assert preset.reason(8, 0.5, "replicated", True) == (
        "scale 0.5 shrinks the MLPerf geometries only; size a preset by checkpoint_size"
    )
    assert preset.reason(8, 1.0, "replicated", True) is None
    assert geometry.reason(8, 1.0, "sharded", True).startswith("train cases checkpoint a preset")
    assert geometry.reason(8, 1.0, "replicated", False).endswith("layout does not apply")
    assert "not 66" in workloads.kind("mlperf-llama3-70b").reason(66, 1.0, "sharded", False)
    assert geometry.reason(16, 1 / 64, "sharded", False) is None and preset.load_note(1, 1, "cold") == ""
