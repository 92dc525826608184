"""A DCP checkpoint directory is untrusted input, and a save never loses the last good checkpoint: code in
byte items, names outside the directory, FIFOs and links, damaged or forged metadata, errors a caller can
catch, concurrent savers and a full file system (issue 16, each item reproduced before its fix)."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckptio import CheckpointError, IOOptions, Reader, Writer, codec, errors, save
from ckptio.dcp.metadata import read_metadata, seal
from ckptio.dcp.records import METADATA, SEAL_MAGIC, data_file
from ckptio.errors import (
    CorruptCheckpoint,
    InvalidCheckpoint,
    OptionError,
    StorageFull,
    TruncatedCheckpoint,
    UnsafeObject,
    unwrap,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint.api import CheckpointException

from tests.helpers import forkserver, mounted

SMALL = IOOptions(chunk_bytes=64 << 10, buffer_bytes=256 << 10, threads=2)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class Evil:
    """A value whose unpickling runs a command (the payload of the issue)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str, ...]]:
        return (os.system, (f"touch {self.marker}",))


class Point:
    """A user's own type, allowed with torch.serialization.add_safe_globals."""

    def __init__(self, x: int) -> None:
        self.x = x


def state(seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(20_000, generator=g), "b": torch.randn(33, 7, generator=g).bfloat16(), "step": seed}


def dcp_save(sd: dict[str, Any], path: Path, **kw: Any) -> None:
    dcp.save(sd, storage_writer=Writer(path, options=SMALL, **kw), no_dist=True)


def dcp_load(path: Path, like: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """Load into a zeroed copy of `like`; a failure comes out as the library's own error (the documented recipe)."""
    out = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else v for k, v in (like or state()).items()}
    try:
        dcp.load(out, storage_reader=Reader(path, options=SMALL, **kw), no_dist=True)
    except CheckpointException as e:
        raise unwrap(e) from e
    return out


def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


# -- 1. code execution on load ---------------------------------------------------------------------


def test_a_byte_item_that_runs_code_is_refused_on_save(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    with pytest.raises(CheckpointException) as info:
        dcp_save({"w": torch.ones(4), "x": Evil(str(marker))}, tmp_path / "ckpt")
    error = unwrap(info.value)
    assert isinstance(error, UnsafeObject) and error.key == "x" and "posix.system" in str(error)
    assert not marker.exists() and not list((tmp_path / "ckpt").glob("*.data"))


def test_a_planted_byte_item_never_runs_on_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint whose byte item runs a command (written by a hostile writer: the save-time check
    switched off) loads as an error, and the command never runs."""
    marker = tmp_path / "PWNED"
    monkeypatch.setattr("ckptio.dcp.writer.check_saveable", lambda data, key: None)
    dcp_save({"w": torch.ones(4), "x": Evil(str(marker))}, tmp_path / "ckpt")
    monkeypatch.undo()
    assert not marker.exists()
    with pytest.raises(InvalidCheckpoint, match="'x': refused by the weights-only unpickler"):
        dcp_load(tmp_path / "ckpt", {"w": torch.zeros(4), "x": None})
    assert not marker.exists()


def test_the_allowlist_computed_once_is_torchs_own_and_put_back(tmp_path: Path) -> None:
    """Metadata unpickling computes torch's allowlist of user globals once per load instead of once per object:
    inside, the same classes (the load's safe globals included); after a load, or a refused one, torch's own
    function is back and no allowance outlives the load."""
    from ckptio.unpickle import allowlist_once
    from torch import _weights_only_unpickler as restricted

    own = restricted._get_user_allowed_globals
    with torch.serialization.safe_globals([Point]), allowlist_once():
        assert restricted._get_user_allowed_globals() == own() and f"{__name__}.Point" in own()
    dcp_save({"w": torch.ones(4)}, tmp_path / "ckpt")
    assert dcp_load(tmp_path / "ckpt", {"w": torch.zeros(4)})["w"].sum() == 4
    (tmp_path / "ckpt" / ".metadata").write_bytes(b"not a pickle")
    with pytest.raises(InvalidCheckpoint):
        dcp_load(tmp_path / "ckpt", {"w": torch.zeros(4)})
    assert restricted._get_user_allowed_globals is own and f"{__name__}.Point" not in own()


def test_a_user_type_round_trips_once_allowed(tmp_path: Path) -> None:
    with pytest.raises(CheckpointException) as info:
        dcp_save({"w": torch.ones(4), "p": Point(3)}, tmp_path / "refused")
    assert isinstance(unwrap(info.value), UnsafeObject)
    with torch.serialization.safe_globals([Point]):
        dcp_save({"w": torch.ones(4), "p": Point(3)}, tmp_path / "ckpt")
        out = dcp_load(tmp_path / "ckpt", {"w": torch.zeros(4), "p": None})
    assert out["p"].x == 3 and torch.equal(out["w"], torch.ones(4))


def test_single_file_save_refuses_what_no_load_accepts(tmp_path: Path) -> None:
    with pytest.raises(UnsafeObject) as info:
        save({"w": torch.ones(2), "opt": {"hook": Evil(str(tmp_path / "PWNED"))}}, tmp_path / "x.pt")
    assert info.value.key == "opt.hook" and not (tmp_path / "x.pt").exists()


# -- 2. paths outside the directory, FIFOs and links -----------------------------------------------


def committed(path: Path) -> Any:
    """A checkpoint's Metadata with its records in a plain dict, as a Writer hands them to the commit."""
    metadata = read_metadata(path)
    metadata.storage_data = dict(metadata.storage_data.items())
    return metadata


def reseal(path: Path, edit: Any) -> None:
    """Rewrite a checkpoint's metadata through `edit(metadata)` and seal it again (a forger's edit): format 3
    where it expresses the edit, format 2 (a pickle) where not, as a Writer would."""
    metadata = committed(path)
    edit(metadata)
    (path / METADATA).write_bytes(seal(metadata))


def point_records(metadata: Any, name: str) -> None:
    for index, record in list(metadata.storage_data.items()):
        metadata.storage_data[index] = dataclasses.replace(record, file=name)


@pytest.mark.parametrize("name", ["../outside.data", "/etc/passwd", "sub/" + data_file("a" * 32, 0), ".metadata"])
def test_records_naming_files_outside_the_directory_are_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "outside.data").write_bytes(bytes(1 << 20))
    dcp_save(state(), tmp_path / "ckpt", checksum=None)
    reseal(tmp_path / "ckpt", lambda m: point_records(m, name))
    with pytest.raises(InvalidCheckpoint, match="not one a Writer makes"):
        dcp_load(tmp_path / "ckpt", verify=False)


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_data_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    [data] = (tmp_path / "ckpt").glob("*.data")
    (tmp_path / "elsewhere").write_bytes(data.read_bytes())
    data.unlink()
    {
        "fifo": lambda: os.mkfifo(data),
        "symlink": lambda: data.symlink_to(tmp_path / "elsewhere"),
        "directory": data.mkdir,
    }[kind]()
    with pytest.raises(InvalidCheckpoint, match=r"not a regular file|cannot open it safely"):
        dcp_load(tmp_path / "ckpt")  # a FIFO used to hang here forever


def test_a_metadata_fifo_or_link_is_refused(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    meta = tmp_path / "ckpt" / METADATA
    (tmp_path / "copy").write_bytes(meta.read_bytes())
    meta.unlink()
    meta.symlink_to(tmp_path / "copy")
    with pytest.raises(InvalidCheckpoint, match="cannot open it safely"):
        dcp_load(tmp_path / "ckpt")
    meta.unlink()
    os.mkfifo(meta)
    with pytest.raises(InvalidCheckpoint, match="not a regular file"):
        dcp_load(tmp_path / "ckpt")


def test_a_data_file_shorter_than_its_records_is_refused_before_reading(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    [data] = (tmp_path / "ckpt").glob("*.data")
    os.truncate(data, 4096)
    with pytest.raises(TruncatedCheckpoint):
        dcp_load(tmp_path / "ckpt")


# -- 3. metadata integrity -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    path = tmp_path_factory.mktemp("flips") / "ckpt"
    dcp_save(state(7), path, compression="zstd")
    return path, (path / METADATA).read_bytes()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_bit_flip_of_the_metadata_is_a_checkpoint_error(saved: tuple[Path, bytes], data: Any) -> None:
    """The seal covers every byte: no flip loads silently, and every refusal is the library's own."""
    path, good = saved
    bit = data.draw(st.integers(0, len(good) * 8 - 1))
    flipped = bytearray(good)
    flipped[bit // 8] ^= 1 << (bit % 8)
    (path / METADATA).write_bytes(bytes(flipped))
    try:
        with pytest.raises(CheckpointError):
            dcp_load(path, state(7))
    finally:
        (path / METADATA).write_bytes(good)


FIELDS = {
    "nbytes": st.integers(-5, 1 << 40),
    "dtype": st.sampled_from(["float32", "bfloat16", "int8", "", "load", "__class__", "Tensor"]),
    "shape": st.one_of(st.tuples(st.integers(-3, 10**6)), st.tuples(), st.just((1.5,))),
    "codec": st.sampled_from(["none", "zstd/3", "bogus", "blosc2/zstd-1/shuffle/xxh3", ""]),
    "chunk_bytes": st.integers(-1, 1 << 33),
    "chunks": st.one_of(st.just(()), st.tuples(st.tuples(st.integers(-1, 1 << 40), st.integers(-1, 1 << 31)))),
    "digests": st.one_of(st.just(()), st.tuples(st.text("0123456789abcdefxyz", max_size=20))),
    "checksum": st.sampled_from(["none", "xxh3", "crc32c", "md5"]),
    "format": st.sampled_from(["gdsbench-dcp/1", "gdsbench-dcp/2", "ckptio-dcp/2", "ckptio-dcp/9"]),
    "file": st.sampled_from(["../x", "/etc/shadow", data_file("b" * 32, 3), "a-r0.data", ""]),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(sorted(FIELDS)), data=st.data())
def test_forged_records_are_refused_as_checkpoint_errors(saved: tuple[Path, bytes], field: str, data: Any) -> None:
    """A forger who re-seals the metadata gets a named CheckpointError, never an error from inside DCP."""
    path, good = saved
    value = data.draw(FIELDS[field])
    index = data.draw(st.integers(0, 2))

    def edit(metadata: Any) -> None:
        key = sorted(metadata.storage_data, key=lambda i: i.fqn)[index]
        metadata.storage_data[key] = dataclasses.replace(metadata.storage_data[key], **{field: value})

    reseal(path, edit)
    try:
        out = dcp_load(path, state(7))
    except CheckpointError:
        return
    finally:
        (path / METADATA).write_bytes(good)
    assert same(out, state(7))  # an edit that changes nothing that matters still loads the right tensors


def test_a_checksum_downgrade_is_refused(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    reseal(
        tmp_path / "ckpt",
        lambda m: m.storage_data.update(
            {
                i: dataclasses.replace(r, checksum="none", digests=("",) * len(r.digests))
                for i, r in list(m.storage_data.items())[:1]
            }
        ),
    )
    with pytest.raises(InvalidCheckpoint, match="disagree on the checksum"):
        dcp_load(tmp_path / "ckpt")


def test_a_checkpoint_without_checksums_needs_verify_false(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt", checksum=None)
    with pytest.raises(InvalidCheckpoint, match="without checksums"):
        dcp_load(tmp_path / "ckpt")
    assert same(dcp_load(tmp_path / "ckpt", verify=False), state())


def test_a_cut_seal_is_refused(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    meta = tmp_path / "ckpt" / METADATA
    meta.write_bytes(meta.read_bytes()[:-40])
    with pytest.raises(InvalidCheckpoint, match="without its seal"):
        dcp_load(tmp_path / "ckpt")


FORGED_STORAGE_META = {
    "int": lambda sm: 5,
    "str": lambda sm: "x",
    "dict": lambda sm: {"load_id": "a"},
    "list save_id": lambda sm: sm(save_id=[1]),
    "int modules": lambda sm: sm(modules=7),
}


@pytest.mark.parametrize("forge", FORGED_STORAGE_META.values(), ids=FORGED_STORAGE_META.keys())
def test_a_forged_storage_meta_is_refused(tmp_path: Path, forge: Any) -> None:
    """Format-2 metadata whose storage_meta is not DCP's StorageMeta of strings escaped as DCP's AssertionError."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    dcp_save(state(), tmp_path / "ckpt")
    metadata = committed(tmp_path / "ckpt")
    metadata.storage_meta = forge(StorageMeta)
    payload = pickle.dumps(metadata, protocol=2)
    (tmp_path / "ckpt" / METADATA).write_bytes(payload + SEAL_MAGIC + hashlib.sha256(payload).digest())
    with pytest.raises(InvalidCheckpoint, match="storage_meta"):
        dcp_load(tmp_path / "ckpt")


# -- 4. errors a caller can catch ------------------------------------------------------------------


def test_every_refusal_is_a_checkpoint_error(tmp_path: Path) -> None:
    with pytest.raises(OptionError):
        save({"w": torch.ones(1)}, tmp_path / "x.pt", checksum="md5")
    with pytest.raises(CheckpointError):
        Writer(tmp_path, compression="bogus")
    assert issubclass(codec.CodecError, CheckpointError) and issubclass(codec.CodecError, ValueError)
    with pytest.raises(OptionError, match="gds"):
        Reader(tmp_path, options=IOOptions(backend="gds"))
    with pytest.raises(OptionError, match="gds"):
        Writer(tmp_path, options=IOOptions(backend="gds"))


def test_unwrap_returns_the_library_error_from_dcp(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    [data] = (tmp_path / "ckpt").glob("*.data")
    with open(data, "r+b") as f:
        f.seek(100)
        byte = f.read(1)
        f.seek(100)
        f.write(bytes([byte[0] ^ 1]))
    out = state()
    with pytest.raises(CheckpointException) as info:  # a BaseException: `except Exception` would miss it
        dcp.load(out, storage_reader=Reader(tmp_path / "ckpt"), no_dist=True)
    assert isinstance(unwrap(info.value), CorruptCheckpoint)
    plain = ValueError("x")
    assert unwrap(plain) is plain


def test_a_missing_checkpoint_keeps_its_own_error_through_dcp(tmp_path: Path) -> None:
    with pytest.raises(InvalidCheckpoint, match="not a committed checkpoint"):
        dcp_load(tmp_path)


# -- 5. two saves to one directory -----------------------------------------------------------------


def _saver(path: str, seed: int, saves: int, rounds: Any, out: Any) -> None:
    """A process saving its own state dict to `path` again and again, `saves` times per round (a round starts
    when its event from `rounds` is set); reports each result, then None at the end of its round."""
    for start in rounds:
        start.wait()
        for _ in range(saves):
            try:
                dcp_save(state(seed), Path(path))
                out.put((seed, "ok"))
            except CheckpointException as e:
                out.put((seed, type(unwrap(e)).__name__))
        out.put(None)


@pytest.mark.timeout(240)
def test_concurrent_savers_always_leave_one_complete_checkpoint(tmp_path: Path) -> None:
    """Two processes hammer one directory; after each round, both stopped, it loads to one of their states,
    whole, with no orphan file. The processes live across the three rounds (forks of the tests' fork server)."""
    ctx = forkserver()
    path = tmp_path / "ckpt"
    rounds, out = [ctx.Event() for _ in range(3)], ctx.Queue()
    procs = [ctx.Process(target=_saver, args=(str(path), seed, 4, rounds, out)) for seed in (1, 2)]
    for p in procs:
        p.start()
    try:
        for rnd, start in enumerate(rounds):
            start.set()
            reports = [out.get(timeout=120) for _ in range(10)]  # 4 results and the round's end, per process
            results = [r for r in reports if r is not None]
            assert len(results) == 8 and all(r in ("ok", "CheckpointBusy") for _, r in results), results
            loaded = dcp_load(path)
            assert same(loaded, state(loaded["step"])) and loaded["step"] in (1, 2), rnd
            referenced = {r.file for r in Reader(path).read_metadata().storage_data.values()}
            assert {p.name for p in path.glob("*.data")} == referenced  # no orphan left once both are done
    finally:
        for start in rounds:  # a failed round must not leave the savers waiting for the next
            start.set()
        for p in procs:
            p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]


def test_a_commit_never_removes_a_live_writers_file(tmp_path: Path) -> None:
    """An uncommitted file held by a live writer survives another save's commit; once let go, it is swept."""
    from ckptio.dcp.lock import create_held

    path = tmp_path / "ckpt"
    dcp_save(state(1), path)
    live = str(path / data_file("c" * 32, 0))
    dead = path / data_file("d" * 32, 0)
    fd = create_held(live)
    dead.write_bytes(b"a save that died")
    dcp_save(state(2), path)
    assert os.path.exists(live) and not dead.exists()
    os.close(fd)
    dcp_save(state(3), path)
    assert not os.path.exists(live) and same(dcp_load(path), state(3))


def test_a_data_file_never_exists_unheld_while_a_commit_sweeps(tmp_path: Path) -> None:
    """The race a concurrent-savers run found (a FileNotFoundError): a commit's sweep took the exclusive flock of a
    data file in the moment between its creation and its writer's shared flock, and removed it. A writer now
    creates its file under the directory's lock held shared, so while a commit holds it exclusively the file
    does not exist yet, and once it exists it is held."""
    import threading

    from ckptio.dcp.lock import acquire, create_held, release, remove_if_unheld

    path = tmp_path / "ckpt"
    path.mkdir()
    new = path / data_file("e" * 32, 0)
    committing = acquire(path)  # a commit of another save, sweeping
    made: list[int] = []
    writer = threading.Thread(target=lambda: made.append(create_held(str(new))))
    writer.start()
    writer.join(0.3)
    assert writer.is_alive() and not new.exists(), "the writer waits for the commit before creating its file"
    release(committing)
    writer.join(10)
    assert made and new.exists() and not remove_if_unheld(str(new)), "created and held: no sweep removes it"
    os.close(made[0])
    assert remove_if_unheld(str(new)) and not new.exists()


# -- 7. a full file system ---------------------------------------------------------------------------


@pytest.mark.needs_root
def test_a_save_that_runs_out_of_space_removes_its_data_and_keeps_the_last_checkpoint(tmp_path: Path) -> None:
    with mounted(tmp_path / "small", "tmpfs", "-o", "size=2m") as small:
        path = small / "ckpt"
        dcp_save({"w": torch.ones(100_000)}, path)  # 400 KB: fits
        before = sorted(p.name for p in path.iterdir())
        with pytest.raises(CheckpointException) as info:
            dcp_save({"w": torch.ones(1_000_000)}, path)  # 4 MB: does not
        error = unwrap(info.value)
        assert isinstance(error, StorageFull) and isinstance(error, OSError) and str(path) in str(error)
        assert sorted(p.name for p in path.iterdir()) == before  # the failed save left nothing behind
        assert torch.equal(dcp_load(path, {"w": torch.zeros(100_000)})["w"], torch.ones(100_000))
        dcp_save({"w": torch.full((100_000,), 2.0)}, path)  # a retry that fits works at once
        assert torch.equal(dcp_load(path, {"w": torch.zeros(100_000)})["w"], torch.full((100_000,), 2.0))


def test_a_format_1_checkpoint_still_loads(tmp_path: Path) -> None:
    """Checkpoints written before the seal (a bare pickle, records gdsbench-dcp/1) keep loading."""
    dcp_save(state(), tmp_path / "ckpt")
    meta = tmp_path / "ckpt" / METADATA
    metadata = committed(tmp_path / "ckpt")
    for index, record in list(metadata.storage_data.items()):
        metadata.storage_data[index] = dataclasses.replace(record, format="gdsbench-dcp/1")
    meta.write_bytes(pickle.dumps(metadata, protocol=2))
    assert same(dcp_load(tmp_path / "ckpt"), state())


@pytest.mark.parametrize(
    "error",
    [
        errors.InvalidCheckpoint("/x/c.pt", "bad header"),
        errors.TruncatedCheckpoint("/x/c.pt", 100, 50),
        errors.CorruptCheckpoint("/x/c.pt", "w1", "crc"),
        errors.BackendUnavailable("gds", "no cuda"),
        errors.StateDictMismatch("/x", "w", "shape"),
        errors.UnsafeObject("a.b", "not allowed"),
        errors.CheckpointBusy("/x", "pid 1", 2.0),
        errors.StorageFull("/x", errno.ENOSPC, "wrote 1 of 2"),
        errors.AsyncSaveFailed("boom"),
        errors.OptionError("bad"),
        errors.UnsupportedLocation("s3://b/ck", "s3"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_every_error_crosses_ranks_pickled_whole(error):
    """DCP hands a rank's exception to the others pickled: each error comes back as itself, same message and
    fields (a StorageFull that could not be rebuilt made every other rank fail with a TypeError, or wait in a
    collective, on the fast-device run)."""
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error) and str(back) == str(error) and back.__dict__ == error.__dict__
    if isinstance(error, OSError):
        assert (back.errno, back.strerror) == (error.errno, error.strerror) == (errno.ENOSPC, back.strerror)
