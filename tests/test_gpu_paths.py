"""The GPU paths as the real tools make them (issue 12): fio's libcufile argv, the `path` column and its
witnesses (nvidia-fs stats recorded with IO stats enabled and disabled, gds_stats), gdsio's failure lines,
XferType, -a, verify, the page cache between gdsio cases, and the FAKE gdsio's strictness."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from gdsbench import sysinfo
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ToolError
from gdsbench.runners import fio, fio_job, gds_path, gdsio
from gdsbench.runners.base import RunContext
from gdsbench.runners.gdsio_output import usage_options, usage_version
from gdsbench.sysinfo import gpu
from tests.conftest import DATA
from tests.helpers import data_rows
from tests.test_gdsio import FAKE, case_of, sweep, write_sweep

SAMPLES = DATA / "gdsio"


def fio_case(**params):
    """A fio case with every parameter the config fills."""
    base = {
        "pattern": Pattern.READ,
        "transfer": Transfer.GDS,
        "io_size": 128 << 20,
        "threads": 32,
        "iodepth": 16,
        "ioengine": "libaio",
        "iomem": "malloc",
        "end_fsync": False,
        "unlink": False,
        "gpu": "0",
    }
    return Case("fio", tuple({**base, **params}.items()))


# -- 1, 8: fio's libcufile argv ------------------------------------------------------------------


@pytest.mark.parametrize("transfer", [Transfer.GDS, Transfer.CPU_GPU])
def test_libcufile_argv_has_no_iomem_and_iodepth_1(tmp_path, transfer):
    ctx = RunContext(directory=tmp_path, file_size=30 << 30)
    argv = fio_job.fio_argv(fio_case(transfer=transfer, iomem="shmhuge"), ctx)
    assert not any(a.startswith("--iomem") or a.startswith("--mem=") for a in argv)  # fio: "conflicts with engine"
    assert "--iodepth=1" in argv and "--iodepth=16" not in argv and "--ioengine=libcufile" in argv
    assert fio.cufile_note(fio_case(transfer=transfer)).startswith(
        "libcufile is synchronous: iodepth forced to 1 (asked 16)"
    )


@pytest.mark.parametrize("transfer", [Transfer.GDS, Transfer.CPU_GPU])
def test_libcufile_cases_skip_the_huge_page_check(tmp_path, monkeypatch, transfer):
    """A fio built with libcufile and no reserved huge pages: CPU shmhuge cases wait for pages, libcufile never."""
    from gdsbench.sysinfo import storage

    monkeypatch.setattr(fio, "engines", lambda binary: frozenset({"libaio", "libcufile"}))
    monkeypatch.setattr(storage, "huge_pages", lambda: (0, 2 << 20))
    ctx = RunContext(directory=tmp_path, file_size=1 << 30)
    assert fio.FioRunner().unavailable(fio_case(transfer=transfer, iomem="shmhuge"), ctx) is None
    assert "huge pages" in fio.FioRunner().unavailable(fio_case(transfer=Transfer.CPU_ONLY, iomem="shmhuge"), ctx)


def test_cpu_argv_keeps_iomem_and_iodepth(tmp_path):
    argv = fio_job.fio_argv(fio_case(transfer=Transfer.CPU_ONLY, iomem="shmhuge"), RunContext(tmp_path, 1 << 20))
    assert (
        "--iomem=shmhuge" in argv
        and "--iodepth=16" in argv
        and fio.cufile_note(fio_case(transfer=Transfer.CPU_ONLY)) is None
    )


# -- 2: the path column and its witnesses ---------------------------------------------------------


def test_nvidia_fs_stats_enabled_and_disabled_recordings():
    enabled = sysinfo.parse_nvfs_stats((SAMPLES / "nvidia-fs-stats.txt").read_text())
    disabled = sysinfo.parse_nvfs_stats((SAMPLES / "nvidia-fs-stats-disabled.txt").read_text())
    assert enabled == {"io_stats": True, "reads": 0, "reads_mib": 0, "writes": 0, "writes_mib": 0}
    assert disabled == {"io_stats": False}  # `Reads : err=0 io_state_err=0`: no counts at all


def test_counters_tell_gds_from_compat_only_when_enabled():
    enabled = sysinfo.parse_nvfs_stats((SAMPLES / "nvidia-fs-stats.txt").read_text())
    moved = {**enabled, "reads": 4096, "reads_mib": 4096}
    assert gds_path.nvfs_verdict("reads", enabled, moved) == (
        "gds",
        "GDS path: nvidia-fs counted 4096 reads (4096 MiB) during the run",
    )
    assert gds_path.nvfs_verdict("reads", enabled, enabled)[0] == "compat"
    disabled = sysinfo.parse_nvfs_stats((SAMPLES / "nvidia-fs-stats-disabled.txt").read_text())
    path, why = gds_path.nvfs_verdict("reads", disabled, disabled)
    assert path == "unknown" and "echo 1 > /sys/module/nvidia_fs/parameters/rw_stats_enabled" in why


def test_no_nvidia_fs_is_unknown_and_p2pdma_says_so(monkeypatch):
    monkeypatch.setattr(gpu, "nvidia_fs", lambda: {"loaded": False})
    monkeypatch.delenv("CUFILE_USE_PCIP2PDMA", raising=False)
    monkeypatch.setenv("CUFILE_ENV_PATH_JSON", "/nonexistent/cufile.json")
    assert gds_path.nvfs_verdict("writes", None, None)[0] == "unknown"
    monkeypatch.setenv("CUFILE_USE_PCIP2PDMA", "true")
    path, why = gds_path.nvfs_verdict("writes", None, None)
    assert path == "unknown" and why.startswith("P2PDMA mode (no nvidia-fs)")


def test_gds_stats_recording_is_a_second_witness():
    stats = gds_path.parse_gds_stats((SAMPLES / "gds-stats-l3.txt").read_text())
    assert stats == {"reads": 78193, "reads_posix": 0, "writes": 0, "writes_posix": 0}
    assert gds_path.stats_verdict("reads", stats) == ("gds", "gds_stats: 78193 cuFile reads, 0 through POSIX")
    fallback = {**stats, "reads_posix": 78193}
    assert gds_path.stats_verdict("reads", fallback)[0] == "compat"
    assert gds_path.stats_verdict("writes", stats) is None  # no writes: no verdict
    assert gds_path.parse_gds_stats("cuFile STATS VERSION : 3\nGLOBAL STATS:\n") is None


def test_host_bounce_transfers_are_posix_and_cpu_rows_have_no_path(tmp_path):
    for transfer in ("CPU_GPU", "CPU_ASYNC_GPU", "CPU_CACHED_GPU"):
        assert gds_path.gpu_path(case_of(tmp_path, pattern="read", transfer=transfer)[0], cufile=True) == "posix"
    assert gds_path.gpu_path(case_of(tmp_path, pattern="read", transfer="CPU_ONLY")[0], cufile=True) is None


def test_every_gpu_row_of_a_sweep_has_a_path(tmp_path):
    matrix = {"engine": ["gdsio"], "pattern": ["write"], "transfer": ["GDS", "CPU_GPU", "CPU_ONLY"], "io_size": ["4K"]}
    env = {"FAKE_GDSIO_OUTPUT": "write-cpu-gpu-8k-file.txt"}
    _, csv_path = sweep(
        tmp_path, write_sweep(tmp_path, gdsio=str(FAKE), matrix={**matrix, "transfer": ["CPU_GPU"]}), env=env
    )
    (row,) = data_rows(csv_path)
    assert row["path"] == "posix" and "host bounce buffer" in row["note"]
    _, csv_path = sweep(tmp_path, write_sweep(tmp_path, gdsio=str(FAKE), matrix={**matrix, "transfer": ["GDS"]}))
    assert data_rows(csv_path)[-1]["path"] in gds_path.PATHS


# -- 16: failure lines beside a result, XferType --------------------------------------------------


def test_failure_lines_beside_a_result_fail_the_row(tmp_path):
    text = (SAMPLES / "failed-io-beside-result.txt").read_text()
    assert len(gdsio.parse(text)) == 1  # the result line is there
    with pytest.raises(ToolError, match=r"failed I/O beside its result: .*io failed :ret :-5 errno :22"):
        gdsio.checked(subprocess.CompletedProcess(["gdsio"], 0, text, ""))
    matrix = {"engine": ["gdsio"], "pattern": ["write"], "transfer": ["GDS"], "io_size": ["4K"], "threads": [1]}
    _, csv_path = sweep(
        tmp_path,
        write_sweep(tmp_path, gdsio=str(FAKE), matrix=matrix),
        env={"FAKE_GDSIO_OUTPUT": "failed-io-beside-result.txt"},
    )
    (row,) = data_rows(csv_path)
    assert row["status"] == "failed" and "Error: IO failed stopping traffic" in row["error"]


def test_printed_xfertype_must_be_the_one_asked_for():
    text = (SAMPLES / "write-gpud-4k.txt").read_text()
    proc = subprocess.CompletedProcess(["gdsio"], 0, text, "")
    assert gdsio.checked(proc, Transfer.GDS)
    with pytest.raises(ToolError, match="gdsio ran XferType GPUD, not the CPU_GPU asked for"):
        gdsio.checked(proc, Transfer.CPU_GPU)


# -- 3: verify only on writes ---------------------------------------------------------------------


def test_verify_on_reads_is_a_skip_with_gdsio_rule_and_writes_get_v(tmp_path):
    read, ctx = case_of(tmp_path, pattern="read", transfer="GDS", verify=True)
    reason = gdsio.GdsioRunner().unavailable(read, ctx)
    assert reason.startswith("verify applies to write cases only") and "same seed (-k)" in reason
    assert "-V" not in gdsio.gdsio_argv(read, ctx)
    write, ctx = case_of(tmp_path, pattern="write", transfer="GDS", verify=True)
    assert gdsio.GdsioRunner().unavailable(write, ctx) is None and "-V" in gdsio.gdsio_argv(write, ctx)


# -- 17: -a only where gdsio's usage lists it -----------------------------------------------------


def test_usage_texts_say_which_options_exist():
    new, old = (SAMPLES / "usage-1.12.txt").read_text(), (SAMPLES / "usage-1.1.txt").read_text()
    assert {"a", "M", "P", "J"} <= usage_options(new) and not {"a", "M", "P", "J"} & usage_options(old)
    assert (usage_version(new), usage_version(old)) == ("1.12", "1.1")


@pytest.mark.parametrize("version,skipped", [("1.12", False), ("1.1", True)])
def test_alignment_is_skipped_on_a_gdsio_without_a(tmp_path, monkeypatch, version, skipped):
    monkeypatch.setenv("FAKE_GDSIO_VERSION", version)
    gdsio.usage.cache_clear()
    case, ctx = case_of(tmp_path, pattern="randread", transfer="GDS", alignment="4K")
    reason = gdsio.GdsioRunner().unavailable(case, ctx)
    gdsio.usage.cache_clear()
    assert (
        (reason == "this gdsio (version 1.1) has no -a option (gdsio 1.12+); drop `alignment`")
        if skipped
        else reason is None
    )


# -- 18: the FAKE gdsio is as strict as the real one ----------------------------------------------


def fake(*args, env=None):
    return subprocess.run(
        [sys.executable, str(FAKE), *args], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )


def test_fake_reads_need_files_written_first(tmp_path):
    read = ("-D", str(tmp_path), "-d", "0", "-w", "2", "-s", "1M", "-i", "1M", "-x", "0", "-I", "0")
    assert fake(*read).returncode == 1 and "must be written" in fake(*read).stderr
    assert fake(*read[:-1], "1").returncode == 0  # the write makes gdsio.0 and gdsio.1
    assert fake(*read).returncode == 0


def test_fake_takes_only_its_versions_options(tmp_path):
    base = ("-D", str(tmp_path), "-d", "0", "-w", "1", "-s", "1M", "-i", "4K", "-x", "0", "-I", "1")
    assert fake(*base, "-a", "4K").returncode == 0
    old = fake(*base, "-a", "4K", env={"FAKE_GDSIO_VERSION": "1.1"})
    assert old.returncode == 1 and "gdsio version :1.1" in old.stdout and "option -a not recognized" in old.stdout
    assert "gdsio version :1.12" in fake("-h").stdout and fake("-h").returncode == 0
    assert fake(*base, "-p").returncode == 0  # -p takes no argument in gdsio's usage


# -- 9: the page cache between gdsio cases --------------------------------------------------------


@pytest.mark.skipif(shutil.which("fincore") is None, reason="fincore (util-linux) not installed")
def test_cpu_cached_gpu_reads_start_from_a_cold_page_cache(tmp_path):
    case, ctx = case_of(tmp_path, pattern="read", transfer="CPU_CACHED_GPU", threads=2)
    files = gdsio.data_files(case, ctx)
    for path in files:
        path.write_bytes(os.urandom(1 << 20))
        path.read_bytes()  # cached now
    note = gdsio.settle_cache(case, files)
    assert (
        note == "page cache: dirty pages written back, 2 files' cached pages dropped (fadvise DONTNEED) before the run"
    )
    for path in files:
        cached = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "-o", "RES", str(path)], capture_output=True, text=True
        )
        assert cached.stdout.strip() == "0"
    write, _ = case_of(tmp_path, pattern="write", transfer="CPU_CACHED_GPU")
    assert gdsio.settle_cache(write, files) == "page cache: dirty pages written back before the run"
    assert gdsio.settle_cache(case_of(tmp_path, pattern="read", transfer="GDS")[0], files) is None


# -- 14: the GDS tool folders ---------------------------------------------------------------------


def test_gds_tools_are_found_under_usr_libexec_too(tmp_path, monkeypatch):
    assert "/usr/libexec/gds/tools" in gpu.GDS_TOOL_DIRS
    libexec = tmp_path / "usr" / "libexec" / "gds" / "tools"
    libexec.mkdir(parents=True)
    tool = libexec / "gdscheck"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(gpu, "GDS_TOOL_DIRS", (f"{tmp_path}/usr/local/cuda*/gds/tools", str(libexec)))
    assert gpu.cuda_tool("gdscheck") == str(tool)
    assert "/usr/libexec/gds/tools" in gpu.GDS_TOOLS_HELP
