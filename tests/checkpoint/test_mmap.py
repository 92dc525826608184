"""load_mmap: tensors are copy-on-write views of the file, faulted in and verified up front."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch
from ckptio import Checkpointer, IOOptions, load, load_mmap, save
from ckptio.errors import CorruptCheckpoint, OptionError, TruncatedCheckpoint
from ckptio.inspect import read_index

from .conftest import assert_same, random_tensor


def _state() -> dict:
    """Views, shared storages, empties, scalars, a multi-chunk storage and metadata."""
    base = random_tensor((64, 33), torch.float32, 1)
    return {
        "base": base,
        "t": base.t(),
        "row": base[5],
        "empty": torch.empty(0, 3, dtype=torch.bfloat16),
        "scalar": torch.tensor(7, dtype=torch.int64),
        "big": random_tensor((5 << 20,), torch.bfloat16, 2)[3:],
        "flags": random_tensor((1001,), torch.bool, 3),
        "meta": {"step": 12, "name": "run"},
    }


@pytest.fixture
def saved(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict]:
    path = tmp_path / "c.pt"
    sd = _state()
    save(
        sd, path, options=IOOptions(chunk_bytes=1 << 20, buffer_bytes=4 << 20)
    )  # several checksum chunks per large storage
    return path, sd


@pytest.mark.parametrize("threads", [1, 3, 8])
def test_mmap_round_trip_is_bit_exact_and_keeps_sharing(saved: tuple[pathlib.Path, dict], threads: int) -> None:
    path, sd = saved
    out = load_mmap(path, options=IOOptions(threads=threads))
    assert_same(sd, out)
    assert out["t"].untyped_storage().data_ptr() == out["base"].untyped_storage().data_ptr()


def test_mmap_tensors_are_copy_on_write(saved: tuple[pathlib.Path, dict]) -> None:
    """Writing to a loaded tensor changes memory, never the file."""
    path, sd = saved
    before = path.read_bytes()
    out = load_mmap(path)
    out["base"][5, 0] = 99.0
    assert out["row"][0].item() == 99.0  # written to memory (shared storage), not to the file
    assert path.read_bytes() == before
    assert_same(sd, load(path))


def test_mmap_detects_corruption_and_verify_false_skips_it(saved: tuple[pathlib.Path, dict]) -> None:
    path, sd = saved
    entry = next(s for s in read_index(path).storages if s.name == "big")
    with open(path, "r+b") as f:
        f.seek(entry.offset + (3 << 20) + 17)  # inside the fourth 1 MiB chunk
        f.write(b"\xff\xfe")
    with pytest.raises(CorruptCheckpoint) as info:
        load_mmap(path)
    assert info.value.tensor == "big" and str(path) in str(info.value)
    assert not torch.equal(load_mmap(path, verify=False)["big"], sd["big"])


def test_mmap_of_a_truncated_file_raises(saved: tuple[pathlib.Path, dict]) -> None:
    path, _ = saved
    os.truncate(path, path.stat().st_size // 2)
    with pytest.raises(TruncatedCheckpoint):
        load_mmap(path)


@pytest.mark.parametrize("backend", ["direct", "gds"])
def test_mmap_refuses_backends_that_bypass_the_page_cache(saved: tuple[pathlib.Path, dict], backend: str) -> None:
    path, _ = saved
    with pytest.raises(OptionError, match="load_mmap reads through the page cache"):
        load_mmap(path, options=IOOptions(backend=backend))


def test_mmap_survives_the_file_being_replaced(saved: tuple[pathlib.Path, dict]) -> None:
    """A save (recycling or not) replaces the name, never the mapped generation's bytes."""
    path, sd = saved
    out = load_mmap(path)
    with Checkpointer(path, recycle=True) as ckpt:
        for tag in range(3):
            ckpt.save({"tag": tag, "w": random_tensor((3 << 20,), torch.uint8, tag)})
    assert_same(sd, out)
    assert load(path)["tag"] == 2


def test_mmap_of_a_state_without_data(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "e.pt"
    sd = {"empty": torch.empty(0), "n": 3}
    save(sd, path)
    assert_same(sd, load_mmap(path))
