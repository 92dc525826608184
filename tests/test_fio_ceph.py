"""fio on RADOS and RBD (issue 21, part 1): objects sized within the cluster's limit, every stored object checked
after a write, reads of objects never written laid out first, OSD caches dropped when asked, only the objects a
sweep created removed. Against the one-host cluster (tests/ceph_cluster.py), real daemons."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.runners import ceph, fio, fio_ceph, fio_job
from gdsbench.runners.base import RunContext

MiB = 1 << 20


def ceph_case(**params: Any) -> Case:
    base = {
        "pattern": Pattern.WRITE,
        "transfer": Transfer.CPU_ONLY,
        "io_size": 4 * MiB,
        "threads": 2,
        "iodepth": 8,
        "ioengine": "rados",
        "iomem": "malloc",
        "end_fsync": False,
        "unlink": False,
        "gpu": "0",
        "pool": "gdsbench",
        "clientname": "admin",
        "rbdname": "gdsbench",
    }
    base.update(params)
    if base["pattern"] in (Pattern.READ, Pattern.RANDREAD):
        base.setdefault("osd_cache", "keep")
    return Case("fio", tuple(base.items()))


def object_names(case: Case, ctx: RunContext) -> tuple[str, ...]:
    """The objects fio gives a rados case's files: `<job name>.<job>.<file>`."""
    objects = fio_ceph.objects(case, fio_job.job_name(case, ctx), ctx.file_size)
    assert objects is not None
    return objects.names


@given(
    file_size=st.integers(1, 1 << 36),
    io_size=st.sampled_from([4096, 1 << 20, 4 * MiB, 16 * MiB]),
    limit=st.sampled_from([16 * MiB, 128 * MiB, 1 << 30]),
)
def test_objects_stay_within_the_clusters_limit(file_size: int, io_size: int, limit: int) -> None:
    """Each object holds whole I/Os, at most the limit (where an I/O fits in it), and together they cover the file."""
    count, each = fio_ceph.layout(file_size, io_size, limit)
    assert each % io_size == 0 and each <= max(limit, io_size) and count * each >= file_size
    assert count * each < file_size + count * io_size  # no more than one I/O of slack per object


def test_argv_names_the_pool_not_a_directory(tmp_path: Path) -> None:
    ctx = RunContext(directory=tmp_path, file_size=300 * MiB)
    argv = fio_job.fio_argv(ceph_case(), ctx)
    count, each = fio_ceph.layout(300 * MiB, 4 * MiB)
    assert {
        "--ioengine=rados",
        "--pool=gdsbench",
        "--clientname=admin",
        f"--nrfiles={count}",
        f"--filesize={each}",
        f"--size={count * each}",
    } <= set(argv)
    assert not any(a.startswith(("--directory", "--direct")) for a in argv)
    rbd = fio_job.fio_argv(ceph_case(ioengine="rbd", pool="gdsbench-rbd"), ctx)
    assert {"--ioengine=rbd", "--rbdname=gdsbench", f"--size={300 * MiB}", f"--offset_increment={300 * MiB}"} <= set(
        rbd
    )
    assert fio_job.job_files(ceph_case(), ctx) == [] or all(not p.exists() for p in fio_job.job_files(ceph_case(), ctx))


def test_without_the_engines_config_file_a_case_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ceph, "CONF", tmp_path / "missing.conf")
    reason = fio_ceph.unavailable(ceph_case(), RunContext(directory=tmp_path, file_size=MiB))
    assert reason is not None and "reads only that file" in reason
    cached = fio_ceph.unavailable(
        ceph_case(transfer=Transfer.CPU_CACHED), RunContext(directory=tmp_path, file_size=MiB)
    )
    assert cached is not None and "CPU_ONLY" in cached


# -- against the one-host cluster -------------------------------------------------------------------------


@pytest.fixture
def fio_cluster(ceph_cluster: Any) -> Any:
    """The shared cluster, where fio's ceph engines see it: they read only /etc/ceph/ceph.conf, so the tests never
    write into a cluster that link names unless it is this run's own."""
    conf = ceph.CONF
    if not (conf.is_symlink() and os.readlink(conf) == str(ceph_cluster.conf)):
        pytest.skip(f"{conf} is not this test run's cluster (another cluster's, or the host's): not written into")
    return ceph_cluster


def run(case: Case, ctx: RunContext) -> Any:
    runner = fio.FioRunner()
    assert runner.unavailable(case, ctx) is None
    return runner.run(case, ctx)


def stored(pool: str, name: str) -> int:
    return fio_ceph.object_bytes(pool, name)


@pytest.mark.slow
def test_a_rados_write_then_cold_read_moves_real_bytes(fio_cluster: Any, tmp_path: Path) -> None:
    ctx = RunContext(directory=tmp_path, file_size=48 * MiB)
    write = run(ceph_case(io_size=4 * MiB), ctx)
    count, each = fio_ceph.layout(48 * MiB, 4 * MiB)
    assert write.bytes == 2 * count * each and write.cache is None
    assert all(stored("gdsbench", o) == each for o in object_names(ceph_case(), ctx))
    read = run(ceph_case(pattern=Pattern.READ, osd_cache="drop"), ctx)
    assert read.bytes == 2 * count * each and read.cache == "cold" and "cache drop" in (read.note or "")
    ctx.resources.cleanup()
    assert all(stored("gdsbench", o) == -1 for o in object_names(ceph_case(), ctx))


@pytest.mark.slow
def test_a_read_of_objects_never_written_writes_them_first(fio_cluster: Any, tmp_path: Path) -> None:
    """fio alone 'reads' empty objects at memory speed; the runner writes them first and says so."""
    ctx = RunContext(directory=tmp_path, file_size=20 * MiB)  # a size no other test uses: objects of its own
    case = ceph_case(pattern=Pattern.READ, threads=1)
    names = object_names(case, ctx)
    assert all(stored("gdsbench", o) == -1 for o in names)
    read = run(case, ctx)
    assert "objects written first" in (read.note or "") and read.cache == "warm" and read.bytes == 20 * MiB
    assert all(stored("gdsbench", o) == 20 * MiB for o in names)
    ctx.resources.cleanup()
    assert all(stored("gdsbench", o) == -1 for o in names)


@pytest.mark.slow
def test_an_object_rados_cut_fails_the_write_case(
    fio_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pitfall 4: told objects may hold 512 MiB, fio writes a 192 MiB object, RADOS keeps 128 MiB of it and fio
    reports all of it; the check after the write fails the case, saying what the cluster holds."""
    monkeypatch.setattr(fio_ceph, "max_object_bytes", lambda: 512 * MiB)
    ctx = RunContext(directory=tmp_path, file_size=192 * MiB)
    case = ceph_case(threads=1, io_size=16 * MiB)
    with pytest.raises(
        ToolError,
        match=r"RADOS holds 134217728 bytes of the 201326592 fio reported writing to 1 "
        r"objects of 201326592 bytes \(the largest holds 134217728\)",
    ):
        run(case, ctx)
    ctx.resources.cleanup()


@pytest.mark.slow
def test_a_time_based_write_that_ends_within_its_first_pass_is_not_a_cut(fio_cluster: Any, tmp_path: Path) -> None:
    """fio writes a job's objects round robin: a run that ends mid-pass leaves every object short, truthfully."""
    ctx = RunContext(directory=tmp_path, file_size=1 << 30, runtime=1.0)
    case = ceph_case(threads=1, io_size=MiB, iodepth=2)
    measured = run(case, ctx)
    count, each = fio_ceph.layout(1 << 30, MiB)
    sizes = [stored("gdsbench", o) for o in object_names(case, ctx)]
    assert measured.bytes < count * each and sum(max(s, 0) for s in sizes) >= measured.bytes
    ctx.resources.cleanup()


@pytest.mark.slow
def test_objects_a_sweep_did_not_create_are_never_removed(fio_cluster: Any, tmp_path: Path) -> None:
    ctx = RunContext(directory=tmp_path, file_size=8 * MiB)
    case = ceph_case(threads=1)
    [first] = object_names(case, ctx)
    subprocess.run(["rados", "-c", str(ceph.CONF), "-p", "gdsbench", "put", first, "/etc/hostname"], check=True)
    try:
        run(case, ctx)
        ctx.resources.cleanup()
        assert stored("gdsbench", first) == 8 * MiB  # overwritten by the case, kept: it was someone's
    finally:
        fio_ceph.remove_objects("gdsbench", (first,))


@pytest.mark.slow
def test_rbd_jobs_need_room_in_the_image(fio_cluster: Any, tmp_path: Path) -> None:
    image = fio_ceph.image_bytes("gdsbench-rbd", "gdsbench")
    too_big = RunContext(directory=tmp_path, file_size=image)
    reason = fio.FioRunner().unavailable(ceph_case(ioengine="rbd", pool="gdsbench-rbd"), too_big)
    assert reason is not None and "> image" in reason
    write = run(ceph_case(ioengine="rbd", pool="gdsbench-rbd"), RunContext(directory=tmp_path, file_size=16 * MiB))
    assert write.bytes == 2 * 16 * MiB
    assert fio.FioRunner().unavailable(ceph_case(pool="no-such-pool"), too_big) == (
        f"no pool 'no-such-pool' in the cluster (pools: {', '.join(sorted(fio_ceph.pool_names()))})"
    )
