"""A single-file checkpoint is untrusted input (issue 29, item 9): a forger who rewrites data.pkl and its
digests, or puts a FIFO, a directory or a device where the file should be, gets a named CheckpointError from
load, load_mmap and load_into: never a raw KeyError/IndexError, a hang, or memory the file did not pay for;
and load_into leaves the destination untouched."""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
from ckptio import CheckpointError, integrity, load, load_into, load_mmap, save
from ckptio.errors import InvalidCheckpoint
from ckptio.inspect import read_index
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_format import _rewrite_index

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # forged pickles make torch's unpickler warn
LOADERS: dict[str, Callable[[pathlib.Path], Any]] = {
    "load": load,
    "load_mmap": load_mmap,
    "load_into": lambda path: load_into(path, {"w": torch.zeros(1000), "n": 0}, strict=False),
}


@pytest.fixture
def ckpt(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "c.pt"
    save({"w": torch.arange(1000, dtype=torch.float32), "n": 3}, path)
    return path


def forge_pickle(path: pathlib.Path, payload: bytes) -> None:
    """Put `payload` in data.pkl (padded to its record's length) and re-digest it, index and header: what a
    forger with write access does (the digests are not keyed)."""
    index = read_index(path)
    assert len(payload) <= index.pickle_nbytes
    raw = payload.ljust(index.pickle_nbytes, b".")
    with open(path, "r+b") as f:
        f.seek(index.pickle_offset)
        f.write(raw)
    digest = integrity.digest_fn(index.checksum)(memoryview(raw))  # type: ignore[misc]
    _rewrite_index(path, lambda doc: doc.update(pickle_digest=digest))


PICKLES = {
    "memo get of an empty memo": b"\x80\x02h\x00.",  # KeyError inside the unpickler
    "reduce on an empty stack": b"\x80\x02R.",  # IndexError
    "tuple of an empty stack": b"\x80\x02\x85.",  # IndexError
    "stop on an empty stack": b"\x80\x02.",
    "persistent id of a non-storage type": b"\x80\x02(X\x07\x00\x00\x00storagectorch\nSize\nX\x01\x00\x00\x000"
    b"X\x03\x00\x00\x00cpuK\x01tQ.",  # AttributeError (torch.Size has no dtype)
    "a bytearray of a size (a memory bomb)": b"\x80\x02c__builtin__\nbytearray\nJ\x00\x00\x00\x10\x85R.",
    "a tensor class called with a size": b"\x80\x02ctorch\nFloatTensor\nJ\x00\x00\x00\x10\x85R.",
}


@pytest.mark.parametrize("payload", PICKLES.values(), ids=PICKLES.keys())
@pytest.mark.parametrize("loader", LOADERS)
def test_malformed_pickle_opcodes_are_invalid_checkpoints(ckpt: pathlib.Path, loader: str, payload: bytes) -> None:
    forge_pickle(ckpt, payload)
    with pytest.raises(InvalidCheckpoint, match=r"weights_only unpickling refused|does not view a storage of the file"):
        LOADERS[loader](ckpt)


def test_a_bytearray_of_a_size_is_refused_and_a_real_one_loads(tmp_path: pathlib.Path) -> None:
    """A 30-byte pickle asked for 256 MiB of zeroed memory (bytearray(n)); a pickled bytearray carries its bytes."""
    path = tmp_path / "b.pt"
    save({"blob": bytearray(b"abc"), "empty": bytearray()}, path)
    assert load(path) == {"blob": bytearray(b"abc"), "empty": bytearray()}
    forge_pickle(path, b"\x80\x02c__builtin__\nbytearray\nJ\x00\x00\x00\x10\x85R.")
    with pytest.raises(InvalidCheckpoint, match=r"bytearray\(268435456\) refused"):
        load(path)


def test_load_into_a_forged_pickle_touches_nothing(ckpt: pathlib.Path) -> None:
    forge_pickle(ckpt, PICKLES["memo get of an empty memo"])
    dest = {"w": torch.full((1000,), 5.0), "n": 0}
    with pytest.raises(InvalidCheckpoint):
        load_into(ckpt, dest)
    assert torch.equal(dest["w"], torch.full((1000,), 5.0)) and dest["n"] == 0


@pytest.mark.parametrize("loader", LOADERS)
def test_a_pickle_nested_too_deeply_to_walk_is_invalid(tmp_path: pathlib.Path, loader: str) -> None:
    """The loaders walk the saved object: 5000 nested lists (two bytes each) escaped load_into as RecursionError."""
    path = tmp_path / "c.pt"
    save({"w": torch.zeros(1000), "pad": "x" * 20_000}, path)
    forge_pickle(path, b"\x80\x02" + b"]" * 5000 + b"a" * 4999 + b".")
    with pytest.raises(InvalidCheckpoint, match="nested too deeply"):
        LOADERS[loader](path)


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> tuple[pathlib.Path, bytes]:
    path = tmp_path_factory.mktemp("fuzz") / "c.pt"
    save({"w": torch.arange(1000, dtype=torch.float32), "n": 3, "names": ["a", "b"], "t": (1.5, None)}, path)
    index = read_index(path)
    with open(path, "rb") as f:
        f.seek(index.pickle_offset)
        return path, f.read(index.pickle_nbytes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), loader=st.sampled_from(sorted(LOADERS)))
def test_any_forged_pickle_is_a_checkpoint_error_or_loads(
    fuzzed: tuple[pathlib.Path, bytes], data: Any, loader: str
) -> None:
    """Bytes of data.pkl overwritten, cut or replaced by random opcodes, digests forged to match: the loaders
    raise a CheckpointError or return an object, nothing else."""
    path, good = fuzzed
    start = data.draw(st.integers(0, len(good) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=12) | st.sampled_from([b"h\x00", b"R", b"0", b"\x85", b"a", b"."]))
    payload = (good[:start] + junk + good[start + len(junk) :])[: len(good)]
    save({"w": torch.arange(1000, dtype=torch.float32), "n": 3, "names": ["a", "b"], "t": (1.5, None)}, path)
    forge_pickle(path, payload)
    with contextlib.suppress(CheckpointError):
        LOADERS[loader](path)


def _fifo(path: pathlib.Path) -> None:
    os.mkfifo(path)


@pytest.mark.timeout(30)  # a FIFO used to block the open forever
@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
@pytest.mark.parametrize("loader", [*LOADERS, "read_index"])
def test_a_path_that_is_not_a_regular_file_is_refused(tmp_path: pathlib.Path, kind: str, loader: str) -> None:
    path = {"fifo": tmp_path / "c.pt", "directory": tmp_path, "device": pathlib.Path("/dev/null")}[kind]
    if kind == "fifo":
        _fifo(path)
    named = {"fifo": "a FIFO", "directory": "a directory", "device": "a device"}[kind]
    with pytest.raises(InvalidCheckpoint, match=f"not a regular file: {named}"):
        (read_index if loader == "read_index" else LOADERS[loader])(path)
