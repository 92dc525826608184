"""The smoke run's steps, in order (GPU-NOTES section 3), each a function of the Smoke run.

01 machine facts, (02: tools/gpu_install.py, run before by `make gpu-smoke`), 03 kvikio probe, 04 doctor, 05 the
needs_cuda tests, 06 kvikio vs fastpersist checkpoint sweep at 1 and 8 kvikio threads, 07 the gds load
round trip with a flipped byte, 08 configs/gds-smoke.yaml, 09 gdsio and nvidia-fs directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from gdsbench.sysinfo import gpu

if TYPE_CHECKING:
    from gdsbench.smoke import Smoke

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tests/ and configs/ live here
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

    smoke.step("01 machine facts", None, body)


def kvikio_probe(smoke: Smoke) -> None:
    """03: kvikio's own view and a 512 MiB write/read at 1 and 8 threads."""
    argv = smoke.python("-m", "gdsbench.smoke.gpu_checks", "kvikio", str(smoke.directory))
    smoke.step("03 kvikio probe", _gpu_skip(smoke), lambda: smoke.run("kvikio", argv, "03-kvikio.txt", 300))


def doctor(smoke: Smoke) -> None:
    """04: gdsbench doctor, as a table and as JSON."""

    def body() -> int:
        base = smoke.python("-m", "gdsbench", "doctor", "--directory", str(smoke.directory))
        return smoke.run("doctor", base, "04-doctor.txt", 300) or smoke.run(
            "doctor", [*base, "--json"], "04-doctor.json", 300
        )

    smoke.step("04 doctor", None, body)


def gpu_tests(smoke: Smoke) -> None:
    """05: every needs_cuda test (CUDA-source saves, GDS loads, the kvikio engine at 1 and 8 threads)."""
    argv = smoke.python("-m", "pytest", "-m", "needs_cuda", "-rs", "-v", "-p", "no:cacheprovider", str(ROOT / "tests"))
    skip = _gpu_skip(smoke) or (None if (ROOT / "tests").is_dir() else f"no tests/ beside {ROOT}")
    smoke.step("05 needs_cuda tests", skip, lambda: smoke.run("tests", argv, "05-pytest.txt", 600))


def sweep(smoke: Smoke, name: str, step: str, document: dict[str, Any]) -> None:
    """Write a sweep config into the folder, run it there, and report what it wrote."""

    def body() -> int:
        config, results = smoke.out / f"{name}.yaml", smoke.out / name
        config.write_text(yaml.safe_dump(document, sort_keys=False))
        dry = smoke.python("-m", "gdsbench", "sweep", str(config), "--dry-run")
        smoke.run(step, dry, f"{name}-plan.txt", 120)
        rc = smoke.run(
            step, smoke.python("-m", "gdsbench", "sweep", str(config), "-o", str(results)), f"{name}.txt", 900
        )
        for csv in sorted(results.glob("*.csv")):
            smoke.run(step, smoke.python("-m", "gdsbench", "report", str(csv)), f"{name}-report.txt", 120, append=True)
        return rc

    smoke.step(step, None, body)


def checkpoints(smoke: Smoke) -> None:
    """06: kvikio at 1 and 8 threads beside fastpersist (kvikio rows are skipped by the sweep without CUDA)."""
    size = "32M" if smoke.quick else ("1G" if _gpu_skip(smoke) is None else "256M")
    sweep(smoke, "06-checkpoint", "06 kvikio vs fastpersist", {
        "name": "smoke-checkpoint", "directory": str(smoke.directory), "allow_root_filesystem": True,
        "file_size": size, "checkpoint_size": size, "workload": "llama3-8b", "cache": "cold",
        "repetitions": 1 if smoke.quick else 2,
        "matrix": [
            {"engine": ["kvikio"], "pattern": ["save", "load"], "transfer": ["GDS"], "threads": [1, 8]},
            {"engine": ["fastpersist"], "pattern": ["save", "load"], "transfer": ["CPU_ONLY"], "threads": [4]},
        ],
    })  # fmt: skip


def gds_load(smoke: Smoke) -> None:
    """07: load(map_location='cuda', backend='gds') round trip; a flipped byte must be refused."""
    argv = smoke.python("-m", "gdsbench.smoke.gpu_checks", "gds-load", str(smoke.directory))
    smoke.step("07 gds load + flipped byte", _gpu_skip(smoke), lambda: smoke.run("gds", argv, "07-gds-load.txt", 300))


def gds_smoke(smoke: Smoke) -> None:
    """08: configs/gds-smoke.yaml pointed at the smoke directory (smaller files without a GPU)."""
    document = yaml.safe_load((ROOT / "configs" / "gds-smoke.yaml").read_text())
    document.update({"directory": str(smoke.directory), "allow_root_filesystem": True})
    if smoke.quick or _gpu_skip(smoke):
        document.update({"file_size": "16M" if smoke.quick else "256M", "runtime": "1s" if smoke.quick else "3s"})
    sweep(smoke, "08-gds-smoke", "08 configs/gds-smoke.yaml", document)


def gdsio_direct(smoke: Smoke) -> None:
    """09: gdscheck, gdsio's usage and a GDS write/read between two nvidia-fs snapshots (rw stats on)."""
    path, _ = gpu.find_gdsio(None)
    skip = _gpu_skip(smoke) or (None if path else "no gdsio") or (None if gpu.NVFS_STATS.exists() else "no nvidia-fs")

    def body() -> int:
        log, base = (
            "09-gdsio.txt",
            [str(path), "-D", str(smoke.directory), "-d", "0", "-w", "4", "-s", "1G", "-i", "1M"],
        )
        ours = [p for p in (smoke.directory / f"gdsio.{n}" for n in range(4)) if not p.exists()]
        gdscheck = gpu.cuda_tool("gdscheck")
        for argv in ([gdscheck, "-p"] if gdscheck else None, [str(path), "-h"], ["cat", str(gpu.NVFS_STATS)],
                     [*base, "-x", "0", "-I", "1"], [*base, "-x", "0", "-I", "0"], ["cat", str(gpu.NVFS_STATS)]):  # fmt: skip
            if argv:
                smoke.run("gdsio", argv, log, 300, append=True)
        for created in ours:  # only the files this step made
            created.unlink(missing_ok=True)
        return 0

    smoke.step("09 gdsio + nvidia-fs", skip, body)


def _gpu_skip(smoke: Smoke) -> str | None:
    """Why a GPU step cannot run (not asked, or no CUDA device torch can use), else None."""
    if not smoke.gpu:
        return "not asked (--gpu)"
    return smoke.cuda()


STEPS = (machine, kvikio_probe, doctor, gpu_tests, checkpoints, gds_load, gds_smoke, gdsio_direct)
