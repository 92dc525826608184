"""The guard before the first case (free space, mount) and the one fill step per file set (issue 12, 6-7)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gdsbench import config, filesets, fill, sweep
from gdsbench.cli import cli
from gdsbench.errors import TargetError
from tests.helpers import assert_exits, data_rows, mounted
from tests.test_gdsio import FAKE, write_sweep


def small_filesystem(where: Path, size: str = "64m") -> contextlib.AbstractContextManager[Path]:
    """A real file system of `size` mounted at `where` (tmpfs with a size limit; root only), unmounted after."""
    return mounted(where, "tmpfs", "-o", f"size={size}")


def h100_like(directory: Path, **extra) -> dict:
    """configs/h100.yaml's shape (gdsio and fio, 4 thread counts up to 32), pointed at `directory`."""
    document = yaml.safe_load(Path("configs/h100.yaml").read_text())
    return {**document, "directory": str(directory), **extra}


def test_h100_config_needs_about_1_9_tib(tmp_path):
    loaded = config.from_dict(h100_like(tmp_path / "nvme"), "h100.yaml")
    ctx = sweep.context(loaded, None)
    sets = filesets.file_sets(list(loaded.cases), ctx)
    assert [s.label for s in sets] == ["fio 32 x 30G", "gdsio 32 x 30G"]  # in the order the config names the engines
    assert filesets.need_bytes(sets) == 2 * 32 * (30 << 30)  # ~1.9 TiB: both sets live to the end


@pytest.mark.needs_root
def test_an_undersized_file_system_is_refused_with_the_numbers(tmp_path):
    with small_filesystem(tmp_path / "small") as mount:
        document = {
            "name": "too-big",
            "directory": str(mount / "gdsbench"),
            "file_size": "16M",
            "repetitions": 1,
            "matrix": {"engine": ["fio"], "pattern": ["read"], "io_size": ["1M"], "threads": [8]},
        }
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(document))
        result = CliRunner().invoke(cli, ["sweep", str(tmp_path / "c.yaml"), "-o", str(tmp_path / "out")])
        assert_exits(result, 2)
        free = filesets.free_bytes(mount)
        assert f"has {filesets.human(free)} free ({free} bytes)" in result.output
        assert "need 128MiB (134217728 bytes) more: fio 8 x 16M: 128MiB" in result.output
        assert f"tmpfs on gdsbench-tmpfs mounted at {mount}" in result.output
        assert not list((mount / "gdsbench").glob("gdsbench.*"))  # refused before anything was written
        document["matrix"]["threads"] = [2]  # 32 MiB fits: the same directory is accepted and the sweep runs
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(document))
        result = CliRunner().invoke(cli, ["sweep", str(tmp_path / "c.yaml"), "-o", str(tmp_path / "out")])
        assert "need" not in result.output, result.output


def test_existing_files_count_for_what_they_occupy(tmp_path):
    document = {
        "directory": str(tmp_path),
        "file_size": "1M",
        "matrix": {"engine": ["fio"], "pattern": ["read"], "threads": [2]},
    }
    loaded = config.from_dict(document, "t.yaml")
    ctx = sweep.context(loaded, None)
    (tmp_path / "gdsbench.1048576.0.0").write_bytes(os.urandom(1 << 20))
    assert filesets.need_bytes(filesets.file_sets(list(loaded.cases), ctx)) == 1 << 20  # only job 1's file


def test_root_file_system_is_refused_unless_the_config_allows_it(tmp_path):
    if filesets.storage.mount_of(tmp_path).get("mount_point") != "/":
        pytest.skip("tmp_path is not on the root file system here")
    with pytest.raises(TargetError, match=r"is on the root file system .* set `allow_root_filesystem: true`"):
        filesets.check_mount(tmp_path, allow_root=False)
    filesets.check_mount(tmp_path, allow_root=True)
    config_path = write_sweep(tmp_path, allow_root_filesystem=False, gdsio=str(FAKE))
    result = CliRunner().invoke(cli, ["sweep", str(config_path), "-o", str(tmp_path / "out")])
    assert_exits(result, 2) if result.exit_code == 2 else pytest.fail(result.output)
    assert "findmnt -T" in result.output
    assert list((tmp_path / "out").iterdir()) == []  # a refused sweep leaves no header-only CSV nor sidecar


def test_h100_and_h200_configs_say_what_they_need():
    for name in ("configs/h100.yaml", "configs/h200.yaml"):
        text = Path(name).read_text()
        assert "~1.9 TiB" in text and "allow_root_filesystem" in text and "fill_timeout" in text
        loaded = config.load(name)
        assert loaded.allow_root_filesystem is False and loaded.fill_timeout


def test_one_fill_per_file_set_outside_the_cases(tmp_path):
    """Reads at 1, 2 and 4 threads: one gdsio write pass for 4 threads before the cases, none inside them."""
    log = tmp_path / "calls.log"
    matrix = {
        "engine": ["gdsio"],
        "pattern": ["read"],
        "transfer": ["CPU_ONLY"],
        "io_size": ["1M"],
        "threads": [1, 2, 4],
    }
    config_path = write_sweep(tmp_path, gdsio=str(FAKE), matrix=matrix, timeout="1s", fill_timeout="60s")
    result = CliRunner().invoke(
        cli, ["sweep", str(config_path), "-o", str(tmp_path / "out")], env={"FAKE_GDSIO_LOG": str(log)}
    )
    assert_exits(result, 0)
    calls = log.read_text().splitlines()
    assert len(calls) == 4 and "-I 1" in calls[0] and "-w 4" in calls[0] and "-T" not in calls[0]
    assert all("-I 0" in c for c in calls[1:])  # the cases only read: no write pass per thread count
    assert "fill gdsio 4 x 1M" in result.output and "timeout 60s" in result.output
    csv = sorted((tmp_path / "out").glob("*.csv"))[-1]
    assert [r["status"] for r in data_rows(csv)] == ["ok", "ok", "ok"]  # fill rows are never recorded


def test_a_failed_fill_fails_the_reads_at_once(tmp_path):
    matrix = {"engine": ["gdsio"], "pattern": ["read"], "transfer": ["CPU_ONLY"], "io_size": ["1M"], "threads": [1, 2]}
    config_path = write_sweep(tmp_path, gdsio=str(FAKE), matrix=matrix)
    env = {"FAKE_GDSIO_OUTPUT": "error-file-register.txt"}
    result = CliRunner().invoke(cli, ["sweep", str(config_path), "-o", str(tmp_path / "out")], env=env)
    assert_exits(result, 1)
    rows = data_rows(sorted((tmp_path / "out").glob("*.csv"))[-1])
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all(
        r["error"].startswith("the files to read are missing: the fill step before the cases failed") for r in rows
    )


@pytest.mark.needs_fio
def test_fio_fill_lays_out_the_widest_read_case_once(tmp_path):
    document = {
        "directory": str(tmp_path / "t"),
        "file_size": "4M",
        "allow_root_filesystem": True,
        "matrix": {"engine": ["fio"], "pattern": ["read"], "threads": [1, 3]},
    }
    loaded = config.from_dict(document, "t.yaml")
    ctx = sweep.context(loaded, None)
    ctx.directory.mkdir()
    rows = list(fill.prepare(loaded, ctx, sweep.skip_reason))
    assert rows[0]["note"].startswith("fill fio 3 x 4M") and rows[-1]["note"].startswith("fill fio 3 x 4M done")
    files = sorted(p.name for p in ctx.directory.iterdir())
    assert files == [f"gdsbench.{4 << 20}.{j}.0" for j in range(3)]
    assert all((ctx.directory / f).stat().st_size == 4 << 20 for f in files)
    if shutil.which("filefrag"):  # data written, not fallocated extents a read would get as zeros for free
        extents = subprocess.run(["filefrag", "-v", str(ctx.directory / files[0])], capture_output=True, text=True)
        assert "unwritten" not in extents.stdout and "eof" in extents.stdout
    assert list(fill.prepare(loaded, ctx, sweep.skip_reason)) == []  # ready: nothing written twice
    ctx.resources.cleanup()
    assert not list(ctx.directory.iterdir())  # the fill's files are this sweep's: removed at the end


def test_default_fill_timeout_scales_with_the_bytes():
    files = filesets.FileSet("gdsio", (Path("/nonexistent/gdsio.0"),), 30 << 30)
    assert fill.timeout_for(files, None) == (30 << 30) / (50 << 20) + 600
    assert fill.timeout_for(files, 7200.0) == 7200.0


def test_reads_that_unlink_their_files_need_no_fill(tmp_path):
    """fio unlink cases lay out and delete their own files each run: nothing to fill, and no crash."""
    document = {
        "directory": str(tmp_path),
        "file_size": "1M",
        "allow_root_filesystem": True,
        "matrix": {"engine": ["fio"], "pattern": ["read"], "threads": [2], "unlink": [True]},
    }
    loaded = config.from_dict(document, "t.yaml")
    assert list(fill.prepare(loaded, sweep.context(loaded, None), lambda case, ctx: None)) == []


def test_a_checkpoint_case_larger_than_the_memory_available_is_refused_with_the_numbers(tmp_path: Path) -> None:
    """As the disk check does (issue 43): before the first case, naming the case, the need and what is free."""
    from gdsbench.sysinfo import host

    available = host.meminfo("MemAvailable")
    assert available and available > 0
    big = f"{available // (1 << 30) + 8}G"  # its state dict alone is more than the host has free
    document = {
        "directory": str(tmp_path / "t"),
        "allow_root_filesystem": True,
        "matrix": {"engine": ["fastpersist"], "pattern": ["save"], "checkpoint_size": [big]},
    }
    config = tmp_path / "big.yaml"
    config.write_text(yaml.safe_dump(document))
    run = CliRunner().invoke(cli, ["sweep", str(config), "-o", str(tmp_path / "out")])
    assert run.exit_code == 2, run.output
    assert "holds its state dict and, loading, a second copy: about" in run.output and "MemAvailable" in run.output
    assert "Traceback" not in run.output and not list((tmp_path / "out").glob("*"))
