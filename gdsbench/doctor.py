"""`gdsbench doctor`: what this machine can run, from the same facts every sweep's sidecar records.

The facts come from sysinfo.collect (fio and its engines, gdsio/gdscheck, GPUs with PCIe and NUMA
placement, nvidia-fs and its counters, cufile.json, kvikio's compat mode, torch/CUDA, the target's
filesystem, O_DIRECT and block device); this module only judges them and renders them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gdsbench import sysinfo

Facts = dict[str, Any]
Verdict = tuple[bool, str]


def facts(directory: Path, options: Mapping[str, Any] | None = None) -> Facts:
    """Every fact about this machine and the target directory, plus what each benchmark path can do here."""
    collected = sysinfo.collect(Path(directory), options or {})
    return {**collected, "can_run": {name: _verdict(judge(collected)) for name, judge in CHECKS.items()}}


def _verdict(result: Verdict) -> dict[str, Any]:
    """A check's (ok, why) as a JSON-friendly mapping."""
    return {"ok": result[0], "why": result[1]}


def _gpu_names(f: Facts) -> Verdict:
    """Whether an NVIDIA GPU is visible, naming them."""
    gpus = f["gpu_gds"]["gpus"]
    if not gpus["gpus"]:
        return False, gpus["reason"] or "no NVIDIA GPU"
    names = ", ".join(f"{g['index']}: {g['name']} ({g['pci_bus_id']}, NUMA {g['numa_node']})" for g in gpus["gpus"])
    return True, f"{len(gpus['gpus'])} via {gpus['source']}: {names}"


def _fio_cpu(f: Facts) -> Verdict:
    """fio's host-memory paths need fio and an async engine (libaio or io_uring)."""
    if not f["tools"]["fio"]:
        return False, "fio not found; install it with your OS packages (apt-get install fio)"
    usable = [e for e in ("libaio", "io_uring") if e in f["tools"]["fio_engines"]]
    return bool(usable), f"{f['tools']['fio']} with {', '.join(usable) or 'no libaio/io_uring engine'}"


def _fio_gpu(f: Facts) -> Verdict:
    """fio's GDS/CPU_GPU paths need the libcufile engine and a GPU."""
    if "libcufile" not in f["tools"]["fio_engines"]:
        return False, "this fio has no libcufile engine; build fio with --enable-libcufile"
    gpu_ok, why = _gpu_names(f)
    return gpu_ok, "libcufile engine present" + ("" if gpu_ok else f", but {why}")


def _gdsio(f: Facts) -> Verdict:
    """gdsio cases need gdsio (and, to pass, a GPU)."""
    gdsio = f["gpu_gds"]["gdsio"]
    if not gdsio["path"]:
        return False, gdsio["how"]
    gpu_ok, why = _gpu_names(f)
    return gpu_ok, f"{gdsio['path']} (from {gdsio['how']})" + ("" if gpu_ok else f", but {why}")


def _gds_path(f: Facts) -> Verdict:
    """True GDS (not cuFile's compat mode) needs nvidia-fs (or P2PDMA); telling them apart per run needs
    nvidia-fs's read/write counters, which count only with rw_stats_enabled=1."""
    nvfs = f["gpu_gds"]["nvidia_fs"]
    p2pdma = sysinfo.cufile_setting(f["gpu_gds"]["cufile"], "use_pci_p2pdma")
    if not nvfs["loaded"]:
        mode = (
            "P2PDMA mode (use_pci_p2pdma): no kernel counters, rows say path=unknown"
            if p2pdma
            else ("cuFile would run in compat (POSIX) mode unless P2PDMA applies (CUDA 12.8+)")
        )
        return False, f"nvidia-fs module not loaded: {mode}"
    counting = nvfs.get("rw_stats_enabled")
    stats = f"rw_stats_enabled={counting}" + (
        "" if counting == "1" else f": rows say path=unknown; enable the counters: {sysinfo.RW_STATS_REMEDY}"
    )
    return True, f"nvidia-fs {nvfs['version'] or '(version unknown)'} loaded; {stats}"


def _kvikio(f: Facts) -> Verdict:
    """kvikio for the kvikio engine and the gds checkpoint backend: kvikio's own view (asked of kvikio) and
    cuFile's view (nvidia-fs through cuFile's driver properties), reported apart."""
    probe = f["gpu_gds"]["kvikio"]
    if not probe["installed"]:
        return False, "kvikio not installed (pip install kvikio-cu12 or kvikio-cu13, matching torch's CUDA)"
    if not probe.get("importable"):
        return False, f"{probe['versions']}: {probe.get('reason')}"
    view, cufile = probe["kvikio"], probe["cufile"]
    mode = "compat mode (POSIX, no cuFile)" if view["compat_preferred"] else "cuFile"
    gds = {True: "nvidia-fs available (GDS)", False: "no nvidia-fs (cuFile compat or P2PDMA)"}.get(
        cufile["is_gds_available"], f"unknown ({cufile.get('cufile_reason')})"
    )
    why = (
        f"kvikio {view['version']}: compat_mode={view['compat_mode_setting']} -> {mode}, "
        f"{view['num_threads']} thread(s) by default; cuFile: {gds}"
    )
    return not view["compat_preferred"], why


def _torch(f: Facts) -> Verdict:
    """torch with a usable CUDA device."""
    torch = f["gpu_gds"]["torch"]
    if not torch.get("version"):
        return False, torch.get("reason", "torch not installed")
    if not torch.get("cuda_available"):
        build = f"built for CUDA {torch['cuda_build']}" if torch.get("cuda_build") else "a CPU-only build"
        return False, f"torch {torch['version']} sees no CUDA device ({build})"
    return True, f"torch {torch['version']}, CUDA {torch.get('cuda_build')}, {torch.get('devices')} device(s)"


def _odirect(f: Facts) -> Verdict:
    """O_DIRECT in the target directory (CPU_ONLY and every GDS path need it)."""
    target = f["target"]
    return bool(target["odirect"]), f"{target['directory']} on {target.get('fstype')}: {target['odirect_reason']}"


def _pcie_links(f: Facts) -> Verdict:
    """Every PCIe link of the NVMe drives, GPUs and the target device (and the bridges on their way) at its
    maximum speed and width: a link that trained low caps bandwidth (reseat the card, check the slot)."""
    topology = f.get("topology") or {}
    low = topology.get("degraded_links") or []
    if low:
        return False, "trained below maximum: " + "; ".join(low)
    pcie = topology.get("pcie") or {}
    count = len(pcie.get("nvme", [])) + len(pcie.get("gpus", []))
    if not count:
        return True, "no NVMe or NVIDIA GPU on PCIe here (nothing to check)"
    return True, f"{count} NVMe/GPU device(s), every link at its maximum speed and width"


#: What doctor judges, in the order it prints: name -> check over the collected facts.
CHECKS: dict[str, Callable[[Facts], Verdict]] = {
    "GPU": _gpu_names,
    "fio CPU_ONLY/CPU_CACHED": _fio_cpu,
    "fio GDS/CPU_GPU (libcufile)": _fio_gpu,
    "gdsio": _gdsio,
    "GDS path (nvidia-fs)": _gds_path,
    "kvikio": _kvikio,
    "torch CUDA": _torch,
    "O_DIRECT on target": _odirect,
    "PCIe links": _pcie_links,
}


def to_json(f: Facts) -> str:
    """The facts as indented JSON."""
    return json.dumps(f, indent=2, default=str)


def render(f: Facts, console: Console) -> None:
    """The verdicts, then the details that explain them (cufile.json, block device), as rich tables."""
    table = Table(title=f"gdsbench doctor: {f['machine']['host']} ({f['machine']['kernel']})")
    table.add_column("path")
    table.add_column("can run")
    table.add_column("why")
    for name, verdict in f["can_run"].items():
        table.add_row(name, "[green]yes[/]" if verdict["ok"] else "[red]no[/]", verdict["why"])
    console.print(table)
    console.print(_details(f))


def _details(f: Facts) -> Table:
    """Supporting facts: fio engines, gdscheck, cufile.json settings, the target's block device."""
    gds = f["gpu_gds"]
    cufile = gds["cufile"]
    device = f["target"].get("block_device") or {}
    members = ", ".join(f"{m['name']} ({m['model']})" for m in device.get("members", []))
    rows = {
        "fio ioengines": ", ".join(f["tools"]["fio_engines"]) or "-",
        "gdscheck": gds["gdscheck"] or "not found",
        "gds_stats": gds.get("gds_stats") or "not found",
        "cufile.json": (
            f"{cufile['path']}: {cufile.get('properties') or cufile.get('error') or '{}'}"
            if cufile["exists"]
            else f"{cufile['path']} not found (CUFILE_ENV_PATH_JSON unset or missing)"
        ),
        "CUFILE_* overrides": ", ".join(f"{k}={v}" for k, v in cufile.get("env", {}).items()) or "none set",
        "nvidia-fs stats": str(gds["nvidia_fs"]["stats"]) if gds["nvidia_fs"]["stats"] is not None else "not readable",
        "nvidia-fs rw_stats_enabled": gds["nvidia_fs"].get("rw_stats_enabled") or "-",
        "target": f"{f['target']['directory']}: {f['target'].get('fstype')} on {f['target'].get('device')}",
        "block device": f"{device.get('name', '-')} model {device.get('model') or '-'}"
        + (f"; members {members}" if members else ""),
    }
    table = Table(title="details", show_header=False)
    for key, value in rows.items():
        table.add_row(key, value)
    return table
