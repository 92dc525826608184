"""`.metadata` format ckptio-dcp/3 (issue 20): DCP's Metadata round-trips exactly through the table, forged
tables are refused as CheckpointErrors, a rank checks and opens only what its plan reads, and formats 1 and 2
(pickles) still load."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from ckptio import CheckpointError
from ckptio.dcp import table, table_encode
from ckptio.dcp.metadata import read_metadata, seal
from ckptio.dcp.records import METADATA, SEAL_MAGIC, SEAL_MAGIC_V3, ItemRecord, data_file
from ckptio.errors import InvalidCheckpoint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

from .test_dcp_trust import dcp_load, dcp_save, same  # the trust tests' save, load and compare

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def state(seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(40_000, generator=g),
        "b": torch.randn(33, 7, generator=g).bfloat16(),
        "step": {"n": seed, "tag": ("a", 1)},
    }


# -- round trips -------------------------------------------------------------------------------------

DTYPE_NAMES = ["float32", "bfloat16", "int8", "float8_e4m3fn", "bool", "complex64"]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 62), 1 << 62),
    st.text(max_size=8),
    st.floats(allow_nan=False, allow_infinity=False),
)
PLANNER_DATA = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(0, 9)), inner, max_size=3),
    ),
    max_leaves=12,
)


@st.composite
def tensor_items(draw: Any, fqn: str, files: list[str]) -> tuple[TensorStorageMetadata, dict[Any, ItemRecord]]:
    """A tensor item cut into row blocks, each chunk with a record as a Writer writes it."""
    dtype = getattr(torch, draw(st.sampled_from(DTYPE_NAMES)))
    size = draw(st.lists(st.integers(0, 40), min_size=0, max_size=3))
    rows = size[0] if size else 1
    cuts = sorted(set(draw(st.lists(st.integers(0, rows), max_size=4))) | {0, rows}) if size else [0, 1]
    chunks, records = [], {}
    props = TensorProperties(dtype, requires_grad=draw(st.booleans()), pin_memory=draw(st.booleans()))
    for start, stop in itertools.pairwise(cuts):
        offsets = torch.Size([start] + [0] * (len(size) - 1)) if size else torch.Size([])
        sizes = torch.Size([stop - start, *size[1:]]) if size else torch.Size([])
        chunks.append(ChunkStorageMetadata(offsets, sizes))
        records[MetadataIndex(fqn, offsets)] = record(
            draw, files, sizes.numel() * dtype.itemsize, str(dtype)[6:], tuple(sizes)
        )
    return TensorStorageMetadata(props, torch.Size(size), chunks), records


def record(draw: Any, files: list[str], nbytes: int, dtype: str, shape: tuple[int, ...]) -> ItemRecord:
    chunk = draw(st.sampled_from([4096, 8192]))
    count = -(-nbytes // chunk)
    codec = "none" if not dtype else draw(st.sampled_from(["none", "zstd/3"]))
    extents = tuple((4096 * draw(st.integers(0, 1000)), min(chunk, nbytes - k * chunk)) for k in range(count))
    digests = tuple(f"{draw(st.integers(0, (1 << 64) - 1)):016x}" for _ in range(count))
    return ItemRecord(draw(st.sampled_from(files)), nbytes, dtype, shape, codec, chunk, extents, digests, "xxh3")


@st.composite
def metadatas(draw: Any) -> Metadata:
    files = [data_file("a" * 32, r) for r in range(draw(st.integers(1, 3)))]
    items: dict[str, Any] = {}
    storage: dict[Any, ItemRecord] = {}
    for i, kind in enumerate(draw(st.lists(st.sampled_from(["tensor", "bytes"]), min_size=1, max_size=5))):
        fqn = draw(st.text(min_size=1, max_size=6)) + f".{i}"
        if kind == "bytes":
            items[fqn] = BytesStorageMetadata()
            storage[MetadataIndex(fqn)] = record(draw, files, draw(st.integers(1, 9000)), "", ())
        else:
            items[fqn], records = draw(tensor_items(fqn, files))
            storage |= records
    meta = draw(st.one_of(st.none(), st.builds(StorageMeta, st.text(max_size=5), st.text(max_size=5))))
    return Metadata(items, planner_data=draw(PLANNER_DATA), storage_data=storage, storage_meta=meta, version="1.0.0")


@settings(max_examples=150, deadline=None)
@given(metadata=metadatas())
def test_format_3_round_trips_any_writers_metadata(metadata: Metadata) -> None:
    """Items, chunks, properties, records, planner data (tuples as tuples), storage meta: all come back equal."""
    payload = table_encode.encode(metadata)
    assert payload is not None and b"pickle" not in payload
    back = table.decode(payload, Path("/ckpt/.metadata"))
    assert back.state_dict_metadata == metadata.state_dict_metadata
    assert dict(back.storage_data.items()) == metadata.storage_data and len(back.storage_data) == len(
        metadata.storage_data
    )
    assert back.planner_data == metadata.planner_data and repr(back.planner_data) == repr(metadata.planner_data)
    assert back.storage_meta == metadata.storage_meta and back.version == metadata.version
    assert set(back.storage_data.files) == {r.file for r in metadata.storage_data.values()}


def test_a_checkpoint_is_written_in_format_3_and_loads(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    data = (tmp_path / "ckpt" / METADATA).read_bytes()
    assert data.startswith(table.PREFIX) and data[-40:-32] == SEAL_MAGIC_V3
    assert same(dcp_load(tmp_path / "ckpt", state()), state())


def test_metadata_format_3_cannot_express_is_written_as_format_2(tmp_path: Path) -> None:
    """Planner data of a type JSON and the tags do not carry (a custom planner's) falls back to the sealed pickle,
    which loads as before."""
    dcp_save(state(), tmp_path / "ckpt")
    metadata = read_metadata(tmp_path / "ckpt")
    metadata.storage_data = dict(metadata.storage_data.items())
    metadata.planner_data = {"w": torch.Size([3])}
    assert table_encode.encode(metadata) is None
    (tmp_path / "ckpt" / METADATA).write_bytes(seal(metadata))
    assert (tmp_path / "ckpt" / METADATA).read_bytes()[-40:-32] == SEAL_MAGIC
    assert read_metadata(tmp_path / "ckpt").planner_data == {"w": torch.Size([3])}


def test_a_format_2_checkpoint_still_loads(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    metadata = read_metadata(tmp_path / "ckpt")
    metadata.storage_data = dict(metadata.storage_data.items())
    payload = pickle.dumps(metadata, protocol=2)
    (tmp_path / "ckpt" / METADATA).write_bytes(payload + SEAL_MAGIC + hashlib.sha256(payload).digest())
    assert same(dcp_load(tmp_path / "ckpt", state()), state())


# -- forged tables -----------------------------------------------------------------------------------


def split(data: bytes) -> tuple[dict[str, Any], bytes]:
    """A sealed format-3 .metadata's header and the bytes after it."""
    payload = data[:-40]
    start = len(table.PREFIX) + 8
    length = int.from_bytes(payload[len(table.PREFIX) : start], "little")
    return json.loads(payload[start : start + length]), payload[start + length :]


def join(header: dict[str, Any], body: bytes) -> bytes:
    """A forger's re-sealed .metadata."""
    text = json.dumps(header).encode()
    payload = table.PREFIX + len(text).to_bytes(8, "little") + text + body
    return payload + SEAL_MAGIC_V3 + hashlib.sha256(payload).digest()


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    path = tmp_path_factory.mktemp("forged") / "ckpt"
    dcp_save(state(3), path, compression="zstd")
    return path, (path / METADATA).read_bytes()


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(1 << 70), 1 << 70),
    st.text(max_size=12),
    st.floats(),
    st.lists(st.integers(-5, 10**6), max_size=4),
    st.just({"d": 1}),
    st.just(data_file("c" * 32, 1)),
    st.just("../x"),
    st.just([[0, [1]]]),
)


def forge_header(header: dict[str, Any], data: Any) -> None:
    """Replace one value anywhere in the header with junk."""
    node: Any = header
    while True:
        keys = list(node) if isinstance(node, dict) else list(range(len(node)))
        if not keys:
            return
        key = data.draw(st.sampled_from(keys))
        if isinstance(node[key], (dict, list)) and node[key] and data.draw(st.booleans()):
            node = node[key]
            continue
        node[key] = data.draw(JUNK)
        return


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_forged_format_3_table_is_a_checkpoint_error_or_loads_right(saved: tuple[Path, bytes], data: Any) -> None:
    """A forger who edits the header or the integer columns and re-seals gets a named CheckpointError, never wrong
    tensors; or, where the edit renamed an item, DCP's own "Missing key" (as for any checkpoint without the key)."""
    path, good = saved
    header, body = split(good)
    if data.draw(st.booleans()):
        forge_header(header, data)
    else:
        at = data.draw(st.integers(0, max(0, len(body) // 8 - 1)))
        value = data.draw(st.integers(-(1 << 63), (1 << 63) - 1))
        body = body[: 8 * at] + value.to_bytes(8, "little", signed=True) + body[8 * at + 8 :]
    (path / METADATA).write_bytes(join(header, body))
    try:
        out = dcp_load(path, state(3))
    except CheckpointError:
        return
    except RuntimeError as e:
        assert str(e).startswith("Missing key in checkpoint state_dict")
        return
    finally:
        (path / METADATA).write_bytes(good)
    assert same(out, state(3))


def test_deep_planner_data_and_a_bad_header_are_refused(tmp_path: Path) -> None:
    dcp_save(state(), tmp_path / "ckpt")
    good = (tmp_path / "ckpt" / METADATA).read_bytes()
    header, body = split(good)
    deep: Any = 1
    for _ in range(100):
        deep = {"l": [deep]}
    for edit, problem in (
        ({"planner_data": deep}, "nested too deep|recursion"),
        ({"format": "ckptio-dcp/9"}, "not a format-3 header"),
        ({"ints": header["ints"] + 1}, "columns of the wrong length"),
    ):
        (tmp_path / "ckpt" / METADATA).write_bytes(join(header | edit, body))
        with pytest.raises(InvalidCheckpoint, match=problem):
            dcp_load(tmp_path / "ckpt", state())
    (tmp_path / "ckpt" / METADATA).write_bytes(good[: len(table.PREFIX) + 20])
    with pytest.raises(InvalidCheckpoint, match="without its seal"):
        dcp_load(tmp_path / "ckpt", state())


# -- a rank checks and opens what it reads -------------------------------------------------------------


def test_a_load_checks_only_the_records_it_reads(tmp_path: Path) -> None:
    """A forged record of "b" does not stop a load of "w" alone (its bytes are never read), and stops a load of
    "b" with an error naming it."""
    dcp_save(state(), tmp_path / "ckpt")
    header, body = split((tmp_path / "ckpt" / METADATA).read_bytes())
    [b] = [k for k, item in enumerate(header["items"]) if item[0] == "b"]
    position = sum(item[4] * (2 * len(item[2]) + table.FIXED) for item in header["items"][:b])
    fixed = position + 2 * len(header["items"][b][2])  # its one chunk's file index
    body = body[: 8 * fixed] + (7).to_bytes(8, "little") + body[8 * fixed + 8 :]
    (tmp_path / "ckpt" / METADATA).write_bytes(join(header, body))
    assert torch.equal(dcp_load(tmp_path / "ckpt", {"w": state()["w"]})["w"], state()["w"])
    with pytest.raises(InvalidCheckpoint, match="'b': table index"):
        dcp_load(tmp_path / "ckpt", state())


def test_a_rank_opens_only_the_data_files_its_plan_reads(tmp_path: Path) -> None:
    """Two ranks' files in one checkpoint (rank 1's "b" beside rank 0's "w"): a load of "w" opens rank 0's file
    alone, so it still loads with rank 1's file gone; a load of "b" then names the missing file."""
    dcp_save({"w": state()["w"]}, tmp_path / "ckpt")
    dcp_save({"b": state()["b"]}, tmp_path / "other")
    first, second = read_metadata(tmp_path / "ckpt"), read_metadata(tmp_path / "other")
    [other_file] = second.storage_data.files
    moved = data_file(other_file[:32], 1)
    shutil.copy(tmp_path / "other" / other_file, tmp_path / "ckpt" / moved)
    records = dict(first.storage_data.items())
    records |= {i: dataclasses.replace(r, file=moved) for i, r in second.storage_data.items()}
    merged = Metadata(
        first.state_dict_metadata | second.state_dict_metadata,
        planner_data={"w": ("w",), "b": ("b",)},
        storage_data=records,
        storage_meta=first.storage_meta,
        version=first.version,
    )
    (tmp_path / "ckpt" / METADATA).write_bytes(seal(merged))
    both = {"w": state()["w"], "b": state()["b"]}
    assert same(dcp_load(tmp_path / "ckpt", both), both)
    (tmp_path / "ckpt" / moved).unlink()
    assert torch.equal(dcp_load(tmp_path / "ckpt", {"w": both["w"]})["w"], both["w"])
    with pytest.raises(InvalidCheckpoint, match=f"{moved}: not a valid ckptio checkpoint: missing"):
        dcp_load(tmp_path / "ckpt", both)
