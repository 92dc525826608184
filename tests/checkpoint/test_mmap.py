"""load_mmap: tensors are copy-on-write views of the file, faulted in and verified up front."""

from __future__ import annotations

import faulthandler
import os
import pathlib
import shutil
import signal

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


def test_mmap_views_share_the_file_with_in_place_writers(tmp_path: pathlib.Path) -> None:
    """The documented contract (lib/ckptio/docs/api.md): ckptio's own saves replace the name and leave mapped views
    alone; a writer that changes the file in place changes what the views show, after they were verified:
    an overwrite every page the caller has not written to, a `cp` over it (truncate, then write) every page."""
    path, other = tmp_path / "c.pt", tmp_path / "other.pt"
    save({"w": torch.ones(1 << 20)}, path)
    save({"w": torch.full((1 << 20,), 2.0)}, other)
    out = load_mmap(path)
    out["w"][0] = 7.0  # this page is now the caller's own copy
    save({"w": torch.full((1 << 20,), 3.0)}, path)  # replaced by rename: the views keep generation 1
    assert out["w"][0].item() == 7.0 and out["w"][1 << 19].item() == 1.0 and out["w"][-1].item() == 1.0
    out = load_mmap(path)
    out["w"][0] = 7.0
    with open(path, "r+b") as f:  # overwritten in place, same length
        f.write(other.read_bytes())
    assert out["w"][0].item() == 7.0 and out["w"][1 << 19].item() == 2.0 and out["w"][-1].item() == 2.0
    save({"w": torch.ones(1 << 20)}, path)
    out = load_mmap(path)
    out["w"][0] = 7.0
    shutil.copyfile(other, path)  # as `cp` does: the truncation drops even the caller's own pages
    assert out["w"][0].item() == 2.0 and out["w"][1 << 19].item() == 2.0


def test_mmap_views_of_a_file_truncated_under_them_die_with_sigbus(tmp_path: pathlib.Path) -> None:
    """Truncating the file under its views is not survivable: the next access to a page past the new end
    kills the process with SIGBUS (lib/ckptio/docs/api.md says so; ckptio itself never truncates a checkpoint)."""
    path = tmp_path / "c.pt"
    save({"w": torch.ones(1 << 20)}, path)
    out = load_mmap(path)
    child = os.fork()
    if child == 0:  # pragma: no cover (the child dies)
        faulthandler.disable()
        os.truncate(path, 0)
        out["w"].numpy()[-1].item()
        os._exit(0)
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS


def test_mmap_of_a_state_without_data(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "e.pt"
    sd = {"empty": torch.empty(0), "n": 3}
    save(sd, path)
    assert_same(sd, load_mmap(path))
