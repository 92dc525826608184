"""GPU and GPUDirect Storage discovery: GPUs with PCIe and NUMA placement, the nvidia-fs driver and its
counters, cufile.json, kvikio's mode, torch's CUDA, and where NVIDIA's GDS tools (gdsio, gdscheck) are.
"""

from __future__ import annotations

import ast
import contextlib
import glob
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench.sysinfo.host import read_fact, version

#: Where NVIDIA's GDS tools packages install gdsio and gdscheck (newest CUDA first among the cuda* ones).
GDS_TOOL_DIRS = ("/usr/local/cuda*/gds/tools", "/usr/libexec/gds/tools")
GDS_TOOLS_HELP = (
    "NVIDIA's GDS tools package (gds-tools-<cuda version>, pulled in by nvidia-gds) installs "
    "gdsio, gdscheck and gds_stats under /usr/local/cuda/gds/tools (some distributions: /usr/libexec/gds/tools)"
)
NVFS_STATS = Path("/proc/driver/nvidia-fs/stats")
#: nvidia-fs counts reads and writes only while this module parameter is 1 (its default is 0).
RW_STATS_PARAM = Path("/sys/module/nvidia_fs/parameters/rw_stats_enabled")
RW_STATS_REMEDY = f"echo 1 > {RW_STATS_PARAM}"
#: cufile.json's own key names under "properties" (gdscheck prints some under other names:
#: use_compat_mode for allow_compat_mode, max_batch_io_size for io_batchsize).
CUFILE_KEYS = (
    "allow_compat_mode",
    "force_compat_mode",
    "use_pci_p2pdma",
    "max_direct_io_size_kb",
    "max_device_cache_size_kb",
    "max_device_pinned_mem_size_kb",
    "use_poll_mode",
    "poll_mode_max_size_kb",
    "io_batchsize",
    "gds_rdma_write_support",
)


def _version_key(path: str) -> tuple[int, ...]:
    """Sort key for /usr/local/cuda-X.Y/...: the CUDA version the (resolved) folder names."""
    parts = Path(path).resolve().parts
    folder = next((p for p in parts if p.startswith("cuda")), "")
    return tuple(int(n) for n in re.findall(r"\d+", folder))


def cuda_tool(name: str) -> str | None:
    """A GDS tool (gdsio, gdscheck) on PATH, else in GDS_TOOL_DIRS, newest CUDA first."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [
        path for folder in GDS_TOOL_DIRS for path in glob.glob(f"{folder}/{name}") if os.access(path, os.X_OK)
    ]
    return max(candidates, key=_version_key) if candidates else None


def find_gdsio(explicit: str | None = None) -> tuple[str | None, str]:
    """Where gdsio is: the path given (--gdsio or the config's `gdsio`), $GDSIO, PATH, the GDS tool folders.

    Returns (path, how it was found) or (None, why not and where gdsio comes from).
    """
    for given, source in ((explicit, "the gdsio option"), (os.environ.get("GDSIO"), "$GDSIO")):
        if given:
            path = shutil.which(given) or (given if os.access(given, os.X_OK) and Path(given).is_file() else None)
            return (path, source) if path else (None, f"gdsio not found at {given} (from {source})")
    path = cuda_tool("gdsio")
    if path:
        return path, "PATH" if shutil.which("gdsio") else str(Path(path).parent)
    folders = ", ".join(GDS_TOOL_DIRS)
    return None, f"gdsio not found (--gdsio, $GDSIO, PATH, {folders}); {GDS_TOOLS_HELP}"


def gpus() -> dict[str, Any]:
    """NVIDIA GPUs with PCIe address and NUMA node: from NVML (pynvml) if installed, else nvidia-smi."""
    if importlib.util.find_spec("pynvml") is not None:
        found = _nvml_gpus()
        if found is not None:
            return {"source": "nvml", "gpus": found, "reason": None if found else "NVML lists no GPU"}
    if shutil.which("nvidia-smi") is None:
        return {
            "source": None,
            "gpus": [],
            "reason": "no NVIDIA GPU visible: pynvml not installed and nvidia-smi not found",
        }
    return _smi_gpus()


def _text(value: str | bytes) -> str:
    """NVML strings: str in new pynvml, bytes in old."""
    return value if isinstance(value, str) else value.decode()


def _nvml_gpus() -> list[dict[str, Any]] | None:
    """GPUs as NVML reports them, or None when NVML cannot start (no driver)."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except Exception:  # pynvml raises NVMLError subclasses for a missing driver or library
        return None
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name, bus = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetPciInfo(handle).busId
            found.append(_gpu(index, _text(name), _text(bus), pynvml.nvmlDeviceGetMemoryInfo(handle).total))
        return found
    finally:
        pynvml.nvmlShutdown()


def _smi_gpus() -> dict[str, Any]:
    """GPUs from `nvidia-smi --query-gpu ... --format=csv`."""
    argv = ["nvidia-smi", "--query-gpu=index,name,pci.bus_id,memory.total", "--format=csv,noheader,nounits"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"source": "nvidia-smi", "gpus": [], "reason": f"nvidia-smi failed: {exc}"}
    if proc.returncode != 0:
        why = (proc.stdout + proc.stderr).strip().splitlines()
        return {"source": "nvidia-smi", "gpus": [], "reason": f"nvidia-smi: {why[0] if why else proc.returncode}"}
    found = []
    for line in proc.stdout.strip().splitlines():
        index, name, bus, mib = [field.strip() for field in line.split(",")[:4]]
        found.append(_gpu(int(index), name, bus, int(float(mib)) * 2**20))
    return {"source": "nvidia-smi", "gpus": found, "reason": None if found else "nvidia-smi lists no GPU"}


def _gpu(index: int, name: str, bus_id: str, memory_bytes: int) -> dict[str, Any]:
    """One GPU's facts, with the NUMA node of its PCIe device from sysfs."""
    bdf = bus_id.lower()
    bdf = bdf[4:] if len(bdf) > 12 and bdf.startswith("0000") else bdf  # NVML pads the domain to 8 digits
    numa = read_fact(Path("/sys/bus/pci/devices") / bdf / "numa_node")
    return {
        "index": index,
        "name": name,
        "pci_bus_id": bdf,
        "memory_bytes": memory_bytes,
        "numa_node": int(numa) if numa not in (None, "") else None,
    }


def parse_nvfs_stats(text: str) -> dict[str, Any]:
    """/proc/driver/nvidia-fs/stats: `io_stats` (True/False from the `IO stats: Enabled|Disabled` header, None
    when absent) and, only while enabled, the read/write calls (n) and MiB moved through nvidia-fs.

    With `rw_stats_enabled` 0 (the default) the lines read `Reads : err=0 io_state_err=0`: no counts at all,
    which must never be read as "no GDS I/O happened"."""
    header = re.search(r"^\s*IO stats\s*:\s*(Enabled|Disabled)", text, re.MULTILINE | re.IGNORECASE)
    counters: dict[str, Any] = {"io_stats": header.group(1).lower() == "enabled" if header else None}
    for kind, mib in (("Reads", "readMiB"), ("Writes", "writeMiB")):
        match = re.search(rf"^\s*{kind}\s*:\s*n=(\d+).*?\b{mib}=(\d+)", text, re.MULTILINE)
        if match:
            counters[f"{kind.lower()}"] = int(match.group(1))
            counters[f"{kind.lower()}_mib"] = int(match.group(2))
    return counters


def nvfs_stats() -> dict[str, Any] | None:
    """nvidia-fs's stats header and read/write counters now, or None when the stats file cannot be read."""
    try:
        return parse_nvfs_stats(NVFS_STATS.read_text())
    except OSError:
        return None


def nvidia_fs() -> dict[str, Any]:
    """The nvidia-fs kernel module (GDS's driver): loaded or not, its version, rw_stats_enabled and counters."""
    loaded = Path("/sys/module/nvidia_fs").exists() or NVFS_STATS.parent.exists()
    return {
        "loaded": loaded,
        "version": read_fact(Path("/sys/module/nvidia_fs/version")),
        "rw_stats_enabled": read_fact(RW_STATS_PARAM),
        "stats": nvfs_stats(),
    }


def strip_json_comments(text: str) -> str:
    """cufile.json allows // and /* */ comments; drop them, leaving strings (paths, URLs) alone."""
    pattern = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.DOTALL)
    return pattern.sub(lambda m: m.group(1) or "", text)


def cufile_env() -> dict[str, str]:
    """The CUFILE_* environment variables set here: they override cufile.json (CUFILE_ALLOW_COMPAT_MODE,
    CUFILE_FORCE_COMPAT_MODE, CUFILE_USE_PCIP2PDMA, CUFILE_ENV_PATH_JSON, CUFILE_LOGGING_LEVEL, ...)."""
    return {name: value for name, value in sorted(os.environ.items()) if name.startswith("CUFILE_")}


def cufile_config() -> dict[str, Any]:
    """Where cufile.json is ($CUFILE_ENV_PATH_JSON, else /etc/cufile.json), the settings that matter, its
    profile.cufile_stats level (gds_stats needs >= 1) and the CUFILE_* environment overrides."""
    path = Path(os.environ.get("CUFILE_ENV_PATH_JSON") or "/etc/cufile.json")
    facts: dict[str, Any] = {"path": str(path), "exists": path.is_file(), "env": cufile_env()}
    if not facts["exists"]:
        return facts
    try:
        document = json.loads(strip_json_comments(path.read_text()))
    except (OSError, ValueError) as exc:
        return {**facts, "error": f"cannot read {path}: {exc}"}
    document = document if isinstance(document, dict) else {}
    properties = document.get("properties") or {}
    facts["properties"] = {key: properties[key] for key in CUFILE_KEYS if key in properties}
    facts["cufile_stats"] = (document.get("profile") or {}).get("cufile_stats")
    facts["logging_level"] = (document.get("logging") or {}).get("level")
    return facts


#: cuFile's environment override of each boolean property (the names differ from cufile.json's).
CUFILE_ENV_KEYS = {
    "allow_compat_mode": "CUFILE_ALLOW_COMPAT_MODE",
    "force_compat_mode": "CUFILE_FORCE_COMPAT_MODE",
    "use_pci_p2pdma": "CUFILE_USE_PCIP2PDMA",
}


def cufile_setting(facts: Mapping[str, Any], key: str) -> bool | None:
    """A boolean cuFile property as cuFile resolves it: its CUFILE_* variable wins over cufile.json."""
    env = facts.get("env", {}).get(CUFILE_ENV_KEYS.get(key, ""))
    if env is not None:
        return env.strip().lower() in ("1", "true", "yes", "on")
    value = (facts.get("properties") or {}).get(key)
    return value if isinstance(value, bool) else None


def kvikio_probe(timeout: float = 120) -> dict[str, Any]:
    """kvikio's own view, asked of kvikio in a child process (importing it dlopens libcufile): its version,
    compat_mode setting, whether it prefers compat mode here, its thread count, and what cuFile's driver
    properties say about nvidia-fs (is_gds_available). Never raises: a failed probe says why."""
    versions = {name: v for name in ("kvikio-cu13", "kvikio-cu12", "kvikio") if (v := version(name))}
    if importlib.util.find_spec("kvikio") is None:
        return {"versions": versions, "installed": False, "reason": "kvikio not installed"}
    argv = [sys.executable, "-m", "gdsbench.sysinfo.kvikio_api"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        probe = json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        return {"versions": versions, "installed": True, "reason": f"kvikio probe failed: {exc}"}
    return {"versions": versions, "installed": True, **probe}


_TORCH_PROBE = (
    "import json, torch; c = torch.cuda.is_available(); "
    "print(json.dumps({'version': torch.__version__, 'cuda_build': torch.version.cuda, "
    "'cuda_available': c, 'devices': torch.cuda.device_count() if c else 0}))"
)


def torch_build(spec: Any) -> dict[str, Any]:
    """The constants of torch's generated torch/version.py (__version__, cuda, hip), torch found as `spec`, read
    without importing torch; empty where the file is missing or not plain assignments."""
    folders = list(spec.submodule_search_locations or [])
    try:
        tree = ast.parse((Path(folders[0]) / "version.py").read_text())
    except (IndexError, OSError, SyntaxError, ValueError):
        return {}
    values: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name):
                with contextlib.suppress(ValueError, TypeError, SyntaxError):
                    values[target.id] = ast.literal_eval(node.value)
    return values


def torch_cuda() -> dict[str, Any]:
    """torch's version, the CUDA it was built for and whether it sees a GPU: a CPU build (neither CUDA nor ROCm
    in its version.py) sees none, so only a GPU build is probed, in a child process (a sweep never imports
    torch for this: ~1.5 s of CPU)."""
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return {"version": None, "reason": "torch is not installed"}
    build = torch_build(spec)
    if isinstance(build.get("__version__"), str) and "cuda" in build and not build["cuda"] and not build.get("hip"):
        return {"version": build["__version__"], "cuda_build": None, "cuda_available": False, "devices": 0}
    try:
        proc = subprocess.run([sys.executable, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=120)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"version": version("torch"), "reason": "importing torch failed"}


def gpu_gds(options: Mapping[str, Any]) -> dict[str, Any]:
    """GPUs, GDS driver, cuFile config, GDS tools, kvikio and torch/CUDA: what GPU paths can run here."""
    nvfs = nvidia_fs()
    gdsio, gdsio_how = find_gdsio(options.get("gdsio"))
    return {
        "gpus": gpus(),
        "nvidia_fs": nvfs,
        "cufile": cufile_config(),
        "gdsio": {"path": gdsio, "how": gdsio_how},
        "gdscheck": cuda_tool("gdscheck"),
        "gds_stats": cuda_tool("gds_stats"),
        "kvikio": kvikio_probe(),
        "torch": torch_cuda(),
    }
