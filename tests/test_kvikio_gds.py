"""kvikio and the gds backend (issue 12, items 4, 10-13). This machine has no GPU and no kvikio, so the
CPU tests run the real engine and backend code against tests/fakes/kvikio_fake (a FAKE kvikio doing real
POSIX I/O into host memory) or kvikio_broken (a FAKE that raises at import as kvikio 26.x does when libcufile
cannot be opened); the needs_cuda tests run them for real on a GPU machine (the smoke command runs them)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("ckptio", reason="ckptio is not installed: pip install 'gdsbench[checkpoint]'")
import torch
from ckptio import IOOptions, load, save
from ckptio import format as fmt
from ckptio.backends import gds
from ckptio.errors import CorruptCheckpoint, TruncatedCheckpoint
from ckptio.memory import StagingCache
from ckptio.read import read_device

from gdsbench import config, runners, sysinfo
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint import kvikio as kvikio_engine

FAKES = Path(__file__).parent / "fakes"


@pytest.fixture
def fake_kvikio(monkeypatch):
    """The FAKE kvikio importable in this process (and its children), unloaded afterwards."""
    monkeypatch.syspath_prepend(str(FAKES / "kvikio_fake"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKES / "kvikio_fake"), os.environ.get("PYTHONPATH", "")]))
    yield
    for name in [m for m in sys.modules if m == "kvikio" or m.startswith("kvikio.")]:
        del sys.modules[name]


def _saved(tmp_path: Path) -> Path:
    """A checkpoint with a 40 MiB tensor (three 16 MiB chunks) and a small one."""
    path = tmp_path / "c.pt"
    save({"big": torch.arange(10 << 20, dtype=torch.float32), "b": torch.arange(17.0)}, path)
    return path


def _read_with_gds_reader(path: Path, threads: int) -> dict:
    """The gds backend's reader and read_device, into CPU tensors through the FAKE CuFile."""
    options = IOOptions(threads=threads)
    with fmt.pinned_index(path) as index, StagingCache() as cache:
        reader = gds.GdsReader(index.data_path, options, cache.get(4, index.chunk_bytes))
        try:
            return read_device(index, reader, torch.device("cpu"), verify=True)
        finally:
            reader.close()


def test_a_broken_kvikio_import_is_a_reason_not_a_traceback(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(FAKES / "kvikio_broken"))
    monkeypatch.delitem(sys.modules, "kvikio", raising=False)
    assert gds.import_problem() == (
        "kvikio not importable: OSError: libcufile.so.0: cannot open shared object file: No such file or directory"
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # the engine asks CUDA first, then kvikio
    reason = kvikio_engine.kvikio_reason()
    assert reason.startswith("kvikio not importable: OSError: libcufile.so.0") and "pip install kvikio-cu12" in reason


def test_gds_reader_sets_threads_checks_bytes_and_verifies_each_chunk(tmp_path, fake_kvikio, monkeypatch):
    path = _saved(tmp_path)
    storages = _read_with_gds_reader(path, threads=8)
    import kvikio.defaults

    assert kvikio.defaults.get("num_threads") == 8  # not kvikio's default of one thread
    entry = max(fmt.read_index(path).storages, key=lambda s: s.nbytes)
    big = torch.empty(0, dtype=torch.uint8).set_(storages[entry.key]).view(torch.float32)
    assert torch.equal(big, torch.arange(10 << 20, dtype=torch.float32))  # every chunk landed where it belongs
    monkeypatch.setenv("FAKE_KVIKIO_SHORT", "4096")
    with pytest.raises(TruncatedCheckpoint):  # a short read is never a smaller tensor
        _read_with_gds_reader(path, threads=1)


def test_gds_reader_refuses_a_flipped_byte(tmp_path, fake_kvikio):
    path = _saved(tmp_path)
    entry = max(fmt.read_index(path).storages, key=lambda s: s.nbytes)
    with open(path, "r+b") as f:
        f.seek(entry.offset + (20 << 20))  # in the second chunk
        byte = f.read(1)
        f.seek(entry.offset + (20 << 20))
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptCheckpoint, match="big"):
        _read_with_gds_reader(path, threads=4)


def test_kvikio_engine_checks_every_byte_count():
    class ShortFuture:  # kvikio's IOFuture.get() returns the bytes moved
        def get(self) -> int:
            return 10

    with pytest.raises(OSError, match="kvikio pwrite moved 10 of 20 bytes"):
        kvikio_engine.checked([(ShortFuture(), 20)], Path("data.bin"), "pwrite")


def test_kvikio_engine_is_threaded_by_the_case():
    runner = runners.get("kvikio")
    document = {
        "checkpoint_size": "16M",
        "matrix": {"engine": ["kvikio"], "pattern": ["save"], "transfer": ["GDS"], "threads": [1, 8]},
    }
    cases = config.from_dict(document, "t.yaml").cases
    assert runner.threaded and [c["threads"] for c in cases] == [1, 8]
    assert "threads=8" in runner.command(cases[1], RunContext(Path("/tmp"), 16 << 20))


def test_doctor_asks_kvikio_itself_and_reports_cufile_apart(fake_kvikio, monkeypatch):
    monkeypatch.setenv("FAKE_KVIKIO_PREFERRED", "1")
    monkeypatch.setenv("FAKE_KVIKIO_GDS", "1")
    monkeypatch.setenv("KVIKIO_NTHREADS", "3")
    probe = sysinfo.kvikio_probe()
    assert probe["installed"] and probe["importable"], probe
    assert probe["kvikio"] == {
        "version": "26.10.0+FAKE",
        "compat_mode_setting": "AUTO",
        "compat_preferred": True,
        "num_threads": 3,
    }
    assert probe["cufile"] == {"is_gds_available": True}
    from gdsbench import doctor

    ok, why = doctor._kvikio({"gpu_gds": {"kvikio": probe}})
    assert (
        not ok
        and "compat_mode=AUTO -> compat mode (POSIX, no cuFile)" in why
        and "cuFile: nvidia-fs available (GDS)" in why
    )
    monkeypatch.delenv("FAKE_KVIKIO_GDS")
    monkeypatch.setenv("FAKE_KVIKIO_PREFERRED", "0")
    probe = sysinfo.kvikio_probe()
    assert probe["cufile"]["is_gds_available"] is None and "RuntimeError" in probe["cufile"]["cufile_reason"]
    ok, why = doctor._kvikio({"gpu_gds": {"kvikio": probe}})
    assert ok and "-> cuFile" in why and "cuFile: unknown (RuntimeError" in why


def test_kvikio_probe_of_a_broken_kvikio_says_why(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(FAKES / "kvikio_broken"))
    monkeypatch.syspath_prepend(str(FAKES / "kvikio_broken"))
    probe = sysinfo.kvikio_probe()
    assert probe["installed"] and not probe["importable"] and "OSError: libcufile.so.0" in probe["reason"]


def test_cuda_map_location_without_gds_says_which_path(monkeypatch):
    load_mod = importlib.import_module("ckptio.loading")
    monkeypatch.setattr(gds, "unavailable", lambda: "no CUDA device")
    backend, how = load_mod._device_backend(IOOptions(backend="auto"))
    assert (
        backend == "direct"
        and how == "direct read to host memory, then copied to the device (gds unavailable: no CUDA device)"
    )


# -- on a GPU machine ---------------------------------------------------------------------------


@pytest.mark.needs_cuda
@pytest.mark.parametrize("threads", [1, 8])
def test_kvikio_engine_saves_and_loads_on_the_gpu(tmp_path, threads):
    """The kvikio engine through a real save and load at 1 and 8 kvikio threads: verified, with a path."""
    if kvikio_engine.kvikio_reason():
        pytest.skip(kvikio_engine.kvikio_reason())
    import kvikio.defaults as kd

    runner = runners.get("kvikio")
    document = {
        "checkpoint_size": "64M",
        "matrix": {"engine": ["kvikio"], "pattern": ["save", "load"], "transfer": ["GDS"], "threads": [threads]},
    }
    save_case, load_case = config.from_dict(document, "t.yaml").cases
    ctx = RunContext(directory=tmp_path, file_size=64 << 20)
    saved, loaded = runner.run(save_case, ctx), runner.run(load_case, ctx)
    assert kd.get("num_threads") == threads and f"kvikio {threads} threads" in saved.note
    assert saved.path in ("gds", "compat", "posix", "unknown") and loaded.path == saved.path
    assert "verified" in loaded.note
    ctx.resources.cleanup()


@pytest.mark.needs_cuda
def test_kvikio_engine_keeps_non_contiguous_copies_alive(tmp_path):
    """Transposed tensors are written through temporary contiguous copies that must outlive their writes."""
    if kvikio_engine.kvikio_reason():
        pytest.skip(kvikio_engine.kvikio_reason())
    staged = {f"t{i}": torch.randn(512, 1024, device="cuda").t() for i in range(16)}
    engine = kvikio_engine.Kvikio()
    case = config.from_dict(
        {"matrix": {"engine": ["kvikio"], "pattern": ["save"], "transfer": ["GDS"], "threads": [8]}}, "t.yaml"
    ).cases[0]
    engine.save(staged, tmp_path / "ckpt", case)
    out = engine.load(tmp_path / "ckpt", case, None)
    assert all(torch.equal(out[k], staged[k].contiguous()) for k in staged)


@pytest.mark.needs_cuda
def test_gds_load_round_trip_and_flipped_byte_on_the_gpu(tmp_path, caplog):
    """load(map_location='cuda', backend='gds'): bit-exact on the GPU, logs its path, refuses a flipped byte."""
    reason = gds.unavailable()
    if reason:
        pytest.skip(f"gds backend unavailable: {reason}")
    path = _saved(tmp_path)
    with caplog.at_level("INFO", logger="ckptio"):
        out = load(path, map_location="cuda", options=IOOptions(backend="gds", threads=8))
    assert out["big"].is_cuda and torch.equal(out["big"].cpu(), torch.arange(10 << 20, dtype=torch.float32))
    assert any("gds: kvikio" in r.getMessage() and "8 kvikio threads" in r.getMessage() for r in caplog.records)
    entry = max(fmt.read_index(path).storages, key=lambda s: s.nbytes)
    with open(path, "r+b") as f:
        f.seek(entry.offset + 100)
        f.write(b"\x00\xff")
    with pytest.raises(CorruptCheckpoint, match="big"):
        load(path, map_location="cuda", options=IOOptions(backend="gds"))
