"""Each backend round-trips the same data; O_DIRECT falls back with a warning; gds reports why not."""

from __future__ import annotations

import errno
import os
import pathlib
import tempfile

import pytest
import torch

from gdsbench.checkpoint import BackendUnavailable, DirectIOFallbackWarning, load, save
from gdsbench.checkpoint.io import direct, gds

from .conftest import assert_same, random_tensor

CPU_BACKENDS = ["auto", "direct", "buffered"]


def _state() -> dict:
    """Storages below, at and above a page and a chunk, with unaligned tails and a shared view."""
    big = random_tensor((5 << 18,), torch.float32, 1)  # 5 MiB: several 1 MiB chunks below
    return {
        "tiny": random_tensor((3,), torch.int8, 2),
        "page": random_tensor((1024,), torch.float32, 3),
        "odd": random_tensor((4097,), torch.bfloat16, 4),
        "big": big,
        "view": big[1000:2000],
        "empty": torch.empty(0, dtype=torch.float16),
        "n": 1,
    }


@pytest.mark.parametrize("save_backend", CPU_BACKENDS)
@pytest.mark.parametrize("load_backend", CPU_BACKENDS)
def test_backends_round_trip(tmp_path: pathlib.Path, save_backend: str, load_backend: str) -> None:
    """Any CPU backend reads what any other wrote, bit-exactly (tmp_path is on disk, not tmpfs)."""
    sd = _state()
    save(sd, tmp_path / "c.pt", backend=save_backend, chunk_bytes=1 << 20, buffer_bytes=2 << 20)
    out = load(tmp_path / "c.pt", backend=load_backend)
    assert_same(sd, out)
    assert out["view"].untyped_storage().data_ptr() == out["big"].untyped_storage().data_ptr()


def test_loaded_memory_is_page_aligned_and_resaves_without_copy(tmp_path: pathlib.Path) -> None:
    """Loaded storages start page-aligned, so saving them again takes the no-copy O_DIRECT path."""
    sd = _state()
    save(sd, tmp_path / "a.pt")
    out = load(tmp_path / "a.pt")
    assert out["big"].untyped_storage().data_ptr() % 4096 == 0
    save(out, tmp_path / "b.pt", backend="direct")
    assert_same(sd, load(tmp_path / "b.pt"))


def _refuse_odirect(*args: object, **kwargs: object) -> int:
    """FAKE: what open(2) with O_DIRECT does on filesystems that do not support it."""
    raise OSError(errno.EINVAL, "Invalid argument (fake O_DIRECT refusal)")


@pytest.mark.parametrize("backend", ["auto", "direct"])
def test_fallback_to_buffered_warns_fake_einval(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """With O_DIRECT refused (faked EINVAL), save and load warn and still round-trip."""
    monkeypatch.setattr(direct.DirectBackend, "open_write", _refuse_odirect)
    monkeypatch.setattr(direct.DirectBackend, "open_read", _refuse_odirect)
    sd = _state()
    with pytest.warns(DirectIOFallbackWarning, match="O_DIRECT"):
        save(sd, tmp_path / "c.pt", backend=backend)
    with pytest.warns(DirectIOFallbackWarning):
        out = load(tmp_path / "c.pt", backend=backend)
    assert_same(sd, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def _odirect_refused(directory: str) -> bool:
    """Whether the filesystem holding `directory` refuses O_DIRECT (a real capability probe)."""
    fd, probe = tempfile.mkstemp(dir=directory)
    os.close(fd)
    try:
        os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        return False
    except OSError as e:
        return e.errno == errno.EINVAL
    finally:
        os.unlink(probe)


def test_fallback_on_dev_shm_real() -> None:
    """On a tmpfs that refuses O_DIRECT, save/load warn and round-trip (tmpfs accepts it since Linux 6.6)."""
    if not os.path.isdir("/dev/shm") or not _odirect_refused("/dev/shm"):
        pytest.skip(
            f"/dev/shm accepts O_DIRECT on kernel {os.uname().release} (tmpfs supports it since 6.6); "
            "the fallback is covered by the fake-EINVAL test"
        )
    sd = _state()
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        with pytest.warns(DirectIOFallbackWarning):
            save(sd, os.path.join(d, "c.pt"))
        with pytest.warns(DirectIOFallbackWarning):
            assert_same(sd, load(os.path.join(d, "c.pt")))


def test_dev_shm_round_trip() -> None:
    """Whatever /dev/shm supports, checkpoints there round-trip."""
    sd = _state()
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        save(sd, os.path.join(d, "c.pt"))
        assert_same(sd, load(os.path.join(d, "c.pt")))


def test_gds_backend_round_trip(tmp_path: pathlib.Path) -> None:
    """gds reads straight into CUDA memory; skipped with the capability check's reason."""
    reason = gds.unavailable()
    if reason:
        pytest.skip(f"gds backend unavailable: {reason}")
    sd = _state()
    save(sd, tmp_path / "c.pt")
    out = load(tmp_path / "c.pt", map_location="cuda", backend="gds")
    assert out["big"].is_cuda
    assert_same(sd, {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in out.items()})


def test_gds_unavailable_says_why(tmp_path: pathlib.Path) -> None:
    """Asking for gds where it cannot run raises BackendUnavailable carrying the probe's reason."""
    reason = gds.unavailable()
    if reason is None:
        pytest.skip("gds is available here")
    save({"a": torch.ones(2)}, tmp_path / "c.pt")
    with pytest.raises(BackendUnavailable) as info:
        load(tmp_path / "c.pt", backend="gds", map_location="cuda" if torch.cuda.is_available() else "cpu")
    assert reason in str(info.value) or "CUDA" in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_map_location_without_gpu_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    """map_location='cuda' with no GPU raises BackendUnavailable saying so."""
    save({"a": torch.ones(2)}, tmp_path / "c.pt")
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        load(tmp_path / "c.pt", map_location="cuda:0")


def test_bad_options_are_value_errors(tmp_path: pathlib.Path) -> None:
    """Unknown backend/checksum names and bad sizes fail fast with ValueError."""
    for kwargs in [
        {"backend": "nope"},
        {"checksum": "md5"},
        {"chunk_bytes": 1000},
        {"threads": 0},
        {"buffer_bytes": 1 << 20, "chunk_bytes": 2 << 20},
    ]:
        with pytest.raises(ValueError):
            save({"a": torch.ones(2)}, tmp_path / "c.pt", **kwargs)
    assert not (tmp_path / "c.pt").exists()
