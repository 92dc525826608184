"""Chunk codecs: bit-exact round trips for every dtype, descriptors, and refusal of damaged or mis-sized input."""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("blosc2", reason="ckptio's codecs are not installed: pip install 'ckptio[codecs]'")
pytest.importorskip("zstandard", reason="ckptio's codecs are not installed: pip install 'ckptio[codecs]'")
import blosc2
import torch
from ckptio import CheckpointError, codec
from ckptio.codec import CodecError, CodecUnavailable
from ckptio.codec.blosc import BloscCodec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.needs_torch

HAS_ZIPNN = importlib.util.find_spec("zipnn") is not None
CODECS = ["none", "zstd", "blosc", "blosc-fast", *(["zipnn"] if HAS_ZIPNN else [])]
COMPRESSING = [name for name in CODECS if name != "none"]
FLOATS = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
FP8 = [torch.float8_e4m3fn] if hasattr(torch, "float8_e4m3fn") else []
DTYPES = [*FLOATS, *FP8, torch.int64, torch.int8, torch.uint8, torch.bool]


def raw(t: torch.Tensor) -> np.ndarray:
    """A tensor's bytes as a flat uint8 array (what the storage layer hands a codec)."""
    return t.contiguous().reshape(-1).view(torch.uint8).numpy()


def realistic(dtype: torch.dtype, n: int, seed: int = 0) -> torch.Tensor:
    """Weights-like values N(0, 0.02) in float dtypes, full-range integers otherwise."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        return (torch.randn(n, generator=g) * 0.02).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, (n,), generator=g, dtype=dtype)


def with_payloads(t: torch.Tensor, seed: int = 1) -> torch.Tensor:
    """Overwrite a slice with random bits (NaNs with arbitrary payloads, Infs, denormals) and all-ones elements."""
    out = t.clone()
    if out.dtype == torch.bool:
        return out
    bytes_view = out.view(torch.uint8)
    g = torch.Generator().manual_seed(seed)
    quarter = bytes_view.numel() // 4
    bytes_view[:quarter] = torch.randint(0, 256, (quarter,), dtype=torch.uint8, generator=g)
    bytes_view[quarter : quarter + 8 * out.element_size()] = 0xFF  # NaN with every payload bit set
    if out.dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64) and out.numel() >= 3:
        out[-3:] = torch.tensor([float("inf"), float("-inf"), -0.0]).to(out.dtype)
    return out


def roundtrip(c: codec.Codec, data: np.ndarray, itemsize: int) -> tuple[bytes, bytes]:
    """Encode, then decode both ways (new buffer and into a caller's buffer); both results as bytes."""
    blob = c.encode(data, itemsize)
    decoded = bytes(c.decode(blob, data.nbytes, itemsize))
    out = bytearray(data.nbytes)
    c.decode_into(blob, memoryview(out), itemsize)
    return decoded, bytes(out)


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_roundtrip_is_bit_exact_for_every_dtype(name: str, dtype: torch.dtype) -> None:
    t = with_payloads(realistic(dtype, 40_000))
    if dtype.is_floating_point:
        assert torch.isnan(t.float()).any()
    data = raw(t)
    decoded, into = roundtrip(codec.get(name, threads=2), data, t.element_size())
    assert decoded == data.tobytes()
    assert into == data.tobytes()


@pytest.mark.parametrize("name", CODECS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int64, torch.uint8], ids=str)
def test_empty_tensors_roundtrip(name: str, dtype: torch.dtype) -> None:
    empty = torch.empty(0, dtype=dtype)
    c = codec.get(name)
    blob = c.encode(raw(empty), empty.element_size())
    assert bytes(c.decode(blob, 0, empty.element_size())) == b""
    c.decode_into(blob, memoryview(bytearray()), empty.element_size())
    with pytest.raises(CodecError):
        c.decode(blob, 1, empty.element_size())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(CODECS),
    dtype=st.sampled_from(DTYPES),
    elements=st.integers(0, (3 << 20) // 8) | st.integers(0, 64),
    seed=st.integers(0, 2**16),
    noisy=st.booleans(),
)
def test_roundtrip_any_size_dtype_codec(name: str, dtype: torch.dtype, elements: int, seed: int, noisy: bool) -> None:
    t = realistic(dtype, elements, seed)
    if noisy and elements:
        t = with_payloads(t, seed)
    data = raw(t)
    decoded, into = roundtrip(codec.get(name), data, t.element_size())
    assert decoded == into == data.tobytes()


@pytest.mark.parametrize("name", CODECS)
def test_descriptor_rebuilds_the_same_codec(name: str) -> None:
    writer = codec.get(name, threads=2)
    reader = codec.from_descriptor(writer.descriptor, threads=1)
    assert (reader.name, reader.descriptor) == (writer.name, writer.descriptor)
    data = raw(realistic(torch.bfloat16, 10_000))
    assert bytes(reader.decode(writer.encode(data, 2), data.nbytes, 2)) == data.tobytes()


def test_descriptors_record_level_and_settings() -> None:
    assert codec.get("none").descriptor == "none"
    assert codec.get("zstd").descriptor == "zstd/3"
    assert codec.get("zstd", level=1).descriptor == "zstd/1"
    assert codec.get("blosc").descriptor == "blosc2/zstd-1/shuffle/xxh3"
    assert codec.get("blosc", level=5).descriptor == "blosc2/zstd-5/shuffle/xxh3"
    assert codec.get("blosc-fast").descriptor == "blosc2/zstd-1/bitshuffle/xxh3"
    assert codec.from_descriptor("blosc2/lz4-5/bitshuffle/xxh3").name == "blosc"
    assert {"none", "zstd", "blosc", "blosc-fast"} <= set(codec.names())
    assert ("zipnn" in codec.names()) == HAS_ZIPNN


@pytest.mark.parametrize(
    "descriptor",
    [
        "",
        "lzma/1",
        "zstd",
        "zstd/x",
        "zstd/99",
        "none/1",
        "blosc2/zstd-1/shuffle",
        "blosc2/foo-1/shuffle/xxh3",
        "blosc2/zstd-1/delta/xxh3",
        "blosc2/zstd-12/shuffle/xxh3",
        "blosc2/zstd/shuffle/xxh3",
        "zipnn/crc",
    ],
)
def test_unknown_or_malformed_descriptor_raises(descriptor: str) -> None:
    with pytest.raises(CodecError, match="descriptor"):
        codec.from_descriptor(descriptor)


def test_unknown_name_and_bad_arguments_raise() -> None:
    with pytest.raises(CodecError, match="unknown codec 'lzma'"):
        codec.get("lzma")
    with pytest.raises(ValueError, match="level"):
        codec.get("none", level=3)
    with pytest.raises(ValueError, match="threads"):
        codec.get("zstd", threads=0)
    with pytest.raises(CodecError, match="itemsize"):
        codec.get("blosc").encode(b"abcd", 0)
    with pytest.raises(CodecError, match="itemsize"):
        codec.get("blosc").encode(b"abcd", 256)
    with pytest.raises(CodecError, match="contiguous"):
        codec.get("zstd").encode(memoryview(bytearray(64))[::2], 1)


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("none", {"level": 3}), ("zstd", {"threads": 0}), ("zstd", {"level": 99}), ("blosc", {"level": 10})],
)
def test_bad_codec_arguments_are_checkpoint_errors(name: str, arguments: dict[str, int]) -> None:
    """A level or thread count a codec cannot take is a CheckpointError (OptionError), still a ValueError."""
    with pytest.raises(CheckpointError, match=r"level|threads") as caught:
        codec.get(name, **arguments)
    assert isinstance(caught.value, ValueError)


def test_missing_library_is_reported_as_unavailable() -> None:
    with pytest.raises(CodecUnavailable, match="pip install gdsbench_no_such_library"):
        codec._module("zstd", "gdsbench_no_such_library")


@pytest.mark.parametrize("name", COMPRESSING)
def test_every_bit_flip_is_refused_or_harmless(name: str) -> None:
    """One flipped bit anywhere in an encoded chunk raises CodecError; it never decodes to different bytes."""
    c = codec.get(name)
    data = raw(realistic(torch.bfloat16, 1500))
    blob = bytes(c.encode(data, 2))
    refused = 0
    for at in range(len(blob)):
        bad = bytearray(blob)
        bad[at] ^= 1 << (at % 8)
        try:
            decoded = bytes(c.decode(bytes(bad), data.nbytes, 2))
        except CodecError:
            refused += 1
        else:
            assert decoded == data.tobytes(), f"byte {at}"
    assert refused >= len(blob) - 4


@pytest.mark.parametrize("name", CODECS)
def test_truncated_or_extended_chunks_are_refused(name: str) -> None:
    c = codec.get(name)
    data = raw(realistic(torch.float32, 5000))
    blob = bytes(c.encode(data, 4))
    for cut in sorted({0, 1, 7, 8, 31, len(blob) // 2, len(blob) - 1}):
        with pytest.raises(CodecError):
            c.decode(blob[:cut], data.nbytes, 4)
    with pytest.raises(CodecError):
        c.decode(blob + b"\0", data.nbytes, 4)


@pytest.mark.parametrize("name", CODECS)
def test_wrong_expected_size_is_refused(name: str) -> None:
    c = codec.get(name)
    data = raw(realistic(torch.bfloat16, 3000))
    blob = c.encode(data, 2)
    for nbytes in (0, data.nbytes - 2, data.nbytes + 2, 2 * data.nbytes):
        with pytest.raises(CodecError, match="expected"):
            c.decode(blob, nbytes, 2)
    with pytest.raises(CodecError, match="expected"):
        c.decode_into(blob, memoryview(bytearray(data.nbytes + 2)), 2)
    with pytest.raises(CodecError, match="read-only"):
        c.decode_into(blob, memoryview(bytes(data.nbytes)), 2)


@pytest.mark.parametrize("name", CODECS)
def test_encode_leaves_the_input_untouched(name: str) -> None:
    """zipnn rewrites its input in place; every codec here must hand it a private copy."""
    data = raw(realistic(torch.bfloat16, 20_000))
    before = data.tobytes()
    codec.get(name).encode(data, 2)
    assert data.tobytes() == before


@pytest.mark.parametrize("name", CODECS)
def test_one_codec_shared_by_threads(name: str) -> None:
    c = codec.get(name)
    chunks = [raw(realistic(torch.bfloat16, 50_000 + i, seed=i)) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        blobs = list(pool.map(lambda x: c.encode(x, 2), chunks))
        back = list(pool.map(lambda pair: bytes(c.decode(pair[0], pair[1].nbytes, 2)), zip(blobs, chunks)))
    assert back == [x.tobytes() for x in chunks]


@pytest.mark.parametrize(("name", "least"), [("zstd", 0.18), ("blosc", 0.30), ("blosc-fast", 0.25)])
def test_float_codecs_save_what_they_claim_on_bf16_weights(name: str, least: float) -> None:
    data = raw(realistic(torch.bfloat16, 1 << 20))
    saved = 1 - len(codec.get(name).encode(data, 2)) / data.nbytes
    assert least <= saved < 0.40


def test_zstd_chunks_are_plain_zstd_frames() -> None:
    import zstandard

    data = raw(realistic(torch.float32, 10_000))
    blob = codec.get("zstd", threads=2).encode(data, 4)
    assert zstandard.ZstdDecompressor().decompress(blob) == data.tobytes()


def test_blosc_skips_the_byte_shuffle_for_one_byte_elements() -> None:
    data = raw(realistic(torch.int8, 100_000))
    assert BloscCodec().encode(data, 1) == BloscCodec(filter="nofilter").encode(data, 1)


def test_blosc_pieces_decode_with_the_default_codec() -> None:
    data = raw(with_payloads(realistic(torch.float32, 100_001)))
    blob = BloscCodec(piece_bytes=65_536 + 1).encode(data, 4)
    assert bytes(codec.from_descriptor("blosc2/zstd-1/shuffle/xxh3").decode(blob, data.nbytes, 4)) == data.tobytes()
    assert blosc2.get_cbuffer_sizes(blob)[0] == 65_536  # whole fp32 elements per piece


@pytest.mark.parametrize("name", CODECS)
def test_encoded_parts_copied_into_place_are_the_encoded_chunk(name: str) -> None:
    """encode_parts (blosc's own: several pieces and the trailer; the others' encode) copied back to back into a
    buffer are exactly encode's bytes, and decode bit-exact; a buffer too small is refused."""
    c = BloscCodec(piece_bytes=65_536 + 1) if name == "blosc" else codec.get(name)
    data = raw(with_payloads(realistic(torch.float32, 100_001)))
    parts = codec.encode_parts(c, data, 4)
    pieces = {"blosc": -(-data.nbytes // 65_536), "blosc-fast": 1}  # blosc2 chunks, then the trailer
    assert len(parts) == (pieces[name] + 1 if name in pieces else 1)
    out = bytearray(data.nbytes + 4096)
    size = codec.copy_parts(parts, memoryview(out), c.descriptor)
    assert bytes(out[:size]) == bytes(c.encode(data, 4))
    assert bytes(c.decode(bytes(out[:size]), data.nbytes, 4)) == data.tobytes()
    with pytest.raises(CodecError, match="does not fit"):
        codec.copy_parts(parts, memoryview(bytearray(size - 1)), c.descriptor)


@pytest.mark.slow
def test_blosc_splits_chunks_above_its_2gib_limit() -> None:
    """A chunk larger than one blosc2 chunk can hold is split into 1 GiB pieces and decoded back in place."""
    nbytes = (2 << 30) + 4096
    data = np.zeros(nbytes, dtype=np.uint8)  # pages never written stay unallocated: ~2 GiB resident, not 4
    data[:: (64 << 20) + 1] = 7  # sparse writes: with transparent huge pages each touches 2 MiB
    c = codec.get("blosc", threads=2)
    blob = c.encode(data, 2)
    assert blosc2.get_cbuffer_sizes(blob)[0] == 1 << 30  # the first of three pieces
    out = np.empty(nbytes, dtype=np.uint8)
    c.decode_into(blob, memoryview(out), 2)
    step = 1 << 28  # compared a slice at a time: a whole-array comparison would hold 2 GiB more
    assert all(np.array_equal(out[at : at + step], data[at : at + step]) for at in range(0, nbytes, step))
