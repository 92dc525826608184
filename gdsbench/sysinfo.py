"""Facts about the machine and the target directory, and capability probes (O_DIRECT, root, caches).

Recorded in every sweep's metadata sidecar so results from different machines are never confused.
"""

from __future__ import annotations

import errno
import functools
import getpass
import glob
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "safetensors", "kvikio-cu12", "kvikio-cu13", "kvikio", "deepspeed", "numpy", "pandas")


def host() -> str:
    """This machine's host name."""
    return socket.gethostname()


def machine() -> dict[str, Any]:
    """Host, kernel, CPU and memory."""
    import psutil

    return {
        "host": host(),
        "kernel": platform.release(),
        "os": _os_name(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "user": getpass.getuser(),
    }


def _os_name() -> str:
    """PRETTY_NAME from /etc/os-release, else the platform string."""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def _cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mount_of(path: Path) -> dict[str, str]:
    """The mount holding `path`: mount point, device and filesystem type (from /proc/self/mounts)."""
    path = Path(path).resolve()
    best: dict[str, str] = {}
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return best
    for line in lines:
        device, point, fstype = line.split()[:3]
        point = point.replace("\\040", " ")
        if (path == Path(point) or Path(point) in path.parents) and len(point) >= len(best.get("mount_point", "")):
            best = {"mount_point": point, "device": device, "fstype": fstype}
    return best


def block_device(device: str) -> dict[str, Any]:
    """Queue facts of the block device behind a mount (model, rotational, scheduler, max segments)."""
    name = Path(device).name
    base = Path("/sys/class/block") / name
    if not base.exists():
        return {}
    queue = base / "queue" if (base / "queue").exists() else base.resolve().parent / "queue"
    facts: dict[str, Any] = {"name": name}
    for fact in ("rotational", "scheduler", "max_segments", "max_sectors_kb", "logical_block_size", "nr_requests"):
        facts[fact] = _read(queue / fact)
    facts["model"] = _read(base / "device" / "model") or _read(base.resolve().parent / "device" / "model")
    facts["size_bytes"] = int(_read(base / "size") or 0) * 512
    facts["members"] = raid_members(name)
    return facts


def raid_members(name: str) -> list[dict[str, str | None]]:
    """The devices under a software RAID (md) or device-mapper volume, with their models (from sysfs)."""
    slaves = Path("/sys/block") / name / "slaves"
    if not slaves.is_dir():
        return []
    members = []
    for slave in sorted(slaves.iterdir()):
        device = Path("/sys/class/block") / slave.name
        model = _read(device / "device" / "model") or _read(device.resolve().parent / "device" / "model")
        members.append({"name": slave.name, "model": model})
    return members


def _read(path: Path) -> str | None:
    """A sysfs file's text, stripped, or None."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def odirect_works(directory: Path) -> tuple[bool, str]:
    """Whether O_DIRECT opens work in `directory`, and why not when they do not."""
    if not hasattr(os, "O_DIRECT"):
        return False, "this OS has no O_DIRECT"
    try:
        fd, name = tempfile.mkstemp(prefix=".gdsbench-probe-", dir=directory)
        os.close(fd)
    except OSError as exc:
        return False, f"cannot create a file in {directory}: {exc.strerror}"
    try:
        fd = os.open(name, os.O_RDWR | os.O_DIRECT)
        os.close(fd)
        return True, "ok"
    except OSError as exc:
        reason = "the filesystem refuses O_DIRECT" if exc.errno == errno.EINVAL else str(exc.strerror)
        return False, reason
    finally:
        os.unlink(name)


def target(directory: Path) -> dict[str, Any]:
    """Filesystem, block device and O_DIRECT support of the directory the test files go to."""
    mount = mount_of(directory)
    usage = shutil.disk_usage(directory) if Path(directory).exists() else None
    works, why = odirect_works(directory) if Path(directory).is_dir() else (False, "no such directory")
    return {
        "directory": str(directory),
        **mount,
        "free_bytes": usage.free if usage else None,
        "odirect": works,
        "odirect_reason": why,
        "block_device": block_device(mount.get("device", "")),
    }


def tool_version(argv: list[str]) -> str | None:
    """First line a tool prints for its version flag, or None when it is absent."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0] if lines else None


def packages() -> dict[str, str | None]:
    """Installed versions of the Python packages the checkpoint engines use (not imported)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit() -> str | None:
    """The commit of the gdsbench checkout this code runs from, with '-dirty' when it has changes."""
    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def huge_pages() -> tuple[int, int]:
    """(free reserved huge pages, huge page size in bytes) from /proc/meminfo; (0, 0) when unknown."""
    facts = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, value = line.partition(":")
            facts[name] = int(value.split()[0]) if value.split() else 0
    except (OSError, ValueError):
        return 0, 0
    return facts.get("HugePages_Free", 0), facts.get("Hugepagesize", 0) * 1024


def is_root() -> bool:
    """True when running as root (drop_caches needs it)."""
    return os.geteuid() == 0


def drop_caches() -> bool:
    """Write back dirty pages and drop the whole page cache (root only); True when it worked."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def evict(path: Path) -> None:
    """Drop one file's cached pages (posix_fadvise DONTNEED), the unprivileged way to read it cold."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


GDS_TOOLS_HELP = (
    "NVIDIA's GDS tools package (gds-tools-<cuda version>, pulled in by nvidia-gds) installs "
    "gdsio and gdscheck under /usr/local/cuda/gds/tools"
)
NVFS_STATS = Path("/proc/driver/nvidia-fs/stats")
CUFILE_KEYS = (
    "allow_compat_mode",
    "use_compat_mode",
    "force_compat_mode",
    "use_pci_p2pdma",
    "max_direct_io_size_kb",
    "max_device_cache_size_kb",
    "max_device_pinned_mem_size_kb",
    "use_poll_mode",
    "poll_mode_max_size_kb",
    "max_batch_io_size",
)


@functools.lru_cache(maxsize=8)
def fio_engines(binary: str = "fio") -> frozenset[str]:
    """The ioengines this fio build lists in `fio --enghelp` (libcufile only where built with it)."""
    try:
        proc = subprocess.run([binary, "--enghelp"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    names = [line.strip() for line in proc.stdout.splitlines()[1:]]
    return frozenset(name for name in names if name)


def _version_key(path: str) -> tuple[int, ...]:
    """Sort key for /usr/local/cuda-X.Y/...: the CUDA version the (resolved) folder names."""
    parts = Path(path).resolve().parts
    folder = next((p for p in parts if p.startswith("cuda")), "")
    return tuple(int(n) for n in re.findall(r"\d+", folder))


def cuda_tool(name: str) -> str | None:
    """A GDS tool (gdsio, gdscheck) on PATH, else under /usr/local/cuda*/gds/tools, newest CUDA first."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [p for p in glob.glob(f"/usr/local/cuda*/gds/tools/{name}") if os.access(p, os.X_OK)]
    return max(candidates, key=_version_key) if candidates else None


def find_gdsio(explicit: str | None = None) -> tuple[str | None, str]:
    """Where gdsio is: the path given (--gdsio or the config's `gdsio`), $GDSIO, PATH, /usr/local/cuda*.

    Returns (path, how it was found) or (None, why not and where gdsio comes from).
    """
    for given, source in ((explicit, "the gdsio option"), (os.environ.get("GDSIO"), "$GDSIO")):
        if given:
            path = shutil.which(given) or (given if os.access(given, os.X_OK) and Path(given).is_file() else None)
            return (path, source) if path else (None, f"gdsio not found at {given} (from {source})")
    path = cuda_tool("gdsio")
    if path:
        return path, "PATH" if shutil.which("gdsio") else "/usr/local/cuda*/gds/tools"
    return None, f"gdsio not found (--gdsio, $GDSIO, PATH, /usr/local/cuda*/gds/tools); {GDS_TOOLS_HELP}"


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
            name = pynvml.nvmlDeviceGetName(handle)
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            found.append(
                _gpu(
                    index,
                    name if isinstance(name, str) else name.decode(),
                    bus if isinstance(bus, str) else bus.decode(),
                    pynvml.nvmlDeviceGetMemoryInfo(handle).total,
                )
            )
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
    numa = _read(Path("/sys/bus/pci/devices") / bdf / "numa_node")
    return {
        "index": index,
        "name": name,
        "pci_bus_id": bdf,
        "memory_bytes": memory_bytes,
        "numa_node": int(numa) if numa not in (None, "") else None,
    }


def parse_nvfs_stats(text: str) -> dict[str, int]:
    """Read/write counters from /proc/driver/nvidia-fs/stats: calls (n) and MiB moved through nvidia-fs."""
    counters: dict[str, int] = {}
    for kind, mib in (("Reads", "readMiB"), ("Writes", "writeMiB")):
        match = re.search(rf"^\s*{kind}\s*:\s*n=(\d+).*?\b{mib}=(\d+)", text, re.MULTILINE)
        if match:
            counters[f"{kind.lower()}"] = int(match.group(1))
            counters[f"{kind.lower()}_mib"] = int(match.group(2))
    return counters


def nvfs_stats() -> dict[str, int] | None:
    """nvidia-fs read/write counters now, or None when the stats file cannot be read."""
    try:
        return parse_nvfs_stats(NVFS_STATS.read_text())
    except OSError:
        return None


def nvidia_fs() -> dict[str, Any]:
    """The nvidia-fs kernel module (GDS's driver): loaded or not, its version and counters."""
    loaded = Path("/sys/module/nvidia_fs").exists() or NVFS_STATS.parent.exists()
    return {"loaded": loaded, "version": _read(Path("/sys/module/nvidia_fs/version")), "stats": nvfs_stats()}


def strip_json_comments(text: str) -> str:
    """cufile.json allows // and /* */ comments; drop them, leaving strings (paths, URLs) alone."""
    pattern = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.DOTALL)
    return pattern.sub(lambda m: m.group(1) or "", text)


def cufile_config() -> dict[str, Any]:
    """Where cufile.json is ($CUFILE_ENV_PATH_JSON, else /etc/cufile.json) and the settings that matter."""
    path = Path(os.environ.get("CUFILE_ENV_PATH_JSON") or "/etc/cufile.json")
    facts: dict[str, Any] = {"path": str(path), "exists": path.is_file()}
    if not facts["exists"]:
        return facts
    try:
        document = json.loads(strip_json_comments(path.read_text()))
    except (OSError, ValueError) as exc:
        return {**facts, "error": f"cannot read {path}: {exc}"}
    properties = document.get("properties", {}) if isinstance(document, dict) else {}
    facts["properties"] = {key: properties[key] for key in CUFILE_KEYS if key in properties}
    facts["logging_level"] = (document.get("logging") or {}).get("level") if isinstance(document, dict) else None
    return facts


def kvikio_mode(nvfs_loaded: bool) -> dict[str, Any]:
    """kvikio's version and whether it would run in compat (POSIX) mode here, from KVIKIO_COMPAT_MODE and nvidia-fs."""
    versions = {name: v for name in ("kvikio-cu13", "kvikio-cu12", "kvikio") if (v := _version(name))}
    setting = os.environ.get("KVIKIO_COMPAT_MODE", "AUTO").strip().upper()
    if setting in ("ON", "TRUE", "YES", "1"):
        compat, why = True, "KVIKIO_COMPAT_MODE=ON"
    elif setting in ("OFF", "FALSE", "NO", "0"):
        compat, why = False, "KVIKIO_COMPAT_MODE=OFF (cuFile errors out where GDS is unavailable)"
    elif nvfs_loaded:
        compat, why = False, "AUTO and the nvidia-fs module is loaded"
    else:
        compat, why = True, "AUTO and no nvidia-fs module (unless cuFile's P2PDMA mode applies)"
    return {"versions": versions, "installed": bool(versions), "compat_mode": compat, "why": why}


def _version(package: str) -> str | None:
    """An installed distribution's version, or None."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


_TORCH_PROBE = (
    "import json, torch; c = torch.cuda.is_available(); "
    "print(json.dumps({'version': torch.__version__, 'cuda_build': torch.version.cuda, "
    "'cuda_available': c, 'devices': torch.cuda.device_count() if c else 0}))"
)


def torch_cuda() -> dict[str, Any]:
    """torch's version, the CUDA it was built for and whether it sees a GPU (probed in a child process,
    so a fio-only sweep never imports torch)."""
    if importlib.util.find_spec("torch") is None:
        return {"version": None, "reason": "torch is not installed"}
    try:
        proc = subprocess.run([sys.executable, "-c", _TORCH_PROBE], capture_output=True, text=True, timeout=120)
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return {"version": _version("torch"), "reason": "importing torch failed"}


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
        "kvikio": kvikio_mode(nvfs["loaded"]),
        "torch": torch_cuda(),
    }


def collect(directory: Path, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything the sidecar records about where and with what a sweep ran (the same facts `doctor` shows)."""
    options = options or {}
    fio = str(options.get("fio") or "fio")
    return {
        "machine": machine(),
        "target": target(directory),
        "tools": {"fio": tool_version([fio, "--version"]), "fio_engines": sorted(fio_engines(fio))},
        "gpu_gds": gpu_gds(options),
        "packages": packages(),
        "gdsbench_commit": git_commit(),
    }
