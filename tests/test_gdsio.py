"""The gdsio runner: its parser on real recorded gdsio output, its argv, finding gdsio, and whole sweeps
run against tests/fakes/fake_gdsio.py (a FAKE gdsio that checks arguments and prints recorded output)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gdsbench import config as config_mod
from gdsbench import results, sysinfo
from gdsbench.cases import Pattern, Transfer
from gdsbench.cli import cli
from gdsbench.errors import ToolError
from gdsbench.runners import gdsio
from gdsbench.runners.base import RunContext
from gdsbench.sysinfo import gpu
from tests.conftest import DATA
from tests.helpers import assert_exits, data_rows

FAKE = Path(__file__).parent / "fakes" / "fake_gdsio.py"
SAMPLES = DATA / "gdsio"

# file -> the numbers in its result lines, copied from the text:
# (io_type, xfer, threads, iodepth, done KiB, requested KiB, io KiB, GiB/s, latency us, ops, seconds)
EXPECTED = {
    "read-gpud-8threads-timebased.txt": [
        ("READ", "GPUD", 8, None, 818796544, 4096000, "1024", 6.524658, 1197.370995, 799606, 119.679102)
    ],
    "read-gpud-8threads-timebased-far-gpu.txt": [
        ("READ", "GPUD", 8, None, 491438080, 4096000, "1024", 3.893747, 2003.091575, 479920, 120.365276)
    ],
    "write-gpud-4k.txt": [("WRITE", "GPUD", 1, None, 1024, 1024, "4", 0.013104, 264.007812, 256, 0.074524)],
    "write-gpud-8k-file.txt": [("WRITE", "GPUD", 1, None, 8, 8, "4", 0.001081, 14.0, 2, 0.007057)],
    "write-cpu-gpu-8k-file.txt": [("WRITE", "CPU_GPU", 1, None, 8, 8, "4", 0.001127, 40.0, 2, 0.006769)],
    "write-gpu-batch-iodepth10.txt": [("WRITE", "GPU_BATCH", 1, 10, 80, 80, "4", 0.010523, 3476.65, 20, 0.00725)],
    "read-cpuonly-4threads.txt": [
        ("READ", "CPUONLY", 4, None, 4187136, 4194304, "1024", 3.22766, 1209.149901, 4089, 1.23717)
    ],
    "read-gpud-4threads-100g.txt": [
        ("READ", "GPUD", 4, None, 104837120, 104857600, "1024", 6.622534, 589.436984, 102380, 15.097011)
    ],
    "write-read-cpuonly-verify.txt": [
        ("WRITE", "CPUONLY", 4, None, 4156416, 4194304, "1024", 1.049312, 3721.307952, 4059, 3.777586),
        ("READ", "CPUONLY", 4, None, 4069376, 4194304, "1024", 2.69805, 1443.841342, 3974, 1.438394),
    ],
    "failed-io-beside-result.txt": [("WRITE", "GPUD", 1, None, 1024, 1024, "4", 0.013104, 264.007812, 256, 0.074524)],
}
#: Recordings that are not gdsio result output.
NOT_RESULTS = {
    "usage-1.1.txt",
    "usage-1.12.txt",
    "nvidia-fs-stats.txt",
    "nvidia-fs-stats-disabled.txt",
    "gds-stats-l3.txt",
}


def test_every_recorded_result_sample_has_expected_values():
    recorded = {p.name for p in SAMPLES.glob("*.txt")} - NOT_RESULTS
    assert recorded - {n for n in recorded if n.startswith("error")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_gives_the_numbers_in_the_text(name):
    parsed = gdsio.parse((SAMPLES / name).read_text())
    assert [tuple(vars(r).values()) for r in parsed] == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_measurement_is_in_base_units(name):
    result = gdsio.parse((SAMPLES / name).read_text())[0]
    m = gdsio.measurement(result)
    assert m.bytes == result.done_kib * 1024
    assert m.bw_bytes == result.throughput_gib * 2**30
    assert m.lat_mean_us == result.latency_us
    assert m.seconds == result.seconds
    assert m.iops == pytest.approx(result.ops / result.seconds)
    assert (m.lat_p50_us, m.lat_p99_us, m.lat_stdev_us) == (None, None, None)  # gdsio prints a mean only


def test_timebased_done_exceeds_requested_and_bytes_follow_done():
    result = gdsio.parse((SAMPLES / "read-gpud-8threads-timebased.txt").read_text())[0]
    assert result.done_kib > result.requested_kib
    assert gdsio.measurement(result).bytes == 818796544 * 1024


def test_known_xfer_tokens_map_to_transfers_and_unknown_ones_are_kept():
    assert gdsio.parse((SAMPLES / "write-gpu-batch-iodepth10.txt").read_text())[0].transfer is Transfer.GPU_BATCH
    text = (SAMPLES / "write-gpud-4k.txt").read_text().replace("GPUD", "GPU_BATCH_STREAM")
    result = gdsio.parse(text)[0]
    assert (result.xfer_type, result.transfer) == ("GPU_BATCH_STREAM", None)


def test_verify_output_picks_the_case_own_io_type():
    results_ = gdsio.parse((SAMPLES / "write-read-cpuonly-verify.txt").read_text())
    assert gdsio.pick(results_, Pattern.WRITE).throughput_gib == 1.049312
    assert gdsio.pick(results_, Pattern.READ).throughput_gib == 2.69805
    with pytest.raises(ToolError, match="no RANDREAD result"):
        gdsio.pick(results_, Pattern.RANDREAD)


def test_error_output_is_a_tool_error_with_gdsio_message():
    text = (SAMPLES / "error-file-register.txt").read_text()
    proc = subprocess.CompletedProcess(["gdsio"], 1, "", text)
    with pytest.raises(ToolError, match="file register error: GPUDirect Storage not supported on current file"):
        gdsio.checked(proc)
    with pytest.raises(ToolError, match="gdsio failed"):
        gdsio.checked(subprocess.CompletedProcess(["gdsio"], 0, "", ""))


def case_of(tmp_path, **matrix):
    """The first case of a one-block gdsio matrix, with its RunContext."""
    document = {
        "directory": str(tmp_path),
        "file_size": "30G",
        "runtime": "2.5s",
        "gdsio": str(FAKE),
        "matrix": {"engine": ["gdsio"], **{k: [v] for k, v in matrix.items()}},
    }
    config = config_mod.from_dict(document, "test.yaml")
    ctx = RunContext(directory=tmp_path, file_size=config.file_size, runtime=config.runtime, options=config.options)
    return config.cases[0], ctx


def test_argv_for_a_gds_read(tmp_path):
    case, ctx = case_of(tmp_path, pattern="read", transfer="GDS", io_size="1M", threads=8, gpu=2, numa_node=1)
    assert gdsio.gdsio_argv(case, ctx) == [
        str(FAKE),
        "-D",
        str(tmp_path),
        "-d",
        "2",
        "-w",
        "8",
        "-s",
        "30G",
        "-i",
        "1M",
        "-x",
        "0",
        "-I",
        "0",
        "-n",
        "1",
        "-T",
        "3",
    ]


@pytest.mark.parametrize("transfer,code", [(t.value, c) for t, c in gdsio.XFER_CODES.items()])
def test_every_transfer_has_its_x_code(tmp_path, transfer, code):
    case, ctx = case_of(tmp_path, pattern="randwrite", transfer=transfer, io_size="128K")
    argv = gdsio.gdsio_argv(case, ctx)
    assert argv[argv.index("-x") + 1] == str(code) and argv[argv.index("-I") + 1] == "3"


def test_batch_size_verify_and_alignment_options(tmp_path):
    case, ctx = case_of(
        tmp_path, pattern="randwrite", transfer="GPU_BATCH", io_size="4K", batch_size=64, verify=True, alignment="4K"
    )
    argv = gdsio.gdsio_argv(case, ctx)
    assert argv[argv.index("-B") + 1] == "64" and argv[argv.index("-a") + 1] == "4K" and "-V" in argv
    case, ctx = case_of(tmp_path, pattern="read", transfer="GDS", io_size="4K", batch_size=64)
    assert "-B" not in gdsio.gdsio_argv(case, ctx)  # batch size only means something for GPU_BATCH


def test_find_gdsio_order(tmp_path, monkeypatch):
    other = tmp_path / "bin" / "gdsio"
    other.parent.mkdir()
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    monkeypatch.setenv("PATH", str(other.parent))
    monkeypatch.delenv("GDSIO", raising=False)
    assert sysinfo.find_gdsio(None) == (str(other), "PATH")
    monkeypatch.setenv("GDSIO", str(FAKE))
    assert sysinfo.find_gdsio(None) == (str(FAKE), "$GDSIO")
    assert sysinfo.find_gdsio(str(other)) == (str(other), "the gdsio option")
    path, why = sysinfo.find_gdsio(str(tmp_path / "missing"))
    assert path is None and "not found at" in why


def test_absent_gdsio_is_a_skip_that_says_where_it_comes_from(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("GDSIO", raising=False)
    monkeypatch.setattr(gpu, "cuda_tool", lambda name: None)
    case, ctx = case_of(tmp_path, pattern="read", transfer="GDS")
    ctx.options = {}
    reason = gdsio.GdsioRunner().unavailable(case, ctx)
    assert "gdsio not found" in reason and "/usr/local/cuda/gds/tools" in reason and "gds-tools" in reason


def test_h200_dry_run_skips_what_this_machine_lacks(monkeypatch):
    monkeypatch.delenv("GDSIO", raising=False)
    result = CliRunner().invoke(cli, ["sweep", "configs/h200.yaml", "--dry-run"])
    assert result.exit_code == 0, result.output
    config = config_mod.load("configs/h200.yaml")
    assert len(config.cases) == 4 * 4 * 4 * (4 + 7)
    assert {c.transfer for c in config.cases if c.engine == "gdsio"} == set(gdsio.XFER_CODES)
    if sysinfo.find_gdsio(None)[0] is None:
        assert result.output.count("skipped: gdsio not found") == 4 * 4 * 4 * 7


def test_fake_refuses_what_gdsio_refuses(tmp_path):
    def fake(*args):
        return subprocess.run([sys.executable, str(FAKE), *args], capture_output=True, text=True)

    bad_x = fake("-D", str(tmp_path), "-d", "0", "-w", "1", "-s", "1M", "-i", "1M", "-x", "9", "-I", "1")
    no_size = fake("-D", str(tmp_path), "-d", "0", "-w", "1", "-i", "1M", "-x", "0", "-I", "1")
    for proc in (bad_x, no_size):
        assert proc.returncode == 1 and "xfer_type:" in proc.stdout and "Usage [using cmd line options]" in proc.stdout
    assert not list(tmp_path.iterdir())
    with pytest.raises(ToolError, match="gdsio refused its arguments: invalid xfer type 9"):
        gdsio.checked(subprocess.CompletedProcess(["gdsio"], 1, bad_x.stdout, bad_x.stderr))


def write_sweep(folder: Path, **overrides) -> Path:
    """A tiny gdsio sweep config (1 MiB files, 2 threads, one repetition) in `folder`."""
    document = {
        "name": "gdsio-tiny",
        "directory": str(folder / "target"),
        "allow_root_filesystem": True,
        "file_size": "1M",
        "repetitions": 1,
        "matrix": {
            "engine": ["gdsio"],
            "pattern": ["write", "read"],
            "transfer": ["GDS"],
            "io_size": ["4K"],
            "threads": [2],
        },
    }
    document.update(overrides)
    path = folder / "gdsio-tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def sweep(folder: Path, config: Path, *extra: str, env: dict | None = None):
    """Run `gdsbench sweep` in-process; return the click result and the results CSV."""
    result = CliRunner().invoke(cli, ["sweep", str(config), "-o", str(folder / "out"), *extra], env=env)
    csvs = sorted((folder / "out").glob("*.csv"))
    return result, csvs[-1] if csvs else None


def test_sweep_through_the_fake_gdsio_records_tidy_rows(tmp_path):
    log = tmp_path / "calls.log"
    result, csv_path = sweep(tmp_path, write_sweep(tmp_path, gdsio=str(FAKE)), env={"FAKE_GDSIO_LOG": str(log)})
    assert result.exit_code == 0, result.output
    write, read = data_rows(csv_path)
    assert (write["pattern"], write["status"], read["pattern"], read["status"]) == ("write", "ok", "read", "ok")
    assert int(write["bytes"]) == 1024 * 1024  # write-gpud-4k.txt: 1024/1024(KiB)
    assert float(write["bw_bytes"]) == pytest.approx(0.013104 * 2**30)
    assert float(write["lat_mean_us"]) == 264.007812
    assert int(read["bytes"]) == 818796544 * 1024
    assert float(read["bw_bytes"]) == pytest.approx(6.524658 * 2**30)
    assert float(read["lat_mean_us"]) == 1197.370995
    assert read["lat_p99_us"] == "" and read["lat_p50_us"] == ""
    assert Path(read["raw_output"]).read_text() == (SAMPLES / "read-gpud-8threads-timebased.txt").read_text()
    if sysinfo.nvfs_stats() is None:  # no nvidia-fs here: the GDS rows cannot prove their path
        assert (write["path"], read["path"]) == ("unknown", "unknown") and "no nvidia-fs module" in read["note"]
    fill_call, *calls = log.read_text().splitlines()
    assert "-I 1" in fill_call and "-x 1" in fill_call and "-w 2" in fill_call and "-T" not in fill_call
    assert len(calls) == 2 and "-I 1" in calls[0] and "-I 0" in calls[1]  # one fill before the cases, then them
    assert not list((tmp_path / "target").glob("gdsio.*"))  # files gdsbench created are removed
    meta = results.read_sidecar(csv_path)
    assert meta["gpu_gds"]["gdsio"]["path"] == str(FAKE)


def test_read_alone_writes_its_files_first_and_keeps_files_it_did_not_make(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    (target / "gdsio.0").write_bytes(b"\0" * (1 << 20))  # a user's file at full size: reused, never deleted
    log = tmp_path / "calls.log"
    config = write_sweep(
        tmp_path,
        matrix={"engine": ["gdsio"], "pattern": ["read"], "transfer": ["CPU_ONLY"], "io_size": ["1M"], "threads": [2]},
    )
    result, csv_path = sweep(tmp_path, config, "--gdsio", str(FAKE), env={"FAKE_GDSIO_LOG": str(log)})
    assert result.exit_code == 0, result.output
    (row,) = data_rows(csv_path)
    assert row["status"] == "ok" and row["path"] == ""  # CPU_ONLY is no GPU row
    assert float(row["bw_bytes"]) == pytest.approx(3.227660 * 2**30)  # read-cpuonly-4threads.txt
    fill_call, run_call = log.read_text().splitlines()
    assert "-I 1" in fill_call and "-x 1" in fill_call and "-T" not in fill_call and "-I 0" in run_call
    assert "fill gdsio 2 x 1M" in result.output and "done in" in result.output  # the fill step's progress
    assert (target / "gdsio.0").exists() and not (target / "gdsio.1").exists()


def test_gdsio_error_makes_a_failed_row_and_the_sweep_goes_on(tmp_path):
    config = write_sweep(
        tmp_path,
        matrix={
            "engine": ["gdsio"],
            "pattern": ["write"],
            "transfer": ["GDS", "CPU_GPU"],
            "io_size": ["1M"],
            "threads": [1],
        },
    )
    env = {"GDSIO": str(FAKE), "FAKE_GDSIO_OUTPUT": "error-file-register.txt"}
    result, csv_path = sweep(tmp_path, config, env=env)
    assert_exits(result, 1)
    rows = data_rows(csv_path)
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all("GPUDirect Storage not supported on current file" in r["error"] for r in rows)


@pytest.mark.needs_gdsio
@pytest.mark.needs_odirect
def test_the_real_gdsio_cpu_only_write_then_read(tmp_path, monkeypatch):
    """The real gdsio (not the fake) on host memory: rows hold the bytes it says it moved."""
    monkeypatch.delenv("GDSIO", raising=False)
    config = write_sweep(
        tmp_path,
        matrix={
            "engine": ["gdsio"],
            "pattern": ["write", "read"],
            "transfer": ["CPU_ONLY"],
            "io_size": ["64K"],
            "threads": [2],
        },
    )
    result, csv_path = sweep(tmp_path, config)
    assert_exits(result, 0)
    write, read = data_rows(csv_path)
    assert (write["status"], read["status"]) == ("ok", "ok")
    raw = gdsio.pick(gdsio.parse(Path(read["raw_output"]).read_text()), Pattern.READ)
    assert int(read["bytes"]) == raw.done_kib * 1024 and float(read["bw_bytes"]) == pytest.approx(
        raw.throughput_gib * 2**30
    )
