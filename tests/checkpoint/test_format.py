"""Hostile and damaged files: each malformation raises its named error, never a stray exception."""

from __future__ import annotations

import json
import os
import pathlib

import pytest
import torch
from ckptio import CheckpointError, load, save
from ckptio import format as fmt
from ckptio.errors import CorruptCheckpoint, InvalidCheckpoint, TruncatedCheckpoint
from ckptio.inspect import read_index
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import assert_same, random_tensor


@pytest.fixture
def ckpt(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict]:
    """A small checkpoint with nested names, a multi-page storage and a tiny one."""
    sd = {
        "layers": [{"attn": {"wq": random_tensor((300, 70), torch.bfloat16, i)}} for i in range(4)],
        "bias": random_tensor((10,), torch.float32, 9),
        "step": 12,
    }
    path = tmp_path / "c.pt"
    save(sd, path)
    return path, sd


def _flip(path: pathlib.Path, offset: int) -> None:
    """Invert one byte of a file in place."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def _entry(path: pathlib.Path, name: str) -> fmt.StorageEntry:
    """The index entry of the storage first used by tensor `name`."""
    return next(s for s in read_index(path).storages if s.name == name)


@pytest.mark.parametrize("where", [0, 4096, -1])
def test_flipped_byte_names_the_tensor(ckpt: tuple[pathlib.Path, dict], where: int) -> None:
    """A flipped data byte (first page, later page, last byte) -> CorruptCheckpoint naming the tensor."""
    path, _ = ckpt
    e = _entry(path, "layers.3.attn.wq")
    _flip(path, e.offset + (where if where >= 0 else e.nbytes - 1))
    with pytest.raises(CorruptCheckpoint) as info:
        load(path)
    assert info.value.tensor == "layers.3.attn.wq" and info.value.path == str(path)
    assert "layers.3.attn.wq" in str(info.value) and str(path) in str(info.value)


def test_flipped_small_tensor_and_verify_false(ckpt: tuple[pathlib.Path, dict]) -> None:
    """Sub-page storages are checked too; verify=False skips the check and returns the bytes as stored."""
    path, sd = ckpt
    _flip(path, _entry(path, "bias").offset + 3)
    with pytest.raises(CorruptCheckpoint, match="bias"):
        load(path)
    out = load(path, verify=False)
    assert not torch.equal(out["bias"], sd["bias"])
    assert_same(sd["layers"], out["layers"])


def test_flipped_pickle_is_detected(ckpt: tuple[pathlib.Path, dict]) -> None:
    """Damage to data.pkl is caught by its digest before unpickling."""
    path, _ = ckpt
    _flip(path, read_index(path).pickle_offset + 5)
    with pytest.raises(CorruptCheckpoint, match="pickle"):
        load(path)


def test_flipped_index_is_detected(ckpt: tuple[pathlib.Path, dict]) -> None:
    """Damage to the index record is caught by the digest in the header."""
    path, _ = ckpt
    _flip(path, read_index(path).header.index_offset + 10)
    with pytest.raises(CorruptCheckpoint, match="index"):
        read_index(path)


@pytest.mark.parametrize("keep", [0.999, 0.5, 0.01])
def test_truncated(ckpt: tuple[pathlib.Path, dict], keep: float) -> None:
    """Cut anywhere -> TruncatedCheckpoint(path, expected, actual); before the header is complete,
    `expected` is the least size that would hold it."""
    path, _ = ckpt
    size = path.stat().st_size
    cut = int(size * keep)
    os.truncate(path, cut)
    with pytest.raises(TruncatedCheckpoint) as info:
        load(path)
    header_end = 4096 + fmt.HEADER.size
    assert (info.value.expected, info.value.actual) == (size if cut >= header_end else header_end, cut)


@pytest.mark.parametrize("content", [b"", b"hello world", b"PK\x03\x04" + bytes(100), os.urandom(20000)])
def test_garbage_is_invalid(tmp_path: pathlib.Path, content: bytes) -> None:
    """Empty, text, a bare zip signature and random bytes are not checkpoints."""
    path = tmp_path / "g.pt"
    path.write_bytes(content)
    with pytest.raises(InvalidCheckpoint):
        load(path)


def test_plain_torch_save_is_not_ours(tmp_path: pathlib.Path) -> None:
    """A torch.save file is a valid zip but has no gdsbench header: InvalidCheckpoint says so."""
    torch.save({"a": torch.ones(3)}, tmp_path / "t.pt")
    with pytest.raises(InvalidCheckpoint, match=r"torch\.load"):
        load(tmp_path / "t.pt")


def _rewrite_header(path: pathlib.Path, **changes: int) -> None:
    """Rewrite fields of the 48-byte header record (at offset 4096) in place."""
    with open(path, "r+b") as f:
        f.seek(4096)
        _, version, _, size, ioff, ilen, ixxh = fmt.HEADER.unpack(f.read(fmt.HEADER.size))
        fields = {
            "version": version,
            "file_size": size,
            "index_offset": ioff,
            "index_nbytes": ilen,
            "index_xxh3": ixxh,
        } | changes
        f.seek(4096)
        f.write(fmt.Header(**fields).pack())


def test_oversized_index_is_invalid(ckpt: tuple[pathlib.Path, dict]) -> None:
    """An index length beyond the limit is refused before anything is allocated."""
    path, _ = ckpt
    _rewrite_header(path, index_nbytes=fmt.MAX_INDEX_BYTES + 1)
    with pytest.raises(InvalidCheckpoint, match="exceeds"):
        load(path)


def test_future_version_and_trailing_bytes_are_invalid(ckpt: tuple[pathlib.Path, dict]) -> None:
    """An unknown format version, and bytes after the declared end, are InvalidCheckpoint."""
    path, _ = ckpt
    _rewrite_header(path, version=99)
    with pytest.raises(InvalidCheckpoint, match="version 99"):
        load(path)
    _rewrite_header(path, version=1)
    with open(path, "ab") as f:
        f.write(b"x")
    with pytest.raises(InvalidCheckpoint, match="trailing"):
        load(path)


def _rewrite_index(path: pathlib.Path, edit) -> None:
    """Apply `edit` to the index JSON, re-digest it, and fix the header (a forged but consistent index)."""
    idx = read_index(path)
    with open(path, "r+b") as f:
        f.seek(idx.header.index_offset)
        doc = json.loads(f.read(idx.header.index_nbytes))
        edit(doc)
        raw = json.dumps(doc, separators=(",", ":")).encode().ljust(idx.header.index_nbytes)
        assert len(raw) == idx.header.index_nbytes
        f.seek(idx.header.index_offset)
        f.write(raw)
    from ckptio import integrity

    _rewrite_header(path, index_xxh3=integrity.index_digest(raw))


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda d: d["storages"][0].update(nbytes=d["storages"][0]["nbytes"] + 2), "size"),
        (lambda d: d["storages"][0].update(dtype="nosuchty"), "dtype"),
        (lambda d: d["storages"][0].update(key="9"), "record missing"),
        (lambda d: d["storages"][0].update(digests=["zz"]), "digests"),
        (lambda d: d.update(chunk_bytes=1000), "chunk_bytes"),
        (lambda d: d.update(checksum="md5"), "checksum"),
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d["storages"].__setitem__(0, dict(d["storages"][-1])), "duplicate"),
    ],
)
def test_malformed_index_fields(ckpt: tuple[pathlib.Path, dict], edit, match: str) -> None:
    """Each inconsistent index field is rejected with InvalidCheckpoint naming the problem."""
    path, _ = ckpt
    _rewrite_index(path, edit)
    with pytest.raises(InvalidCheckpoint, match=match):
        load(path)


def test_overlapping_records_are_invalid(ckpt: tuple[pathlib.Path, dict]) -> None:
    """A central directory pointing two storages at the same bytes is refused."""
    path, _ = ckpt
    data = bytearray(path.read_bytes())
    names = [f"archive/data/{s.key}".encode() for s in read_index(path).storages[:2]]
    offsets = []
    for name in names:
        at = data.rfind(name)  # the central directory copy is the last occurrence
        entry = at - 46
        assert data[entry : entry + 4] == b"PK\x01\x02"
        offsets.append(entry + 42)
    data[offsets[1] : offsets[1] + 4] = data[offsets[0] : offsets[0] + 4]
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidCheckpoint):
        load(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frac=st.floats(0, 1, exclude_max=True), value=st.integers(0, 255))
def test_fuzz_any_byte_write_gives_named_error_or_same_data(tmp_path: pathlib.Path, frac: float, value: int) -> None:
    """Overwriting any single byte either changes nothing observable or raises a CheckpointError."""
    path = tmp_path / "f.pt"
    sd = {"a": random_tensor((2000,), torch.float32, 1), "b": [random_tensor((3,), torch.int8, 2)], "n": "x"}
    save(sd, path)
    data = bytearray(path.read_bytes())
    data[int(frac * len(data))] = value
    path.write_bytes(bytes(data))
    try:
        out = load(path)
    except CheckpointError:
        return
    assert_same(sd, out)
