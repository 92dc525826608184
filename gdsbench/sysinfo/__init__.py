"""What a sweep ran on: host facts (host.py), the target's storage (storage.py) and GPU/GDS discovery (gpu.py).

`collect()` gathers them for every sweep's metadata sidecar and for `gdsbench doctor`, so results from
different machines are never confused. Facts only: cache control (drop_caches, evict) is a runner
condition and lives in gdsbench.runners.cache.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench.sysinfo.gpu import (
    NVFS_STATS,
    RW_STATS_REMEDY,
    cuda_tool,
    cufile_config,
    cufile_setting,
    find_gdsio,
    gpu_gds,
    gpus,
    kvikio_probe,
    nvfs_stats,
    parse_nvfs_stats,
    strip_json_comments,
)
from gdsbench.sysinfo.host import fio_engines, git_commit, host_name, machine, packages, tool_version
from gdsbench.sysinfo.storage import huge_pages, mount_of, odirect_works, parse_mounts, target
from gdsbench.sysinfo.topology import fingerprint


def collect(directory: Path, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Everything the sidecar records about where and with what a sweep ran (the same facts `doctor` shows)."""
    options = options or {}
    fio = str(options.get("fio") or "fio")
    gds = gpu_gds(options)
    return {
        "machine": machine(),
        "target": target(directory),
        "tools": {"fio": tool_version([fio, "--version"]), "fio_engines": sorted(fio_engines(fio))},
        "gpu_gds": gds,
        "packages": packages(),
        "gdsbench_commit": git_commit(),
        "topology": fingerprint(directory, Path(gds["cufile"]["path"]) if gds["cufile"]["exists"] else None),
    }


__all__ = [
    "NVFS_STATS",
    "RW_STATS_REMEDY",
    "collect",
    "cuda_tool",
    "cufile_config",
    "cufile_setting",
    "find_gdsio",
    "fingerprint",
    "fio_engines",
    "git_commit",
    "gpu_gds",
    "gpus",
    "host_name",
    "huge_pages",
    "kvikio_probe",
    "machine",
    "mount_of",
    "nvfs_stats",
    "odirect_works",
    "packages",
    "parse_mounts",
    "parse_nvfs_stats",
    "strip_json_comments",
    "target",
    "tool_version",
]
