"""The DCP storage layer in one process: bit-exact round trips (every codec), damage refused with the file
and tensor named, safe metadata, atomic overwrites, and async saves (one in flight, failures surfaced)."""

from __future__ import annotations

import copy
import os
import pickle
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckptio import IOOptions, Reader, Writer
from ckptio.dcp.metadata import read_metadata
from ckptio.errors import CorruptCheckpoint, InvalidCheckpoint, TruncatedCheckpoint
from torch.distributed.checkpoint.api import CheckpointException

from tests.helpers import kill_when_busy, mounted

from .conftest import random_tensor

SMALL = IOOptions(chunk_bytes=64 << 10, buffer_bytes=256 << 10, threads=3)
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def state() -> dict:
    """Every dtype the issue names and more, sizes around the chunk, empty and 0-d tensors, plain values."""
    return {
        "bf16": random_tensor((300, 257), torch.bfloat16, 1),
        "fp16": random_tensor((1000,), torch.float16, 2),
        "fp32": torch.randn(70_000, generator=torch.Generator().manual_seed(3)),
        "i64": random_tensor((5000,), torch.int64, 4),
        "u8": random_tensor((65536,), torch.uint8, 5),
        "bool": random_tensor((77,), torch.bool, 6),
        "empty": torch.empty(0, 3, dtype=torch.bfloat16),
        "scalar": torch.tensor(2.5),
        "step": 41,
        "meta": {"lr": 1e-4, "names": ["a", "b"]},
    }


def zeros(value: object) -> object:
    """A destination shaped like `value`: tensors zero-filled, plain values reset, containers kept."""
    if isinstance(value, torch.Tensor):
        return torch.zeros_like(value)
    if isinstance(value, dict):
        return {k: zeros(v) for k, v in value.items()}
    if isinstance(value, list):
        return [zeros(v) for v in value]
    return type(value)()


def save(sd: dict, path: Path, compression: str = "none", **kw: object) -> Writer:
    writer = Writer(path, compression=compression, options=SMALL, **kw)  # type: ignore[arg-type]
    dcp.save(sd, storage_writer=writer, no_dist=True)
    return writer


def load(path: Path, sd: dict | None = None) -> dict:
    out: dict = zeros(sd or state())  # type: ignore[assignment]
    dcp.load(out, storage_reader=Reader(path, options=SMALL), no_dist=True)
    return out


def raised(info: pytest.ExceptionInfo) -> BaseException:
    """Our error inside DCP's CheckpointException (DCP wraps every rank's failure)."""
    error = info.value
    return error.failures[0][0] if isinstance(error, CheckpointException) else error


def assert_bits(a: dict, b: dict) -> None:
    for k, v in b.items():
        if isinstance(v, torch.Tensor):
            assert a[k].dtype == v.dtype and a[k].shape == v.shape, k
            assert a[k].reshape(-1).view(torch.uint8).tolist() == v.reshape(-1).view(torch.uint8).tolist(), k
        else:
            assert a[k] == v, k


@pytest.mark.parametrize("compression", ["none", "zstd", "blosc", "blosc-fast"])
def test_round_trip_is_bit_exact_for_every_dtype_and_codec(tmp_path: Path, compression: str) -> None:
    sd = state()
    writer = save(sd, tmp_path / "ckpt", compression)
    assert_bits(load(tmp_path / "ckpt"), sd)
    raw = sum(v.numel() * v.element_size() for v in sd.values() if isinstance(v, torch.Tensor))
    assert writer.stats.raw_bytes >= raw  # DCP's pickled plain values come on top
    if compression != "none":
        assert writer.stats.stored_bytes < writer.stats.raw_bytes


def test_compression_records_what_it_saved_per_item(tmp_path: Path) -> None:
    """bf16 weights of N(0, 0.02) shrink by about a third with the float codec (byte shuffle + zstd)."""
    weights = {"w": (torch.randn(4096, 1024, generator=torch.Generator().manual_seed(0)) * 0.02).bfloat16()}
    save(weights, tmp_path / "ckpt", "blosc")
    [record] = [r for r in read_metadata(tmp_path / "ckpt").storage_data.values() if r.dtype == "bfloat16"]
    assert record.codec.startswith("blosc2/") and 0.6 < record.stored_bytes / record.nbytes < 0.75


@pytest.mark.parametrize("compression", ["none", "blosc"])
def test_a_flipped_byte_is_refused_naming_file_and_tensor(tmp_path: Path, compression: str) -> None:
    sd = state()
    save(sd, tmp_path / "ckpt", compression)
    record = next(r for i, r in read_metadata(tmp_path / "ckpt").storage_data.items() if i.fqn == "fp32")
    offset, length = record.chunks[-1]
    data = tmp_path / "ckpt" / record.file
    with open(data, "r+b") as f:
        f.seek(offset + length // 2)
        byte = f.read(1)
        f.seek(offset + length // 2)
        f.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(CheckpointException) as info:
        load(tmp_path / "ckpt")
    error = raised(info)
    assert isinstance(error, CorruptCheckpoint) and error.tensor == "fp32" and error.path == str(data)


def test_a_cut_data_file_is_refused(tmp_path: Path) -> None:
    sd = state()
    save(sd, tmp_path / "ckpt")
    [data] = [p for p in (tmp_path / "ckpt").iterdir() if p.suffix == ".data"]
    os.truncate(data, data.stat().st_size // 2)
    with pytest.raises(CheckpointException) as info:
        load(tmp_path / "ckpt")
    error = raised(info)
    assert isinstance(error, (TruncatedCheckpoint, CorruptCheckpoint)) and str(data) in str(error)


def test_hostile_metadata_is_never_unpickled(tmp_path: Path) -> None:
    """DCP's own reader pickle.loads .metadata; ours refuses anything but DCP's metadata classes."""
    save(state(), tmp_path / "ckpt")
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(os.system, protocol=2))
    for problem in ("weights-only unpickler: Trying to load unsupported GLOBAL posix.system", "not a committed"):
        with pytest.raises(CheckpointException) as info:
            load(tmp_path / "ckpt")
        assert problem in str(raised(info))  # DCP re-raises a metadata failure as its own AssertionError
        (tmp_path / "ckpt" / ".metadata").unlink(missing_ok=True)
    with pytest.raises(InvalidCheckpoint, match="not DCP metadata"):
        read_metadata_of(pickle.dumps({"not": "metadata"}, protocol=2), tmp_path)


def read_metadata_of(data: bytes, tmp_path: Path) -> object:
    """read_metadata of a directory whose .metadata holds `data`."""
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ".metadata").write_bytes(data)
    return read_metadata(tmp_path / "other")


def test_overwrites_write_new_files_and_remove_only_their_own(tmp_path: Path) -> None:
    """Each save writes files of its own name; after the commit the previous save's are gone (and a dead
    save's metadata temp file), anything else in the directory is left alone."""
    path = tmp_path / "ckpt"
    save(state(), path)
    first = {p.name for p in path.iterdir() if p.suffix == ".data"}
    (path / "notes.txt").write_text("mine")
    (path / f".metadata.{'ab' * 16}.tmp").write_bytes(b"a save killed while committing")
    second = state()
    second["step"] = 42
    save(second, path)
    names = {p.name for p in path.iterdir()}
    assert not first & names and "notes.txt" in names and len([n for n in names if n.endswith(".data")]) == 1
    assert not [n for n in names if n.endswith(".tmp")]
    assert load(path)["step"] == 42


CHILD = """
import sys, warnings, torch
warnings.simplefilter("ignore")
import torch.distributed.checkpoint as dcp
from ckptio import Writer, IOOptions
path, mode = sys.argv[1], sys.argv[2]
writer = Writer(path, options=IOOptions(chunk_bytes=1 << 20, buffer_bytes=4 << 20, threads=2))
states = [{"tag": t, "w": torch.full((6 << 20,), float(t))} for t in (1, 2)]
ready()
i = 0
while True:
    s = states[i % 2]
    if mode == "async":
        dcp.async_save(s, storage_writer=writer, no_dist=True).result()
    else:
        dcp.save(s, storage_writer=writer, no_dist=True)
    i += 1
"""


@pytest.mark.timeout(180)
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("seed", range(3))
def test_a_killed_save_leaves_the_previous_checkpoint_loadable(tmp_path: Path, mode: str, seed: int) -> None:
    """SIGKILL a process re-saving (overwriting) one checkpoint at a random moment: the directory always
    loads whole and bit-exact as one committed generation; the next save cleans up after the dead one."""
    path = tmp_path / "ckpt"
    save({"tag": 0, "w": torch.full((6 << 20,), 0.0)}, path)
    kill_when_busy(CHILD, [str(path), mode], seed, (0.2, 2.0))
    out = {"tag": None, "w": torch.zeros(6 << 20)}
    dcp.load(out, storage_reader=Reader(path), no_dist=True)
    assert out["tag"] in (0, 1, 2) and torch.equal(out["w"], torch.full((6 << 20,), float(out["tag"])))
    save({"tag": 3, "w": torch.full((6 << 20,), 3.0)}, path)
    assert len([p for p in path.iterdir() if p.suffix == ".data"]) == 1  # the dead save's files removed
    assert not [p for p in path.iterdir() if p.name.endswith(".tmp")]


class SlowWriter(Writer):
    """A Writer whose writes take a while and leave a trace of when they started and ended."""

    def __init__(self, *args: object, trace: list, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.trace = trace

    def _write(self, plan, planner):  # type: ignore[no-untyped-def]
        self.trace.append(("write start", time.monotonic()))
        time.sleep(0.5)
        try:
            return super()._write(plan, planner)
        finally:
            self.trace.append(("write end", time.monotonic()))

    def stage(self, state_dict):  # type: ignore[no-untyped-def]
        staged = super().stage(state_dict)
        self.trace.append(("staged", time.monotonic()))
        return staged


def test_async_saves_keep_one_in_flight_and_reuse_their_buffers(tmp_path: Path) -> None:
    """The second async save stages only once the first one's data is written; both commit; the staged
    copy is the same memory both times."""
    trace: list = []
    writer = SlowWriter(tmp_path / "ckpt", options=SMALL, trace=trace)
    sd = state()
    first = dcp.async_save(sd, storage_writer=writer, no_dist=True)
    kept = writer._local["staged"]["fp32"].data_ptr()
    second = dcp.async_save({**sd, "step": 99}, storage_writer=writer, no_dist=True)
    first.result()
    second.result()
    events = [name for name, _ in trace]
    assert events == ["staged", "write start", "write end", "staged", "write start", "write end"]
    assert writer._local["staged"]["fp32"].data_ptr() == kept
    assert load(tmp_path / "ckpt")["step"] == 99


def test_an_async_save_stages_an_exact_copy_the_caller_may_change_at_once(tmp_path: Path) -> None:
    """What async_save returns after is a copy: every dtype, a strided view, a tensor larger than one copy job,
    tensors in a list; the caller zeroing every tensor and changing every value right after (the write starts
    0.5 s later) changes nothing saved: the checkpoint loads bit-exact as it was at the call."""
    sd = state() | {
        "big": torch.randn(5 << 20, generator=torch.Generator().manual_seed(8)),  # 20 MiB: more than one job
        "view": random_tensor((64, 50), torch.float32, 9)[:, ::3],
        "layers": [random_tensor((100,), torch.float32, 10), random_tensor((3, 4), torch.bfloat16, 11)],
    }
    expected = copy.deepcopy(sd)
    writer = SlowWriter(tmp_path / "ckpt", options=SMALL, trace=[])
    future = dcp.async_save(sd, storage_writer=writer, no_dist=True)
    for value in [*sd.values(), *sd["layers"]]:
        if isinstance(value, torch.Tensor):
            value.zero_()
    sd["meta"]["names"].append("c")
    sd["layers"].append(torch.ones(1))
    future.result()
    out = load(tmp_path / "ckpt", expected)
    assert_bits(out | {"layers": None}, expected | {"layers": None})
    assert [t.tolist() for t in out["layers"]] == [t.tolist() for t in expected["layers"]]


def test_an_async_save_may_add_a_plain_value_beside_the_same_tensors(tmp_path: Path) -> None:
    """The staging buffers depend on the tensors only: a later save with one more plain value reuses them
    (torch's companion copy refused a changed key set) and saves the new value; a tensor of a new shape
    gets new buffers."""
    writer = Writer(tmp_path / "ckpt", options=SMALL)
    sd = {"w": torch.arange(10.0)}
    dcp.async_save(sd, storage_writer=writer, no_dist=True).result()
    kept = writer._local["staged"]["w"].data_ptr()
    dcp.async_save({**sd, "epoch": 3}, storage_writer=writer, no_dist=True).result()
    assert writer._local["staged"]["w"].data_ptr() == kept
    out = {"w": torch.zeros(10), "epoch": 0}
    dcp.load(out, storage_reader=Reader(tmp_path / "ckpt"), no_dist=True)
    assert out["epoch"] == 3 and torch.equal(out["w"], torch.arange(10.0))
    dcp.async_save({"w": torch.arange(12.0), "epoch": 4}, storage_writer=writer, no_dist=True).result()
    assert writer._local["staged"]["w"].shape == (12,)
    out = {"w": torch.zeros(12), "epoch": 0}
    dcp.load(out, storage_reader=Reader(tmp_path / "ckpt"), no_dist=True)
    assert out["epoch"] == 4 and torch.equal(out["w"], torch.arange(12.0))


@pytest.mark.needs_root
def test_a_failed_async_save_surfaces_on_its_future_and_on_the_next_save(tmp_path: Path) -> None:
    """A background save that runs out of space (a real 1 MiB tmpfs) fails its future; the next save
    says so instead of silently going on; the one after works again."""
    with mounted(tmp_path / "small", "tmpfs", "-o", "size=1m") as small:
        writer = Writer(small / "ckpt", options=SMALL)
        big = {"w": torch.zeros(1 << 20)}  # 4 MiB: more than the file system holds
        future = dcp.async_save(big, storage_writer=writer, no_dist=True)
        with pytest.raises(CheckpointException, match="no space left in"):
            future.result()
        with pytest.raises(RuntimeError, match="previous async save failed: StorageFull"):
            dcp.async_save({"w": torch.zeros(4)}, storage_writer=writer, no_dist=True)
        dcp.async_save({"w": torch.ones(4)}, storage_writer=writer, no_dist=True).result()
        out = {"w": torch.zeros(4)}
        dcp.load(out, storage_reader=Reader(small / "ckpt"), no_dist=True)
        assert torch.equal(out["w"], torch.ones(4))


def test_writer_is_picklable_for_the_process_executor(tmp_path: Path) -> None:
    """DCP's process executor sends the writer to a daemon: it must pickle without its buffers."""
    writer = Writer(tmp_path / "ckpt", compression="blosc", options=SMALL)
    writer.stage(state())
    copy = pickle.loads(pickle.dumps(writer))
    assert (copy.path, copy.compression, copy._local) == (writer.path, "blosc", {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state(), storage_writer=copy, no_dist=True)
    assert_bits(load(tmp_path / "ckpt"), state())


@pytest.mark.needs_cuda
@pytest.mark.parametrize("compression", ["none", "blosc"])
def test_cuda_state_dicts_save_async_from_pinned_staging_and_load_onto_the_gpu(
    tmp_path: Path, compression: str
) -> None:
    """GPU tensors: staged into pinned host buffers by an async save (raw and compressed), read back into
    CUDA destinations bit-exact."""
    sd = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in state().items()}
    writer = Writer(tmp_path / "ckpt", compression=compression, options=SMALL)
    dcp.async_save(sd, storage_writer=writer, no_dist=True).result()
    assert writer._local["staged"]["fp32"].is_pinned()
    out: dict = zeros(sd)  # type: ignore[assignment]
    dcp.load(out, storage_reader=Reader(tmp_path / "ckpt", options=SMALL), no_dist=True)
    assert out["bf16"].is_cuda
    assert_bits({k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in out.items()}, state())


def test_the_metadata_names_each_data_file_and_dtype_once(tmp_path: Path) -> None:
    """Format 3 keeps file names and codecs in tables and a record's dtype is its item's: 65 records name their
    one data file once, and every record reads back whole, sharing that one string."""
    state = {f"layer{i}.{j}": torch.randn(64 + i) for i in range(20) for j in range(3)}
    state |= {f"half{i}": torch.randn(8).bfloat16() for i in range(5)}
    save(state, tmp_path / "ckpt")
    data = (tmp_path / "ckpt" / ".metadata").read_bytes()
    records = list(read_metadata(tmp_path / "ckpt").storage_data.values())
    assert len(records) == 65 and len({r.file for r in records}) == 1 and len({id(r.file) for r in records}) == 1
    assert data.count(records[0].file.encode()) == 1 and data.count(b"bfloat16") == 5  # once per item
    assert torch.equal(load(tmp_path / "ckpt", state)["half3"], state["half3"])
