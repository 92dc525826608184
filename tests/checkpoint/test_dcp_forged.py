"""Forged DCP checkpoints and a load racing saves (issue 29 items 6-8): chunks that overlap or leave a gap, byte
items declaring more bytes than are stored, and a save committing while a load plans. Each forgery re-seals the
metadata as an attacker would, and must end in a named CheckpointError before any allocation it declares."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckptio import CheckpointError, Reader, integrity
from ckptio.dcp import validate
from ckptio.dcp.metadata import read_metadata, seal
from ckptio.dcp.records import METADATA, SEAL_MAGIC, data_file
from ckptio.errors import InvalidCheckpoint
from torch.distributed.checkpoint import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex
from torch.distributed.checkpoint.planner import LoadPlan

from .test_dcp_trust import SMALL, committed, dcp_load, dcp_save, reseal, same, state

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# -- 6. chunks that overlap, or leave part of the tensor unread ---------------------------------------------


def forge_two_chunks(path: Path, rows: tuple[int, int], fmt: int) -> torch.Tensor:
    """Replace the saved 4x8 "w" by two 2x8 chunks starting at `rows`, each row block in a forged data file (as a
    forger writes one), digests right; sealed in format `fmt`. Returns the tensor the chunks describe."""
    w = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    dcp_save({"w": w}, path)
    metadata = committed(path)
    [record] = metadata.storage_data.values()
    name = data_file("f" * 32, 0)
    blocks = [w[r : r + 2].contiguous().view(torch.uint8).reshape(-1).numpy().tobytes() for r in rows]
    (path / name).write_bytes(blocks[0].ljust(4096, b"\0") + blocks[1])
    digest = integrity.digest_fn(record.checksum)
    assert digest is not None
    item = metadata.state_dict_metadata["w"]
    item.chunks = [ChunkStorageMetadata(torch.Size([r, 0]), torch.Size([2, 8])) for r in rows]
    metadata.storage_data = {
        MetadataIndex("w", [r, 0], k): dataclasses.replace(
            record, file=name, nbytes=64, shape=(2, 8), chunks=((4096 * k, 64),), digests=(digest(blocks[k]),)
        )
        for k, r in enumerate(rows)
    }
    payload = pickle.dumps(metadata, protocol=2)
    sealed = payload + SEAL_MAGIC + hashlib.sha256(payload).digest() if fmt == 2 else seal(metadata)
    (path / METADATA).write_bytes(sealed)
    return w


@pytest.mark.parametrize("fmt", [2, 3])
def test_overlapping_chunks_are_refused(tmp_path: Path, fmt: int) -> None:
    """Rows 0-1 and 1-2: the element counts add up to the tensor's, row 3 is never read (it loaded as zeros)."""
    forge_two_chunks(tmp_path / "ckpt", (0, 1), fmt)
    with pytest.raises(InvalidCheckpoint, match=r"'w': chunks \d and \d overlap"):
        dcp_load(tmp_path / "ckpt", {"w": torch.zeros(4, 8)})


def test_chunks_that_leave_a_gap_are_refused_in_format_2(tmp_path: Path) -> None:
    """Format 2 (a pickle) checked chunks inside the tensor but not that they cover it."""
    path = tmp_path / "ckpt"
    forge_two_chunks(path, (0, 2), 2)
    metadata = read_metadata(path)
    metadata.state_dict_metadata["w"].chunks.pop()
    metadata.storage_data = {i: r for i, r in metadata.storage_data.items() if i.offset[0] == 0}
    payload = pickle.dumps(metadata, protocol=2)
    (path / METADATA).write_bytes(payload + SEAL_MAGIC + hashlib.sha256(payload).digest())
    with pytest.raises(InvalidCheckpoint, match="'w': chunks hold 16 of its 32 elements"):
        dcp_load(path, {"w": torch.zeros(4, 8)})


@pytest.mark.parametrize("fmt", [2, 3])
def test_chunks_that_tile_the_tensor_still_load(tmp_path: Path, fmt: int) -> None:
    w = forge_two_chunks(tmp_path / "ckpt", (0, 2), fmt)
    assert torch.equal(dcp_load(tmp_path / "ckpt", {"w": torch.zeros(4, 8)})["w"], w)


@pytest.mark.parametrize(
    ("boxes", "problem"),
    [
        ([((0, 0), (4, 4)), ((0, 4), (4, 4)), ((4, 0), (4, 8))], ""),  # a grid cell split further: a brick layout
        ([((0, 0), (8, 8)), ((3, 3), (0, 5))], ""),  # an empty chunk holds no element
        ([((0, 0), (4, 8)), ((4, 0), (4, 4)), ((4, 4), (4, 4)), ((2, 6), (0, 2))], ""),
        ([((0, 0), (4, 8)), ((3, 0), (4, 4)), ((4, 4), (4, 4))], "chunks 0 and 1 overlap"),  # row 7 unread
        ([((0, 0), (4, 8)), ((4, 0), (4, 8)), ((4, 0), (4, 8))], "chunks hold 96 of its 64 elements"),
        ([((0, 0), (4, 4)), ((0, 4), (4, 4)), ((0, 0), (4, 8))], "chunks 0 and 2 overlap"),
    ],
)
def test_tiling_checks_any_layout(boxes: list[Any], problem: str) -> None:
    found = validate.tiling_problem([b[0] for b in boxes], [b[1] for b in boxes], (8, 8))
    assert found == problem


# -- 7. a byte item declaring more bytes than its file stores -------------------------------------------


@pytest.mark.parametrize(("declared", "chunk"), [(1 << 40, 1 << 30), (8 << 20, 1 << 20)])
def test_a_byte_item_larger_than_its_stored_bytes_is_refused_before_allocating(
    tmp_path: Path, declared: int, chunk: int
) -> None:
    """Chunks that all point at the same stored bytes of a sparse file: 1 TiB declared gave torch's allocator
    error, 8 MiB was allocated and read (1 GiB chunks over a 1 GiB file peaked at 9.5 GB)."""
    path = tmp_path / "ckpt"
    dcp_save(state(), path)

    def alias(metadata: Any) -> None:
        [(index, record)] = [(i, r) for i, r in metadata.storage_data.items() if i.fqn == "step"]
        count = declared // chunk
        name = data_file("e" * 32, 0)
        with open(path / name, "wb") as f:
            f.truncate(chunk)  # sparse: no byte of it is stored on disk
        digest = integrity.digest_fn(record.checksum)
        assert digest is not None
        metadata.storage_data[index] = dataclasses.replace(
            record,
            file=name,
            nbytes=declared,
            chunk_bytes=chunk,
            chunks=((0, chunk),) * count,
            digests=(digest(bytes(chunk)) if chunk < 1 << 24 else record.digests[0],) * count,
        )

    reseal(path, alias)
    with pytest.raises(InvalidCheckpoint, match=f"'step': {declared} bytes declared, {chunk} stored"):
        dcp_load(path, state())


# -- 8. a load racing saves to the same folder -----------------------------------------------------------


class SaveWhilePlanning(DefaultLoadPlanner):
    """A planner that lets a save commit (and remove the files it replaces) between the load's reading of
    `.metadata` and its planning: the window in which a concurrent save made 2 of 187 loads fail."""

    def __init__(self, path: Path, seed: int) -> None:
        super().__init__()
        self.path, self.seed = path, seed

    def set_up_planner(self, *args: Any, **kwargs: Any) -> None:
        dcp_save(state(self.seed), self.path)
        super().set_up_planner(*args, **kwargs)


def test_a_save_committing_during_a_load_leaves_the_load_whole(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    dcp_save(state(1), path)
    out = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else v for k, v in state().items()}
    dcp.load(out, storage_reader=Reader(path, options=SMALL), planner=SaveWhilePlanning(path, 2), no_dist=True)
    assert same(out, state(1))  # the checkpoint read when the load began, whole
    assert same(dcp_load(path, state()), state(2))


def test_loads_during_repeated_saves_each_get_one_whole_checkpoint(tmp_path: Path) -> None:
    """Saves in a loop in one thread, loads in another for 1.5 s: every load succeeds with one saved version."""
    path = tmp_path / "ckpt"
    dcp_save(state(0), path)
    stop = threading.Event()

    def saver() -> None:
        seed = 1
        while not stop.is_set():
            dcp_save(state(seed % 5), path)
            seed += 1

    thread = threading.Thread(target=saver)
    thread.start()
    loads, deadline = 0, time.monotonic() + 1.5
    try:
        while time.monotonic() < deadline:
            out = dcp_load(path, state())
            assert same(out, state(out["step"])), f"load {loads} mixed saves"
            loads += 1
    finally:
        stop.set()
        thread.join()
    assert loads > 5


def test_ranks_that_read_different_commits_are_refused(tmp_path: Path) -> None:
    """At several ranks each reads `.metadata` itself: two ranks that read different commits would load a mix, so
    the coordinator refuses the plans (a CheckpointError every rank gets through DCP)."""
    path = tmp_path / "ckpt"
    dcp_save(state(1), path)
    readers = [Reader(path) for _ in range(2)]
    plans = []
    for k, reader in enumerate(readers):
        if k:
            dcp_save(state(2), path)
        reader.set_up_storage_reader(reader.read_metadata(), k == 0, rank=k)
        plans.append(reader.prepare_local_plan(LoadPlan([])))
    with pytest.raises(CheckpointError, match="ranks read different commits"):
        readers[0].prepare_global_plan(plans)
    assert readers[0].prepare_global_plan([plans[0], plans[0]]) == [LoadPlan([]), LoadPlan([])]


def test_a_byte_item_that_asks_for_a_bare_sized_bytearray_is_refused_before_allocating() -> None:
    """A DCP byte item's pickle of ~30 bytes calling bytearray(100_000_000) allocated and zeroed it (512 MB at the
    peak, then saved it again for the planner); it is refused as the single-file loads refuse it."""
    import io
    import tracemalloc
    import zipfile

    from ckptio.dcp.objects import loadable_bytes

    saved = io.BytesIO()
    torch.save(bytearray(b"x"), saved)
    bomb = b"\x80\x02cbuiltins\nbytearray\nJ\x00\xe1\xf5\x05\x85R."  # bytearray(100_000_000)
    forged = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(saved.getvalue())) as src, zipfile.ZipFile(forged, "w") as out:
        for name in src.namelist():
            out.writestr(name, bomb if name.endswith("data.pkl") else src.read(name))
    tracemalloc.start()
    try:
        with pytest.raises(InvalidCheckpoint, match="'step'"):
            loadable_bytes(forged.getvalue(), "step", "/ckpt")
        assert tracemalloc.get_traced_memory()[1] < 10_000_000
    finally:
        tracemalloc.stop()
