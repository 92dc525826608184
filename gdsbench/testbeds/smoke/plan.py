"""The smoke run's steps, in order (GPU-NOTES section 3), each a function of the Smoke run.

01 machine facts, (02: tools/gpu_install.py, run before by `make gpu-smoke`), 03 kvikio probe, 04 doctor, 05 the
needs_cuda tests, 06 kvikio vs fastpersist checkpoint sweep at 1 and 8 kvikio threads, 07 the gds load
round trip with a flipped byte, 08 configs/gds-smoke.yaml, 09 gdsio and nvidia-fs directly.
"""

from __future__ import annotations

import csv
import shutil
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gdsbench.sysinfo import gpu

if TYPE_CHECKING:
    from gdsbench.testbeds.smoke import Smoke

ROOT = Path(__file__).resolve().parents[3]  # the checkout: tests/ and configs/ live here
NO_NVIDIA_FS = (
    f"no nvidia-fs ({gpu.NVFS_STATS} missing): install NVIDIA's GDS driver (nvidia-fs, pulled in by "
    "nvidia-gds) and load it (modprobe nvidia-fs)"
)
MACHINE = [
    ["nvidia-smi"],
    ["nvidia-smi", "--query-gpu=index,name,pci.bus_id,driver_version,memory.total", "--format=csv"],
    ["uname", "-a"],
    ["cat", "/etc/os-release"],
    ["free", "-g"],
    ["nproc"],
    ["lsmod"],
    ["ls", "-ld", "/run/udev"],
    ["ls", "-l", "/proc/driver/nvidia-fs/"],
    ["cat", str(gpu.RW_STATS_PARAM)],
    ["cat", str(gpu.NVFS_STATS)],
    ["ls", "-l", *gpu.GDS_TOOL_DIRS],
]


def machine(smoke: Smoke) -> None:
    """01: the machine facts, each command's output in 01-machine.txt (a missing tool is said, not fatal)."""

    def body() -> int:
        commands = [*MACHINE, ["findmnt", "-T", str(smoke.directory)], ["df", "-h", str(smoke.directory)]]
        commands.append(["cat", str(gpu.cufile_config()["path"])])
        for argv in commands:
            if shutil.which(argv[0]) is None:
                with open(smoke.out / "01-machine.txt", "a") as f:
                    f.write(f"$ {' '.join(argv)}: not found\n")
                continue
            smoke.run("machine", argv, "01-machine.txt", 60, append=True)
        return 0

    smoke.step("01 machine facts", None, body, "")


def kvikio_probe(smoke: Smoke) -> None:
    """03: kvikio's own view and a 512 MiB write/read at 1 and 8 threads."""
    argv = smoke.python("-m", "gdsbench.testbeds.smoke.gpu_checks", "kvikio", str(smoke.directory))
    proves = "kvikio writes and reads 512 MiB through CuFile at 1 and 8 threads, bytes checked"
    smoke.step("03 kvikio probe", _gpu_skip(smoke), lambda: smoke.run("kvikio", argv, "03-kvikio.txt", 300), proves)


def doctor(smoke: Smoke) -> None:
    """04: gdsbench doctor, as a table and as JSON."""

    def body() -> int:
        base = smoke.python("-m", "gdsbench", "doctor", "--directory", str(smoke.directory))
        return smoke.run("doctor", base, "04-doctor.txt", 300) or smoke.run(
            "doctor", [*base, "--json"], "04-doctor.json", 300
        )

    smoke.step("04 doctor", None, body, "doctor's view of what can run here")


def gpu_tests(smoke: Smoke) -> None:
    """05: every needs_cuda test (CUDA-source saves, GDS loads, the kvikio engine at 1 and 8 threads)."""
    argv = smoke.python("-m", "pytest", "-m", "needs_cuda", "-rs", "-v", "-p", "no:cacheprovider", str(ROOT / "tests"))
    skip = _gpu_skip(smoke) or (None if (ROOT / "tests").is_dir() else f"no tests/ beside {ROOT}")
    proves = "the needs_cuda tests pass (CUDA-source saves, GDS loads, the kvikio engine)"
    smoke.step("05 needs_cuda tests", skip, lambda: smoke.run("tests", argv, "05-pytest.txt", 600), proves)


def sweep(smoke: Smoke, name: str, step: str, document: dict[str, Any], proves: str) -> None:
    """Write a sweep config into the folder, run it there, and report what it wrote; a sweep whose every case was
    skipped is a skipped step (the reasons, with what to install, are its cases')."""

    def body() -> int | str:
        config, results = smoke.out / f"{name}.yaml", smoke.out / name
        config.write_text(yaml.safe_dump(document, sort_keys=False))
        dry = smoke.python("-m", "gdsbench", "sweep", str(config), "--dry-run")
        smoke.run(step, dry, f"{name}-plan.txt", 120)
        rc = smoke.run(
            step, smoke.python("-m", "gdsbench", "sweep", str(config), "-o", str(results)), f"{name}.txt", 900
        )
        for path in sorted(results.glob("*.csv")):
            smoke.run(step, smoke.python("-m", "gdsbench", "report", str(path)), f"{name}-report.txt", 120, append=True)
        measured, reasons = swept(results)
        if reasons and not measured:
            return "every case skipped: " + "; ".join(reason for reason, _ in reasons)
        smoke.swept[step] = measured, [f"{n} case{'s' if n > 1 else ''} skipped: {reason}" for reason, n in reasons]
        return rc

    smoke.step(step, None, body, proves)


def swept(results: Path) -> tuple[list[str], list[tuple[str, int]]]:
    """What a sweep measured (`fio CPU_ONLY write+read`, from its ok rows) and its skip reasons with their counts
    (most common first)."""
    rows: list[dict[str, str]] = []
    for path in sorted(results.glob("*.csv")):
        with open(path, newline="") as f:
            rows += list(csv.DictReader(f))
    patterns: dict[str, list[str]] = {}
    for r in rows:
        if r["status"] == "ok":
            done = patterns.setdefault(f"{r['engine']} {r['transfer']}", [])
            done += [] if r["pattern"] in done else [r["pattern"]]
    reasons = Counter(r["error"].removeprefix("skipped: ") for r in rows if r["status"] == "skipped")
    return [f"{case} {'+'.join(done)}" for case, done in patterns.items()], reasons.most_common()


def checkpoints(smoke: Smoke) -> None:
    """06: kvikio at 1 and 8 threads beside fastpersist (kvikio rows are skipped by the sweep without CUDA)."""
    size = "32M" if smoke.quick else ("1G" if _gpu_skip(smoke) is None else "256M")
    proves = "checkpoint saves and loads, each load verified"
    sweep(
        smoke,
        "06-checkpoint",
        "06 kvikio vs fastpersist",
        proves=proves,
        document={
            "name": "smoke-checkpoint",
            "directory": str(smoke.directory),
            "allow_root_filesystem": True,
            "file_size": size,
            "checkpoint_size": size,
            "workload": "llama3-8b",
            "cache": "cold",
            "repetitions": 1 if smoke.quick else 2,
            "matrix": [
                {"engine": ["kvikio"], "pattern": ["save", "load"], "transfer": ["GDS"], "threads": [1, 8]},
                {"engine": ["fastpersist"], "pattern": ["save", "load"], "transfer": ["CPU_ONLY"], "threads": [4]},
            ],
        },
    )


def gds_load(smoke: Smoke) -> None:
    """07: load(map_location='cuda', backend='gds') round trip; a flipped byte must be refused."""
    argv = smoke.python("-m", "gdsbench.testbeds.smoke.gpu_checks", "gds-load", str(smoke.directory))
    proves = "ckptio's gds backend loads bit-exact onto the GPU and refuses a flipped byte"
    smoke.step(
        "07 gds load + flipped byte", _gpu_skip(smoke), lambda: smoke.run("gds", argv, "07-gds-load.txt", 300), proves
    )


def gds_smoke(smoke: Smoke) -> None:
    """08: configs/gds-smoke.yaml pointed at the smoke directory (smaller files without a GPU)."""
    document = yaml.safe_load((ROOT / "configs" / "gds-smoke.yaml").read_text())
    document.update({"directory": str(smoke.directory), "allow_root_filesystem": True})
    if smoke.quick or _gpu_skip(smoke):
        document.update({"file_size": "16M" if smoke.quick else "256M", "runtime": "1s" if smoke.quick else "3s"})
    sweep(smoke, "08-gds-smoke", "08 configs/gds-smoke.yaml", document, "sequential 1 MiB I/O by path")


def gdsio_direct(smoke: Smoke) -> None:
    """09: gdscheck, gdsio's usage and a GDS write/read between two nvidia-fs snapshots (rw stats on)."""
    path, why = gpu.find_gdsio(None)
    skip = _gpu_skip(smoke) or (None if path else why) or (None if gpu.NVFS_STATS.exists() else NO_NVIDIA_FS)

    def body() -> int:
        log, base = (
            "09-gdsio.txt",
            [str(path), "-D", str(smoke.directory), "-d", "0", "-w", "4", "-s", "1G", "-i", "1M"],
        )
        ours = [p for p in (smoke.directory / f"gdsio.{n}" for n in range(4)) if not p.exists()]
        gdscheck = gpu.cuda_tool("gdscheck")
        for argv in (
            [gdscheck, "-p"] if gdscheck else None,
            [str(path), "-h"],
            ["cat", str(gpu.NVFS_STATS)],
            [*base, "-x", "0", "-I", "1"],
            [*base, "-x", "0", "-I", "0"],
            ["cat", str(gpu.NVFS_STATS)],
        ):
            if argv:
                smoke.run("gdsio", argv, log, 300, append=True)
        for created in ours:  # only the files this step made
            created.unlink(missing_ok=True)
        return 0

    smoke.step("09 gdsio + nvidia-fs", skip, body, "gdsio's GDS write and read went through nvidia-fs (its counters)")


def _gpu_skip(smoke: Smoke) -> str | None:
    """Why a GPU step cannot run (not asked, or no CUDA device torch can use), else None."""
    if not smoke.gpu:
        return "not asked (--gpu)"
    return smoke.cuda()


STEPS = (machine, kvikio_probe, doctor, gpu_tests, checkpoints, gds_load, gds_smoke, gdsio_direct)
