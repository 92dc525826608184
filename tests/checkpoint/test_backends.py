"""Each backend round-trips the same data; O_DIRECT falls back with a warning; gds reports why not."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import tempfile

import pytest
import torch
from ckptio import IOOptions, load, save
from ckptio.backends import gds, posix
from ckptio.errors import BackendUnavailable, DirectIOFallbackWarning, OptionError

from tests.helpers import mounted

from .conftest import assert_same, random_tensor

CPU_BACKENDS = ["auto", "direct", "buffered"]
SMALL = IOOptions(chunk_bytes=1 << 20, buffer_bytes=2 << 20)


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
    save(sd, tmp_path / "c.pt", options=SMALL.with_(backend=save_backend))
    out = load(tmp_path / "c.pt", options=IOOptions(backend=load_backend))
    assert_same(sd, out)
    assert out["view"].untyped_storage().data_ptr() == out["big"].untyped_storage().data_ptr()


@pytest.mark.parametrize("flush", ["end", "overlap", "dsync"])
@pytest.mark.parametrize("backend", ["direct", "buffered"])
def test_flush_strategies_write_the_same_bytes(tmp_path: pathlib.Path, flush: str, backend: str) -> None:
    """How durability is reached changes nothing on disk: the file equals one saved the default way."""
    sd = {"w": random_tensor((9 << 20,), torch.uint8, 5), "b": random_tensor((333,), torch.float32, 6)}
    save(sd, tmp_path / "ref.pt", options=SMALL)
    save(sd, tmp_path / "c.pt", options=SMALL.with_(flush=flush, backend=backend))
    assert (tmp_path / "c.pt").read_bytes() == (tmp_path / "ref.pt").read_bytes()


def test_loaded_memory_is_page_aligned_and_resaves_without_copy(tmp_path: pathlib.Path) -> None:
    """Loaded storages start page-aligned, so saving them again takes the no-copy O_DIRECT path."""
    sd = _state()
    save(sd, tmp_path / "a.pt")
    out = load(tmp_path / "a.pt")
    assert out["big"].untyped_storage().data_ptr() % 4096 == 0
    save(out, tmp_path / "b.pt", options=IOOptions(backend="direct"))
    assert_same(sd, load(tmp_path / "b.pt"))


@pytest.mark.needs_odirect
def test_direct_create_never_touches_an_existing_file(tmp_path: pathlib.Path) -> None:
    """Creating over an existing name fails without deleting or changing what was there."""
    victim = tmp_path / "someone-elses.pt"
    victim.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        posix.DIRECT.create(str(victim), IOOptions(), None)  # type: ignore[arg-type]
    assert victim.read_bytes() == b"precious"


class _RefusingDirect(posix.PosixBackend):
    """FAKE O_DIRECT backend: creates the file as the real one does, then refuses O_DIRECT with EINVAL,
    as open(2) does on file systems without direct I/O (the real refusal is tested on ramfs below)."""

    def create(self, path, options, staging, existing=False):  # type: ignore[no-untyped-def]
        if not existing:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        raise OSError(errno.EINVAL, "Invalid argument (fake O_DIRECT refusal)")

    def open(self, path, options, staging):  # type: ignore[no-untyped-def]
        raise OSError(errno.EINVAL, "Invalid argument (fake O_DIRECT refusal)")


@pytest.mark.parametrize("backend", ["auto", "direct"])
def test_fallback_to_buffered_warns_fake_einval(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """With O_DIRECT refused (faked EINVAL), save and load warn and still round-trip, leaving no strays."""
    monkeypatch.setattr(posix, "DIRECT", _RefusingDirect("direct", os.O_DIRECT, 4096))
    sd = _state()
    with pytest.warns(DirectIOFallbackWarning, match="O_DIRECT"):
        save(sd, tmp_path / "c.pt", options=IOOptions(backend=backend))
    with pytest.warns(DirectIOFallbackWarning):
        out = load(tmp_path / "c.pt", options=IOOptions(backend=backend))
    assert_same(sd, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def _ramfs(parent: pathlib.Path) -> contextlib.AbstractContextManager[pathlib.Path]:
    """A ramfs mounted for the test (ramfs has no direct I/O: open(O_DIRECT) gives EINVAL)."""
    return mounted(parent / "ramfs", "ramfs")


@pytest.mark.needs_root
def test_real_odirect_refusal_on_ramfs_falls_back(tmp_path: pathlib.Path) -> None:
    """The real EINVAL branch: on ramfs save and load warn, round-trip, and leave only the checkpoint."""
    with _ramfs(tmp_path) as d:
        probe = d / "probe"
        probe.write_bytes(b"")
        with pytest.raises(OSError) as refused:
            os.close(os.open(probe, os.O_RDONLY | os.O_DIRECT))
        assert refused.value.errno == errno.EINVAL
        probe.unlink()
        sd = _state()
        with pytest.warns(DirectIOFallbackWarning):
            save(sd, d / "c.pt")
        with pytest.warns(DirectIOFallbackWarning):
            assert_same(sd, load(d / "c.pt"))
        assert sorted(p.name for p in d.iterdir()) == ["c.pt"]


def test_dev_shm_round_trip() -> None:
    """Whatever /dev/shm supports, checkpoints there round-trip."""
    sd = _state()
    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        save(sd, os.path.join(d, "c.pt"))
        assert_same(sd, load(os.path.join(d, "c.pt")))


@pytest.mark.needs_cuda
def test_gds_backend_round_trip_and_verify(tmp_path: pathlib.Path) -> None:
    """gds reads straight into CUDA memory, bit-exact, and a flipped byte is refused on that path too."""
    reason = gds.unavailable()
    if reason:
        pytest.skip(f"gds backend unavailable: {reason}")
    from ckptio.errors import CorruptCheckpoint
    from ckptio.inspect import read_index

    sd = _state()
    save(sd, tmp_path / "c.pt")
    out = load(tmp_path / "c.pt", map_location="cuda", options=IOOptions(backend="gds"))
    assert out["big"].is_cuda
    assert_same(sd, {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in out.items()})
    entry = next(s for s in read_index(tmp_path / "c.pt").storages if s.name == "big")
    with open(tmp_path / "c.pt", "r+b") as f:
        f.seek(entry.offset + 100)
        f.write(b"\x00\xff")
    with pytest.raises(CorruptCheckpoint, match="big"):
        load(tmp_path / "c.pt", map_location="cuda", options=IOOptions(backend="gds"))


@pytest.mark.needs_cuda
def test_cuda_save_and_host_path_load(tmp_path: pathlib.Path) -> None:
    """Tensors on the GPU save through staging buffers; a CUDA load without gds reads to host and copies."""
    sd = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in _state().items()}
    save(sd, tmp_path / "c.pt")
    out = load(tmp_path / "c.pt", map_location="cuda", options=IOOptions(backend="direct"))
    assert out["big"].is_cuda
    assert_same(_state(), {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in out.items()})


def test_gds_unavailable_says_why(tmp_path: pathlib.Path) -> None:
    """Asking for gds where it cannot run raises BackendUnavailable carrying the probe's reason."""
    reason = gds.unavailable()
    if reason is None:
        pytest.skip("gds is available here")
    save({"a": torch.ones(2)}, tmp_path / "c.pt")
    with pytest.raises(BackendUnavailable) as info:
        load(
            tmp_path / "c.pt",
            options=IOOptions(backend="gds"),
            map_location="cuda" if torch.cuda.is_available() else "cpu",
        )
    assert reason in str(info.value) or "CUDA" in str(info.value)


def test_gds_with_a_cpu_destination_is_refused(tmp_path: pathlib.Path) -> None:
    """backend='gds' moves bytes to GPU memory only: a CPU load asking for it is an error, not a fallback."""
    save({"a": torch.ones(2)}, tmp_path / "c.pt")
    with pytest.raises(BackendUnavailable, match="CUDA memory only"):
        load(tmp_path / "c.pt", options=IOOptions(backend="gds"))
    with pytest.raises(BackendUnavailable, match="saves write from host memory"):
        save({"a": torch.ones(2)}, tmp_path / "d.pt", options=IOOptions(backend="gds"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_map_location_without_gpu_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    """map_location='cuda' with no GPU raises BackendUnavailable saying so."""
    save({"a": torch.ones(2)}, tmp_path / "c.pt")
    with pytest.raises(BackendUnavailable, match="no CUDA device"):
        load(tmp_path / "c.pt", map_location="cuda:0")


@pytest.mark.parametrize(
    "fields",
    [
        {"backend": "nope"},
        {"chunk_bytes": 1000},
        {"threads": 0},
        {"buffer_bytes": 1 << 20, "chunk_bytes": 2 << 20},
        {"flush": "sometimes"},
        {"prefault_threads": -1},
        {"part_bytes": (5 << 20) - 1},  # below S3's smallest part
        {"part_bytes": (5 << 30) + 1},  # above S3's largest
        {"object_connections": 0},
    ],
)
def test_bad_options_are_option_errors(fields: dict) -> None:
    """Every field is checked when the options value is built, naming it."""
    with pytest.raises(OptionError, match=next(iter(fields))):
        IOOptions(**fields)


def test_bad_checksum_fails_before_writing(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="checksum"):
        save({"a": torch.ones(2)}, tmp_path / "c.pt", checksum="md5")
    assert not (tmp_path / "c.pt").exists()


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """CKPTIO_<FIELD> overrides a default for experiments; explicit values still win; junk is named."""
    monkeypatch.setenv("CKPTIO_THREADS", "7")
    monkeypatch.setenv("CKPTIO_FLUSH", "overlap")
    assert (IOOptions().threads, IOOptions().flush, IOOptions(threads=2).threads) == (7, "overlap", 2)
    monkeypatch.setenv("CKPTIO_PART_BYTES", str(8 << 20))
    monkeypatch.setenv("CKPTIO_OBJECT_CONNECTIONS", "3")
    assert (IOOptions().part_bytes, IOOptions().object_connections) == (8 << 20, 3)
    monkeypatch.setenv("CKPTIO_THREADS", "many")
    with pytest.raises(OptionError, match="CKPTIO_THREADS"):
        IOOptions()


def test_defaults_follow_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread defaults come from the cores this process may use, within their documented bounds."""
    from ckptio import options

    for cores, threads in ((1, 4), (2, 4), (12, 12), (256, 32)):
        monkeypatch.setattr(options, "usable_cores", lambda c=cores: c)
        assert IOOptions().threads == threads


@pytest.mark.parametrize(
    "variable, value, threads, prefault",
    [
        ("LOCAL_WORLD_SIZE", "4", 16, 8),  # torchrun: 4 ranks share the host's 64 cores
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "8", 8, 8),
        ("SLURM_NTASKS_PER_NODE", "32", 4, 2),
        ("LOCAL_WORLD_SIZE", "2(x3)", 32, 8),  # not a count: the host's own defaults
        ("LOCAL_WORLD_SIZE", "0", 32, 8),
    ],
)
def test_ranks_sharing_a_host_share_its_cores(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, threads: int, prefault: int
) -> None:
    from ckptio import options

    monkeypatch.setattr(options, "usable_cores", lambda: 64)
    monkeypatch.setattr(options, "numa_nodes", lambda: 1)
    for name in options.LOCAL_RANKS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, value)
    assert (IOOptions().threads, IOOptions().prefault_threads) == (threads, prefault)


def _vm_flags(address: int) -> set[str]:
    """The VmFlags of the mapping holding `address` (/proc/self/smaps: hg = MADV_HUGEPAGE, nh = NOHUGEPAGE)."""
    inside = False
    for line in pathlib.Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
        elif inside and head == "VmFlags:":
            return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.parametrize("pages, flag", [("huge", "hg"), ("small", "nh")])
def test_fresh_pages_choose_the_pages_a_load_reads_into(tmp_path: pathlib.Path, pages: str, flag: str) -> None:
    save({"w": torch.ones(1 << 20)}, tmp_path / "c.pt")
    loaded = load(tmp_path / "c.pt", options=IOOptions(fresh_pages=pages))
    assert torch.equal(loaded["w"], torch.ones(1 << 20)) and flag in _vm_flags(loaded["w"].data_ptr())


#: A virtio balloon's `features` as this project's VM shows it (stats, deflate on OOM, free page reporting).
BALLOON_FEATURES = "0110010100000000000000000000000010000000"


@pytest.mark.parametrize("features, pages", [(BALLOON_FEATURES, "small"), ("0110000100", "huge"), (None, "huge")])
def test_auto_fresh_pages_follow_the_balloons_free_page_reporting(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, features: str | None, pages: str
) -> None:
    """A sysfs tree in a test folder (the machine has one balloon): reporting on gives small pages, off or no
    balloon huge ones, THP `never` small ones."""
    from ckptio import memory

    thp = tmp_path / "enabled"
    thp.write_text("always [madvise] never\n")
    if features is not None:
        (tmp_path / "balloon" / "virtio0").mkdir(parents=True)
        (tmp_path / "balloon" / "virtio0" / "features").write_text(features + "\n")
    monkeypatch.setattr(memory, "BALLOON", str(tmp_path / "balloon"))
    monkeypatch.setattr(memory, "THP_ENABLED", str(thp))
    memory.faster_fresh_pages.cache_clear()
    try:
        assert memory.faster_fresh_pages() == pages
        thp.write_text("always madvise [never]\n")
        memory.faster_fresh_pages.cache_clear()
        assert memory.faster_fresh_pages() == "small"
    finally:
        memory.faster_fresh_pages.cache_clear()


def test_auto_fresh_pages_become_the_hosts_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The field holds what was chosen (rows record it); the environment and explicit values still win."""
    assert IOOptions().fresh_pages in ("huge", "small") and IOOptions(fresh_pages="auto").fresh_pages != "auto"
    monkeypatch.setenv("CKPTIO_FRESH_PAGES", "small")
    assert (IOOptions().fresh_pages, IOOptions(fresh_pages="huge").fresh_pages) == ("small", "huge")
    with pytest.raises(OptionError, match="fresh_pages"):
        IOOptions(fresh_pages="giant")
