"""Loads into existing memory: chunks land straight in the destination where the device takes its address
(verified there, no copy), through staging otherwise; destinations are faulted in ahead without a byte of
theirs written."""

from __future__ import annotations

import mmap
import os
import pathlib

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckptio import IOOptions, Reader, Writer, load_into, save
from ckptio.backends import posix
from ckptio.dcp.metadata import read_metadata
from ckptio.errors import CorruptCheckpoint
from ckptio.inspect import read_index
from ckptio.memory import PAGE, address_of, populate_within
from torch.distributed.checkpoint.api import CheckpointException

from .test_format import _flip as flip

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CHUNK = 64 << 10
OPTIONS = IOOptions(threads=2, chunk_bytes=CHUNK, buffer_bytes=4 * CHUNK)
N = 5 * CHUNK // 4  # float32 elements: five chunks of bytes


def weights() -> dict[str, torch.Tensor]:
    return {"w": torch.randn(N, generator=torch.Generator().manual_seed(7))}


def destination(shift: int) -> tuple[dict[str, torch.Tensor], mmap.mmap]:
    """A zeroed float32 destination at `shift` bytes past a page boundary (0: page-aligned)."""
    mm = mmap.mmap(-1, N * 4 + PAGE)
    return {"w": torch.frombuffer(mm, dtype=torch.float32, count=N, offset=shift)}, mm


def test_the_device_says_how_aligned_memory_must_be(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * PAGE)
    fd = os.open(path, os.O_RDONLY)
    try:
        align = posix.dio_memory_alignment(fd)
    finally:
        os.close(fd)
    assert 1 <= align <= PAGE and align & (align - 1) == 0
    assert posix.BUFFERED.open(str(path), OPTIONS, None).memory_alignment == 1


@pytest.mark.parametrize("shift", [0, 64])
def test_load_into_reads_in_place_where_the_address_allows_and_verifies_there(
    tmp_path: pathlib.Path, shift: int
) -> None:
    """A corrupt chunk is refused either way; read in place (page-aligned) its bytes are in the tensor when
    the error comes, through staging (an address O_DIRECT refuses) they never reach it."""
    path, saved = tmp_path / "c.pt", weights()
    save(saved, path, options=OPTIONS)
    dest, _mm = destination(shift)
    load_into(path, dest, options=OPTIONS)
    assert torch.equal(dest["w"], saved["w"])
    entry = next(s for s in read_index(path).storages if s.name == "w")
    flip(path, entry.offset + CHUNK + 10)  # chunk 1
    dest["w"].zero_()
    with pytest.raises(CorruptCheckpoint, match="w"):
        load_into(path, dest, options=OPTIONS)
    landed = dest["w"].view(torch.uint8)[CHUNK : 2 * CHUNK]
    assert bool(landed.any()) is (shift == 0)


@pytest.mark.parametrize("shift", [0, 64])
def test_dcp_reader_reads_in_place_where_the_address_allows_and_verifies_there(
    tmp_path: pathlib.Path, shift: int
) -> None:
    saved = weights()
    dcp.save(saved, storage_writer=Writer(tmp_path, options=OPTIONS), no_dist=True)
    dest, _mm = destination(shift)
    dcp.load(dest, storage_reader=Reader(tmp_path, options=OPTIONS), no_dist=True)
    assert torch.equal(dest["w"], saved["w"])
    [record] = [r for i, r in read_metadata(tmp_path).storage_data.items() if i.fqn == "w"]
    offset, _ = record.chunks[1]
    flip(tmp_path / record.file, offset + 10)
    dest["w"].zero_()
    with pytest.raises(CheckpointException) as info:
        dcp.load(dest, storage_reader=Reader(tmp_path, options=OPTIONS), no_dist=True)
    assert isinstance(info.value.failures[0][0], CorruptCheckpoint)
    assert bool(dest["w"].view(torch.uint8)[CHUNK : 2 * CHUNK].any()) is (shift == 0)


def test_faulting_in_a_destination_writes_none_of_its_bytes() -> None:
    """Whole pages inside the range are populated; its data, its neighbours and a read-only mapping stay as
    they were (no memset fallback on the caller's memory)."""
    mm = mmap.mmap(-1, 8 * PAGE)
    mm[:] = bytes(range(256)) * (8 * PAGE // 256)
    before = bytes(mm)
    populate_within(address_of(mm) + 100, 6 * PAGE)
    assert bytes(mm) == before
    readonly = mmap.mmap(-1, 4 * PAGE, prot=mmap.PROT_READ)
    populate_within(torch.frombuffer(readonly, dtype=torch.uint8).data_ptr(), 4 * PAGE)  # refused, not written
    assert bytes(readonly) == bytes(4 * PAGE)
