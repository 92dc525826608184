"""Bit-exact round trips: every dtype, shapes, views, shared storages, empties, scalars, metadata."""

from __future__ import annotations

import io
import pathlib
import warnings

import pytest
import torch
from ckptio import IOOptions, load, save
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import assert_same, random_tensor


def _savable_dtypes() -> list[torch.dtype]:
    """Every dtype this torch has that torch.save itself can store (quantized/bit types excluded)."""
    warnings.filterwarnings("ignore", "ComplexHalf support is experimental")
    out = []
    for name in dir(torch):
        d = getattr(torch, name)
        if isinstance(d, torch.dtype) and d not in out and not str(d).startswith(("torch.q", "torch.bits")):
            try:  # torch.save itself must support it (sub-byte uint1..7 are not)
                torch.save(torch.empty(2, dtype=d), io.BytesIO())
                torch.empty(2, dtype=d).view(torch.uint8)
            except (RuntimeError, TypeError, KeyError):
                continue
            out.append(d)
    return out


DTYPES = _savable_dtypes()


def test_dtype_table_covers_the_issue_list() -> None:
    """The table includes the dtypes the issue names (float8 where this torch has them)."""
    names = {str(d) for d in DTYPES}
    for want in [
        "bfloat16",
        "float16",
        "float32",
        "float64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "bool",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    ]:
        assert f"torch.{want}" in names


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips(tmp_path: pathlib.Path, dtype: torch.dtype) -> None:
    """Random bits of each dtype, in shapes around the page size, come back identical."""
    sd = {f"t{i}": random_tensor(shape, dtype, seed=i) for i, shape in enumerate([(3,), (4096,), (1025, 3), (2, 3, 4)])}
    save(sd, tmp_path / "c.pt")
    assert_same(sd, load(tmp_path / "c.pt"))


def test_views_noncontiguous_shared_and_odd_shapes(tmp_path: pathlib.Path) -> None:
    """Views keep offsets/strides; tensors sharing a storage share it after load; empties, scalars."""
    base = random_tensor((64, 33), torch.float32, 1)
    sd = {
        "base": base,
        "row": base[5],
        "col": base[:, 7],
        "t": base.t(),
        "slice": base[10:20, 3:9],
        "alias": base.view(-1)[100:900:3],
        "empty": torch.empty(0),
        "empty2d": torch.empty(0, 5, dtype=torch.bfloat16),
        "scalar": torch.tensor(2.5, dtype=torch.float64),
        "iscalar": torch.tensor(7),
        "expanded": random_tensor((1, 5), torch.int16, 2).expand(4, 5),
        "big": random_tensor((3 << 20,), torch.bfloat16, 3)[1:],
    }
    save(sd, tmp_path / "c.pt")
    out = load(tmp_path / "c.pt")
    assert_same(sd, out)
    ptr = out["base"].untyped_storage().data_ptr()
    for k in ["row", "col", "t", "slice", "alias"]:
        assert out[k].untyped_storage().data_ptr() == ptr
    out["base"][5, 0] = 123.0  # really shared, not equal copies
    assert out["row"][0].item() == 123.0


def test_metadata_and_nesting(tmp_path: pathlib.Path) -> None:
    """Plain Python values and nested containers come back equal, with their types."""
    sd = {
        "epoch": 3,
        "lr": 1e-4,
        "name": "run-7",
        "none": None,
        "flag": True,
        "neg": -(2**70),
        "nested": {
            "layers": [{"w": random_tensor((8, 8), torch.float16, i)} for i in range(3)],
            "tup": (1, "a", random_tensor((5,), torch.int64, 9)),
        },
    }
    save(sd, tmp_path / "c.pt")
    assert_same(sd, load(tmp_path / "c.pt"))


def test_torch_load_reads_our_files(tmp_path: pathlib.Path) -> None:
    """torch.load(weights_only=True), with and without mmap, returns equal tensors and sharing."""
    base = random_tensor((100, 300), torch.bfloat16, 4)
    sd = {"w": base, "v": base[3:7], "f": random_tensor((12345,), torch.float32, 5), "n": 3, "e": torch.empty(0)}
    save(sd, tmp_path / "c.pt")
    for mmap in (False, True):
        ref = torch.load(tmp_path / "c.pt", weights_only=True, mmap=mmap)
        assert_same(sd, ref)
        assert ref["w"].untyped_storage().data_ptr() == ref["v"].untyped_storage().data_ptr()


@pytest.mark.parametrize("checksum", ["xxh3", "crc32c", None])
def test_checksum_choices_round_trip(tmp_path: pathlib.Path, checksum: str | None) -> None:
    """Each checksum algorithm (and none) writes a loadable file."""
    sd = {"w": random_tensor((70000,), torch.float32, 6)}
    save(sd, tmp_path / "c.pt", checksum=checksum, options=IOOptions(chunk_bytes=64 << 10, buffer_bytes=256 << 10))
    assert_same(sd, load(tmp_path / "c.pt"))


def test_small_chunks_many_threads(tmp_path: pathlib.Path) -> None:
    """Chunking finer than the storages (multi-chunk digests, many tasks) stays exact."""
    sd = {f"l{i}": random_tensor((50000 + i * 4097,), torch.float32, i) for i in range(6)}
    save(sd, tmp_path / "c.pt", options=IOOptions(chunk_bytes=64 << 10, buffer_bytes=128 << 10, threads=5))
    assert_same(sd, load(tmp_path / "c.pt", options=IOOptions(threads=7)))


def test_overwrite_replaces_previous(tmp_path: pathlib.Path) -> None:
    """Saving over an existing checkpoint replaces it and leaves no temp files."""
    save({"a": torch.ones(3)}, tmp_path / "c.pt")
    save({"b": torch.zeros(5)}, tmp_path / "c.pt")
    assert list(load(tmp_path / "c.pt")) == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


_leaf = st.one_of(
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.none(),
    st.booleans(),
    st.builds(
        lambda shape, d, seed: random_tensor(tuple(shape), d, seed),
        st.lists(st.integers(0, 40), max_size=3),
        st.sampled_from(DTYPES),
        st.integers(0, 1000),
    ),
)
_tree = st.recursive(
    _leaf,
    lambda c: st.one_of(
        st.lists(c, max_size=3), st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), c, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=st.dictionaries(st.text("abcdef", min_size=1, max_size=4), _tree, max_size=4))
def test_hypothesis_state_dicts(tmp_path: pathlib.Path, tree: dict) -> None:
    """Random nested state dicts round-trip bit-exactly."""
    save(tree, tmp_path / "h.pt")
    assert_same(tree, load(tmp_path / "h.pt"))
