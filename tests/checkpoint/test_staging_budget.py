"""IOOptions.buffer_bytes bounds the staging memory of every save and load path, measured as the buffers
actually made (one rule: ckptio.memory.staging_slots)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckptio import Checkpointer, IOOptions, Reader, Writer, load, load_into, memory, save
from ckptio.dcp.encode import staging_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

MiB = 1 << 20
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def record(monkeypatch: pytest.MonkeyPatch) -> list[memory.StagingBuffers]:
    """Every set of staging buffers made from now on (real buffers, recorded as they are made)."""
    sets: list[memory.StagingBuffers] = []
    real = memory.StagingBuffers

    class Recorded(real):  # type: ignore[misc,valid-type]
        def __init__(self, count: int, nbytes: int) -> None:
            super().__init__(count, nbytes)
            sets.append(self)

    monkeypatch.setattr(memory, "StagingBuffers", Recorded)
    return sets


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[memory.StagingBuffers]]:
    yield record(monkeypatch)


def peak(sets: list[memory.StagingBuffers]) -> int:
    """The most staging memory any one set held at once."""
    return max(s.peak_bytes for s in sets)


def model(nbytes: int) -> dict[str, torch.Tensor]:
    return {"a": torch.randn(nbytes // 8), "b": torch.randn(nbytes // 8)}


def test_load_into_stays_within_the_budget_of_a_file_with_larger_chunks(tmp_path: Path, made: list) -> None:
    """The reproduction: saved with 16 MiB chunks, loaded with a 4 MiB budget (1 MiB chunks asked for)
    staged 4 x 16 MiB = 64 MiB; one 16 MiB chunk is the least that works."""
    sd = model(64 * MiB)
    save(sd, tmp_path / "x.pt", options=IOOptions(chunk_bytes=16 * MiB, buffer_bytes=64 * MiB))
    made.clear()
    out = load_into(
        tmp_path / "x.pt",
        {k: torch.zeros_like(v) for k, v in sd.items()},
        options=IOOptions(buffer_bytes=4 * MiB, chunk_bytes=1 * MiB),
    )
    assert torch.equal(out["a"], sd["a"])
    assert peak(made) == 16 * MiB


@settings(max_examples=12, deadline=None)
@given(chunk_pages=st.integers(1, 64), budget_pages=st.integers(1, 300))
def test_every_single_file_path_honours_the_budget(
    tmp_path_factory: pytest.TempPathFactory, chunk_pages: int, budget_pages: int
) -> None:
    chunk, budget = chunk_pages * 4096 * 4, budget_pages * 4096 * 4
    limit = max(budget // chunk, 1) * chunk
    path = tmp_path_factory.mktemp("budget") / "x.pt"
    options = IOOptions(chunk_bytes=chunk, buffer_bytes=max(budget, chunk), threads=3)
    with pytest.MonkeyPatch.context() as mp:
        sets = record(mp)
        sd = model(2 * MiB)
        save(sd, path, options=options)
        load_into(path, {k: torch.zeros_like(v) for k, v in sd.items()}, options=options)
        load(path, options=options)
        with Checkpointer(path, options=options) as ckpt:
            ckpt.save(sd)
    assert sets and peak(sets) <= max(limit, chunk) <= max(budget, chunk)


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_dcp_writer_and_reader_honour_the_budget(tmp_path: Path, made: list, compression: str) -> None:
    chunk, budget = 256 << 10, 1 * MiB
    options = IOOptions(chunk_bytes=chunk, buffer_bytes=budget, threads=4)
    sd = model(8 * MiB)
    dcp.save(sd, storage_writer=Writer(tmp_path, options=options, compression=compression), no_dist=True)
    slot = chunk if compression == "none" else staging_bytes(chunk)
    assert peak(made) <= budget and made[-1].nbytes == slot
    made.clear()
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    dcp.load(out, storage_reader=Reader(tmp_path, options=options), no_dist=True)
    stored = max(n for r in Reader(tmp_path).read_metadata().storage_data.values() for _, n in r.chunks)
    # A load stages the largest chunk stored (4 KiB-aligned), never what a record merely declares.
    assert torch.equal(out["b"], sd["b"]) and peak(made) <= budget and made[-1].nbytes == -(-stored // 4096) * 4096


def test_the_rule() -> None:
    assert memory.staging_slots(64 * MiB, 16 * MiB) == 4
    assert memory.staging_slots(64 * MiB, 17 * MiB) == 3
    assert memory.staging_slots(4 * MiB, 16 * MiB) == 1
