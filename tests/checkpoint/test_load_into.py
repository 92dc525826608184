"""load_into: a destination's tensors receive the saved data in place (or by copy where they cannot),
verified; mismatches raise naming the key path; only what is asked for is read."""

from __future__ import annotations

import pathlib

import pytest
import torch
from ckptio import Checkpointer, IOOptions, load_into, save
from ckptio.errors import CorruptCheckpoint, StateDictMismatch
from ckptio.inspect import named_tensors, read_index


def state() -> dict:
    torch.manual_seed(1)
    return {
        "big": torch.randn(5000, 4000, dtype=torch.bfloat16),  # 40 MB: three 16 MiB checksum chunks
        "layers": [{"w": torch.randn(1000, 700), "b": torch.randn(700)} for _ in range(3)],
        "i8": torch.randint(-100, 100, (5000,), dtype=torch.int8),
        "step": 7,
        "meta": {"lr": 0.1, "names": ["a", "b"]},
    }


def like(sd: dict) -> dict:
    """A zero-filled destination shaped like `sd` (as a freshly built model is), with other plain values."""
    return {
        "big": torch.zeros_like(sd["big"]),
        "layers": [{"w": torch.zeros(1000, 700), "b": torch.zeros(700)} for _ in range(3)],
        "i8": torch.zeros(5000, dtype=torch.int8),
        "step": 0,
        "meta": {"lr": 0.0, "names": ["x", "y"]},
    }


def test_tensors_are_filled_in_place_and_the_same_object_returned(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.pt"
    saved = state()
    save(saved, path)
    dest = like(saved)
    addresses = [t.data_ptr() for t in (dest["big"], *(layer["w"] for layer in dest["layers"]))]
    out = load_into(path, dest)
    assert out is dest
    assert torch.equal(dest["big"], saved["big"]) and torch.equal(dest["i8"], saved["i8"])
    assert all(torch.equal(a[k], b[k]) for a, b in zip(dest["layers"], saved["layers"]) for k in "wb")
    assert [t.data_ptr() for t in (dest["big"], *(layer["w"] for layer in dest["layers"]))] == addresses
    assert dest["step"] == 7 and dest["meta"] == {"lr": 0.1, "names": ["a", "b"]}  # plain values replaced


def test_a_partial_destination_reads_only_its_tensors(tmp_path: pathlib.Path) -> None:
    """Asking for one tensor reads that storage only: corruption elsewhere does not matter."""
    path = tmp_path / "c.pt"
    saved = state()
    save(saved, path)
    _flip(path, "big", 12345)
    dest = {"i8": torch.zeros(5000, dtype=torch.int8)}
    load_into(path, dest, strict=False)
    assert torch.equal(dest["i8"], saved["i8"])


def test_views_and_non_contiguous_destinations_are_filled_by_copy(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.pt"
    saved = state()
    save(saved, path)
    strided = torch.zeros(4000, 5000, dtype=torch.bfloat16).t()  # same shape, another layout
    backing = torch.zeros(2, 5000, dtype=torch.int8)
    dest = {"big": strided, "i8": backing[1]}  # a view into a bigger storage
    load_into(path, dest, strict=False)
    assert torch.equal(strided, saved["big"]) and torch.equal(backing[1], saved["i8"]) and not backing[0].any()


@pytest.mark.parametrize(
    ("dest", "problem"),
    [
        ({"big": torch.zeros(5000, 4000, dtype=torch.float16)}, "saved torch.bfloat16"),
        ({"big": torch.zeros(10, dtype=torch.bfloat16)}, r"\(5000, 4000\)"),
        ({"nope": torch.zeros(3)}, "no tensor with this key path"),
        ({"layers": [{"w": torch.zeros(1000, 700, device="meta")}]}, "only cpu and cuda"),
    ],
)
def test_mismatches_raise_naming_the_key_and_touch_nothing(tmp_path: pathlib.Path, dest: dict, problem: str) -> None:
    path = tmp_path / "c.pt"
    save(state(), path)
    with pytest.raises(StateDictMismatch, match=problem) as info:
        load_into(path, dest)
    assert info.value.tensor in ("big", "nope", "layers.0.w") and str(path) in str(info.value)
    for _, t in named_tensors(dest):
        assert t.device.type == "meta" or not t.any()


def test_corruption_is_detected_before_it_reaches_the_tensor(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.pt"
    saved = state()
    save(saved, path)
    _flip(path, "big", 12345)
    dest = {"big": torch.zeros_like(saved["big"])}
    with pytest.raises(CorruptCheckpoint, match="big"):
        load_into(path, dest, strict=False)
    load_into(path, dest, verify=False, strict=False)
    assert not torch.equal(dest["big"], saved["big"])


def test_checkpointer_reuses_its_staging_buffers(tmp_path: pathlib.Path) -> None:
    """Repeated load_into through one Checkpointer keeps one set of staging buffers (no new memory)."""
    saved = state()
    with Checkpointer(tmp_path / "c.pt", options=IOOptions(threads=2)) as ckpt:
        ckpt.save(saved)
        dest = like(saved)
        ckpt.load_into(dest)
        kept = ckpt._staging().get(4, 16 << 20)
        ckpt.load_into(dest)
        assert ckpt._staging().get(4, 16 << 20) is kept
        assert torch.equal(dest["big"], saved["big"]) and "in place" in ckpt.last.path_taken  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="closed"):
        ckpt.load_into(dest)


def adam(steps: int) -> dict:
    """A model's and its Adam optimizer's state dicts after `steps` steps (a fresh optimizer has no moments)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.randn(2, 8)).sum().backward()
        optimizer.step()
    return {"model": model.state_dict(), "optim": optimizer.state_dict()}


def test_a_fresh_optimizer_cannot_silently_drop_the_saved_moments(tmp_path: pathlib.Path) -> None:
    """Resuming into a fresh Adam (empty `state`) skipped exp_avg/exp_avg_sq without a word; now strict
    names them, before anything is written; strict=False keeps the old behaviour."""
    path = tmp_path / "c.pt"
    save(adam(steps=1), path)
    fresh = adam(steps=0)
    before = fresh["model"]["weight"].clone()
    with pytest.raises(StateDictMismatch, match=r"saved, not in the destination: optim\.state\.0\.exp_avg") as info:
        load_into(path, fresh)
    assert all(f"optim.state.{p}.{k}" in str(info.value) for p in (0, 1) for k in ("exp_avg", "exp_avg_sq", "step"))
    assert torch.equal(fresh["model"]["weight"], before)  # refused before anything was read
    load_into(path, fresh, strict=False)
    assert torch.equal(fresh["model"]["weight"], adam(steps=1)["model"]["weight"]) and fresh["optim"]["state"] == {}
    resumed = adam(steps=1)
    assert load_into(path, resumed) is resumed  # the same keys on both sides: strict loads


def test_strict_names_the_keys_only_one_side_has(tmp_path: pathlib.Path) -> None:
    """Empty lists and dicts count as keys; a destination key the checkpoint lacks is named too."""
    path = tmp_path / "c.pt"
    save({"w": torch.ones(3), "hooks": [], "extra": {}, "step": 5}, path)
    dest = {"w": torch.zeros(3), "step": 0, "epoch": 1}
    with pytest.raises(StateDictMismatch) as info:
        load_into(path, dest)
    message = str(info.value)
    assert "saved, not in the destination: extra, hooks" in message and "not saved: epoch" in message
    assert info.value.tensor == "extra" and "strict=False" in message
    assert not dest["w"].any() and dest["step"] == 0
    with Checkpointer(path) as ckpt:
        with pytest.raises(StateDictMismatch, match="epoch"):
            ckpt.load_into(dest)
        ckpt.load_into(dest, strict=False)
    assert torch.equal(dest["w"], torch.ones(3)) and dest == {"w": dest["w"], "step": 5, "epoch": 1}


def _flip(path: pathlib.Path, tensor: str, at: int) -> None:
    """Invert one byte of a tensor's stored data."""
    entry = next(s for s in read_index(path).storages if s.name == tensor)
    with open(path, "r+b") as f:
        f.seek(entry.offset + at)
        byte = f.read(1)
        f.seek(entry.offset + at)
        f.write(bytes([byte[0] ^ 0xFF]))
