"""Facts about the host: name, kernel, OS, CPU, memory, Python packages, tool versions, the gdsbench commit.

Recorded in every sweep's sidecar so results from different machines are never confused.
"""

from __future__ import annotations

import functools
import getpass
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "safetensors", "kvikio-cu12", "kvikio-cu13", "kvikio", "deepspeed", "numpy", "pandas")


def host_name() -> str:
    """This machine's host name."""
    return socket.gethostname()


def machine() -> dict[str, Any]:
    """Host, kernel, CPU and memory."""
    import psutil

    return {
        "host": host_name(),
        "kernel": platform.release(),
        "os": _os_name(),
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
        "user": getpass.getuser(),
    }


def meminfo(key: str) -> int | None:
    """A /proc/meminfo figure in bytes (MemTotal, MemAvailable, ...); None where the kernel does not say it."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        name, _, value = line.partition(":")
        if name == key and value.split() and value.split()[0].isdigit():
            return int(value.split()[0]) * (1024 if value.strip().endswith("kB") else 1)
    return None


def read_fact(path: Path) -> str | None:
    """A /proc or /sys file's text, stripped, or None when it cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _field(path: Path, prefix: str, separator: str) -> str | None:
    """The value of the first line of `path` starting with `prefix` (`name<separator>value`), or None."""
    for line in (read_fact(path) or "").splitlines():
        if line.startswith(prefix):
            return line.split(separator, 1)[1].strip()
    return None


def _os_name() -> str:
    """PRETTY_NAME from /etc/os-release, else the platform string."""
    name = _field(Path("/etc/os-release"), "PRETTY_NAME=", "=")
    return name.strip('"') if name else platform.platform()


def _cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo."""
    return _field(Path("/proc/cpuinfo"), "model name", ":") or platform.processor() or "unknown"


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


@functools.lru_cache(maxsize=8)
def fio_engines(binary: str = "fio") -> frozenset[str]:
    """The ioengines this fio build lists in `fio --enghelp` (libcufile only where built with it)."""
    try:
        proc = subprocess.run([binary, "--enghelp"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    names = [line.strip() for line in proc.stdout.splitlines()[1:]]
    return frozenset(name for name in names if name)


def version(package: str) -> str | None:
    """An installed distribution's version (not imported), or None."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def packages() -> dict[str, str | None]:
    """Installed versions of the Python packages the checkpoint engines use (not imported)."""
    return {name: version(name) for name in PACKAGES}


def git_commit() -> str | None:
    """The commit of the gdsbench checkout this code runs from, with '-dirty' when it has changes."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or shutil.which("git") is None:
        return None
    try:
        commit = _git(root, "rev-parse", "HEAD")
        dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.TimeoutExpired):
        return None
    if commit.returncode != 0:
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    """One git command in the checkout at `root`, output captured."""
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
