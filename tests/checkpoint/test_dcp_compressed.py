"""Compressed DCP saves (dcp/encode.py): chunks encoded on every writer thread, however few staging buffers,
and stored so that they decode bit-exact and a damaged chunk is refused."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

pytest.importorskip("blosc2", reason="ckptio's codecs are not installed: pip install 'ckptio[codecs]'")
import torch
import torch.distributed.checkpoint as dcp
from ckptio import IOOptions, Reader, Writer, backends, codec, integrity
from ckptio.codec import Buffer, CodecError
from ckptio.dcp.encode import _encoded_piece, prepare, staging_bytes, write_items
from ckptio.dcp.records import ItemRecord
from ckptio.errors import StorageFull
from ckptio.memory import StagingBuffers
from torch.distributed.checkpoint.api import CheckpointException

from tests.helpers import mounted

from .conftest import random_tensor

pytestmark = pytest.mark.needs_torch

OPTIONS = IOOptions(chunk_bytes=64 << 10, buffer_bytes=256 << 10, threads=2, backend="buffered")


class PairedCodec:
    """blosc, except that its first two encodes wait for each other: they return only if two run at once."""

    name = "paired"

    def __init__(self) -> None:
        self.inner = codec.get("blosc")
        self.descriptor = self.inner.descriptor
        self._calls = itertools.count()
        self._pair = threading.Barrier(2, timeout=10)  # a deadlock guard, not a timing

    def encode(self, data: Buffer, itemsize: int) -> Buffer:
        """blosc's encoding, after the partner encode has started (first two calls only)."""
        if next(self._calls) < 2:
            self._pair.wait()
        return self.inner.encode(data, itemsize)

    def decode(self, data: Buffer, nbytes: int, itemsize: int) -> Buffer:
        return self.inner.decode(data, nbytes, itemsize)

    def decode_into(self, data: Buffer, out: memoryview, itemsize: int) -> None:
        self.inner.decode_into(data, out, itemsize)


def tensors() -> list[torch.Tensor]:
    """Weights-like bf16 and fp32 tensors of several chunks each, and one smaller than a chunk."""
    g = torch.Generator().manual_seed(0)
    return [
        (torch.randn(100_000, generator=g) * 0.02).bfloat16(),
        torch.randn(50_000, generator=g),
        random_tensor((3000,), torch.int64, 1),
    ]


def decoded(path: Path, record: ItemRecord, itemsize: int) -> bytes:
    """An item's raw bytes read back from its file: every chunk's digest checked, then decoded alone."""
    data = path.read_bytes()
    c = codec.from_descriptor(record.codec)
    parts = []
    for k, (offset, length) in enumerate(record.chunks):
        stored = memoryview(data)[offset : offset + length]
        if integrity.ALGORITHMS[record.checksum][1](stored) != record.digests[k]:
            raise AssertionError(f"chunk {k} does not match its digest")
        parts.append(bytes(c.decode(stored, min(record.chunk_bytes, record.nbytes - k * record.chunk_bytes), itemsize)))
    return b"".join(parts)


def write(path: Path, ts: list[torch.Tensor], c: object, buffers: int, threads: int = 2) -> list[ItemRecord]:
    """write_items of `ts` with codec `c` on `threads` workers through `buffers` staging buffers."""
    items = [prepare(None, t) for t in ts]
    with StagingBuffers(buffers, staging_bytes(OPTIONS.chunk_bytes)) as staging:
        options = OPTIONS.with_(threads=threads)
        return write_items(backends.open_writer(str(path), options, staging), path.name, items, options, c, "xxh3")


def test_chunks_encode_on_every_thread_while_one_staging_buffer_exists(tmp_path: Path) -> None:
    """Encoding holds no staging buffer: two chunks encode at once with one buffer, and decode bit-exact."""
    ts = tensors()
    records = write(tmp_path / "r0.data", ts, PairedCodec(), buffers=1)
    assert [decoded(tmp_path / "r0.data", r, t.element_size()) for r, t in zip(records, ts)] == [
        t.view(torch.uint8).numpy().tobytes() for t in ts
    ]


class ExpandingCodec(PairedCodec):
    """blosc's chunk followed by twice the raw chunk in zero bytes: more than a staging buffer holds."""

    def encode(self, data: Buffer, itemsize: int) -> Buffer:
        return bytes(self.inner.encode(data, itemsize)) + bytes(2 * memoryview(data).nbytes)


def test_an_encoded_chunk_larger_than_its_staging_buffer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CodecError, match="does not fit its"):
        write(tmp_path / "r0.data", [torch.randn(50_000)], ExpandingCodec(), buffers=2)


def test_a_chunk_encodes_in_fill_where_the_writer_skipped_prepare() -> None:
    """A backend that never calls `prepare` still stores the encoded chunk (fill encodes), never nothing."""
    t = (torch.randn(20_000, generator=torch.Generator().manual_seed(1)) * 0.02).bfloat16()
    item = prepare(None, t)
    item.chunks, item.digests = [(0, 0)], [""]
    c = codec.get("blosc")
    piece = _encoded_piece(item, 0, OPTIONS.chunk_bytes, c, None)
    with StagingBuffers(1, staging_bytes(OPTIONS.chunk_bytes)) as staging, staging.lend() as buf:
        stored = bytes(piece.fill(buf))
    encoded = bytes(c.encode(t.view(torch.uint8).numpy(), 2))
    assert stored[: len(encoded)] == encoded and not any(stored[len(encoded) :]) and len(stored) % 4096 == 0


def test_chunks_appended_by_an_unaligned_writer_stay_aligned_and_load(tmp_path: Path) -> None:
    """Encoded chunks are padded to 4 KiB whatever the writer's alignment (buffered I/O here, the O_DIRECT
    fallback, an object): each lands at an aligned offset, as the format requires, and the checkpoint loads."""
    sd = {"w": torch.randn(100_000, generator=torch.Generator().manual_seed(2)), "z": torch.zeros(50_000)}
    dcp.save(sd, storage_writer=Writer(tmp_path / "ckpt", options=OPTIONS, compression="blosc"), no_dist=True)
    out = {k: torch.ones_like(v) for k, v in sd.items()}
    dcp.load(out, storage_reader=Reader(tmp_path / "ckpt", options=OPTIONS), no_dist=True)
    assert all(torch.equal(out[k], v) for k, v in sd.items())


@pytest.mark.needs_root
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_compressed_save_that_runs_out_of_space_is_refused_and_removed(tmp_path: Path) -> None:
    """An appended chunk's write fails (ENOSPC) on a writer's background thread: the save raises StorageFull
    and its data file is gone."""
    with mounted(tmp_path / "small", "tmpfs", "-o", "size=1m") as small:
        writer = Writer(small / "ckpt", options=OPTIONS, compression="blosc")
        with pytest.raises(CheckpointException) as info:  # random bits: 4 MB stored, more than the 1 MiB
            dcp.save({"w": random_tensor((1 << 20,), torch.int32, 2)}, storage_writer=writer, no_dist=True)
        error = info.value.failures[0][0] if isinstance(info.value, CheckpointException) else info.value
        assert isinstance(error, StorageFull) and str(small / "ckpt") in str(error)
        assert [p.name for p in (small / "ckpt").iterdir() if p.suffix == ".data"] == []


def test_the_largest_chunks_are_encoded_and_appended_first(tmp_path: Path) -> None:
    """Longest first: a save ends on its smallest chunks (no worker idles while another encodes a big one), so a
    full chunk of the last item lies before the first item's small one in the file."""
    small, big = random_tensor((1000,), torch.float32, 3), random_tensor((40_000,), torch.float32, 4)  # 4 KB, 160 KB
    first, last = write(tmp_path / "r0.data", [small, big], codec.get("blosc"), buffers=1, threads=1)
    assert max(offset for offset, _ in last.chunks[:2]) < first.chunks[0][0]
