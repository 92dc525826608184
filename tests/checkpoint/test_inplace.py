"""load(into=...): existing tensors receive the data in place, verified, and the rest loads as usual."""

from __future__ import annotations

import pytest
import torch

from gdsbench.checkpoint import CorruptCheckpoint, load, read_index, save


def state():
    torch.manual_seed(1)
    return {
        "big": torch.randn(5000, 4000, dtype=torch.bfloat16),  # 40 MB: three 16 MiB checksum chunks
        "layers": [{"w": torch.randn(1000, 700), "b": torch.randn(700)} for _ in range(3)],
        "i8": torch.randint(-100, 100, (5000,), dtype=torch.int8),
        "step": 7,
    }


def test_tensors_are_filled_in_place_and_returned(tmp_path):
    path = tmp_path / "c.pt"
    saved = state()
    save(saved, path)
    into = {"big": torch.zeros_like(saved["big"]), "layers": [{"w": torch.zeros(1000, 700)} for _ in range(3)]}
    addresses = [into["big"].data_ptr()] + [layer["w"].data_ptr() for layer in into["layers"]]
    out = load(path, into=into)
    assert torch.equal(into["big"], saved["big"]) and all(
        torch.equal(a["w"], b["w"]) for a, b in zip(into["layers"], saved["layers"])
    )
    assert [out["big"].data_ptr()] + [layer["w"].data_ptr() for layer in out["layers"]] == addresses
    assert torch.equal(out["layers"][1]["b"], saved["layers"][1]["b"]) and out["step"] == 7  # not in `into`
    assert torch.equal(out["i8"], saved["i8"])


def test_mismatched_tensors_are_left_alone(tmp_path):
    path = tmp_path / "c.pt"
    saved = state()
    save(saved, path)
    wrong_dtype = torch.zeros(5000, 4000, dtype=torch.float16)
    strided = torch.zeros(4000, 5000, dtype=torch.bfloat16).t()
    for candidate in (wrong_dtype, strided, torch.zeros(10, dtype=torch.bfloat16)):
        out = load(path, into={"big": candidate})
        assert torch.equal(out["big"], saved["big"]) and not candidate.any()
        assert out["big"].data_ptr() != candidate.data_ptr()


def test_corruption_is_detected_before_it_reaches_the_tensor(tmp_path):
    path = tmp_path / "c.pt"
    saved = state()
    save(saved, path)
    entry = next(s for s in read_index(path).storages if s.name == "big")
    with open(path, "r+b") as f:
        f.seek(entry.offset + 12345)
        byte = f.read(1)
        f.seek(entry.offset + 12345)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptCheckpoint, match="big"):
        load(path, into={"big": torch.zeros_like(saved["big"])})
    out = load(path, into={"big": torch.zeros_like(saved["big"])}, verify=False)
    assert not torch.equal(out["big"], saved["big"])
