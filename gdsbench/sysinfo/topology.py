"""The topology fingerprint of a host: what decides its storage figures, so two runs can be told apart.

Per host: the block device behind the target directory (model, firmware, scheduler, queue depth,
rotational, NUMA node, PCI address), the PCIe devices that matter (NVMe controllers and NVIDIA GPUs)
with their link speed and width against the maximum, the PCIe relation of every GPU-NVMe pair and the
narrowest link between them, the CPU/NUMA layout, the kernel, driver versions, and the SHA-256 of
cufile.json where there is one. All from sysfs and /proc (a `root` argument lets tests read a tree of
their own). `limit` is the physical bound of the target device (PCIe link x width, the NVMe model's
data-sheet figures), which the `above_link` guard rail compares bandwidth with.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
from pathlib import Path
from typing import Any

from gdsbench.sysinfo.host import read_fact
from gdsbench.sysinfo.storage import block_device, mount_of

SYS = Path("/sys")
NVIDIA = "0x10de"
#: Bytes per second per lane at a PCIe transfer rate (GT/s): 8b/10b coding up to 5 GT/s, 128b/130b
#: for 8-32 GT/s, FLIT mode (242/256) at 64 GT/s.
LANE_CODING = {2.5: 0.8, 5.0: 0.8, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130, 64.0: 242 / 256}
#: NVMe models' sequential limits (bytes/s, read and write; the fastest capacity of the family, from
#: the vendors' data sheets), matched by a part of the model string sysfs reports. Extend as needed.
NVME_MODELS: dict[str, tuple[float, float]] = {
    "MZWLO": (13.0e9, 6.6e9),  # Samsung PM1743 (PCIe 5.0)
    "MZQL2": (6.9e9, 4.1e9),  # Samsung PM9A3
    "MZWLJ": (7.0e9, 3.8e9),  # Samsung PM1733
    "Micron_7450": (6.8e9, 5.3e9),
    "Micron_9400": (7.0e9, 7.0e9),
    "SSDPF2KX": (7.0e9, 4.2e9),  # Intel / Solidigm D7-P5510
}


def lane_bytes(speed: str | None) -> float | None:
    """Bytes/s one lane carries at a sysfs link speed ('16.0 GT/s PCIe', '8 GT/s'), None when unknown."""
    match = re.match(r"\s*([\d.]+)\s*GT/s", speed or "")
    if not match:
        return None
    rate = float(match.group(1))
    return rate * 1e9 * LANE_CODING.get(rate, 128 / 130) / 8


def link(device: Path) -> dict[str, Any] | None:
    """A PCI device's link: current and maximum speed and width, its bandwidth, and whether it trained low."""
    speed, top = read_fact(device / "current_link_speed"), read_fact(device / "max_link_speed")
    width, widest = read_fact(device / "current_link_width"), read_fact(device / "max_link_width")
    if speed is None or lane_bytes(speed) is None:
        return None
    lanes = int(width) if width and width.isdigit() else None
    max_lanes = int(widest) if widest and widest.isdigit() else None
    rate = lane_bytes(speed)
    return {
        "speed": speed,
        "width": lanes,
        "max_speed": top,
        "max_width": max_lanes,
        "bytes_per_s": rate * lanes if rate and lanes else None,
        "degraded": bool((lane_bytes(top) or 0) > (rate or 0) or (max_lanes or 0) > (lanes or 0)),
    }


def pci_path(bdf: str, root: Path = SYS) -> list[str]:
    """The PCI addresses from the root port down to a device (`0000:00:01.0`, `0000:01:00.0`, ...)."""
    real = (root / "bus/pci/devices" / bdf).resolve()
    return [part for part in real.parts if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", part)]


def pci_device(bdf: str, root: Path = SYS) -> dict[str, Any]:
    """One PCI device: NUMA node, its link, the path to it, and each bridge's link on the way."""
    base = root / "bus/pci/devices" / bdf
    numa = read_fact(base / "numa_node")
    path = pci_path(bdf, root)
    return {
        "address": bdf,
        "numa_node": int(numa) if numa and numa.lstrip("-").isdigit() and int(numa) >= 0 else None,
        "link": link(base),
        "path": path,
        "path_links": {hop: link(root / "bus/pci/devices" / hop) for hop in path[:-1]},
    }


def nvme_controllers(root: Path = SYS) -> list[dict[str, Any]]:
    """Every NVMe controller: name, model, firmware and its PCI device facts."""
    found = []
    for controller in sorted((root / "class/nvme").glob("nvme*")):
        address = (controller / "device").resolve().name
        found.append(
            {
                "name": controller.name,
                "model": read_fact(controller / "model"),
                "firmware": read_fact(controller / "firmware_rev"),
                **(pci_device(address, root) if re.match(r"[0-9a-f]{4}:", address) else {}),
            }
        )
    return found


def nvidia_gpus(root: Path = SYS) -> list[dict[str, Any]]:
    """Every NVIDIA display/3D controller on the PCI bus, with its PCI device facts."""
    found: list[dict[str, Any]] = []
    for device in sorted((root / "bus/pci/devices").glob("*")):
        vendor, kind = read_fact(device / "vendor"), read_fact(device / "class") or ""
        if vendor == NVIDIA and kind.startswith("0x03"):
            found.append({"name": f"gpu {len(found)}", **pci_device(device.name, root)})
    return found


def relation(a: dict[str, Any], b: dict[str, Any]) -> str:
    """How two PCI devices reach each other, in nvidia-smi topo's words: PIX/PXB (through PCIe switches,
    no host bridge), PHB (one host bridge), NODE (one NUMA node), SYS (across the CPU interconnect)."""
    shared = [hop for hop, other in zip(a.get("path", []), b.get("path", [])) if hop == other]
    if shared and shared[-1] not in (a.get("address"), b.get("address")):
        return "PIX" if len(shared) == 1 else "PXB"
    if a.get("path") and b.get("path") and a["path"][0][:7] == b["path"][0][:7]:
        return "PHB"
    if a.get("numa_node") is not None and a.get("numa_node") == b.get("numa_node"):
        return "NODE"
    return "SYS"


def narrowest(*devices: dict[str, Any]) -> float | None:
    """The smallest link bandwidth on the way to each device (its own link and its bridges')."""
    links = [d.get("link") for d in devices] + [x for d in devices for x in d.get("path_links", {}).values()]
    rates = [x["bytes_per_s"] for x in links if x and x.get("bytes_per_s")]
    return min(rates) if rates else None


def gpu_nvme_pairs(gpus: list[dict[str, Any]], nvmes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every GPU-NVMe pair: their relation and the narrowest link between them."""
    return [
        {"gpu": g["address"], "nvme": n["name"], "relation": relation(g, n), "narrowest_bytes_per_s": narrowest(g, n)}
        for g in gpus
        for n in nvmes
        if g.get("path") and n.get("path")
    ]


def degraded(devices: list[dict[str, Any]]) -> list[str]:
    """A line for each link (a device's or a bridge's on its way) that trained below its maximum."""
    lines = []
    for device in devices:
        hops = {**device.get("path_links", {}), device.get("address", "?"): device.get("link")}
        for hop, facts in hops.items():
            if facts and facts["degraded"]:
                lines.append(
                    f"{device.get('name', hop)} ({hop}): PCIe link at {facts['speed']} x{facts['width']}, "
                    f"maximum {facts['max_speed']} x{facts['max_width']}"
                )
    return list(dict.fromkeys(lines))


def cpu_layout(root: Path = SYS) -> dict[str, Any]:
    """Sockets, logical CPUs and each NUMA node's CPU list."""
    cpus = root / "devices/system/cpu"
    packages = {read_fact(p) for p in cpus.glob("cpu[0-9]*/topology/physical_package_id")}
    nodes = {n.name[4:]: read_fact(n / "cpulist") for n in sorted((root / "devices/system/node").glob("node[0-9]*"))}
    return {"sockets": len(packages - {None}) or None, "cpus": os.cpu_count(), "numa_nodes": nodes}


def drivers(root: Path = SYS) -> dict[str, str | None]:
    """Versions of the kernel modules on the storage and GPU paths (None where not loaded)."""
    return {name: read_fact(root / "module" / name / "version") for name in ("nvidia", "nvidia_fs", "nvme")}


def file_sha256(path: Path) -> str | None:
    """The SHA-256 of a file's bytes, or None when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def target_device(directory: Path, root: Path = SYS) -> dict[str, Any]:
    """The block device behind a directory: queue facts, firmware, NUMA node and PCI device."""
    facts = block_device(mount_of(directory).get("device", ""))
    if not facts:
        return {}
    base = root / "class/block" / facts["name"]
    disk = base if (base / "device").exists() else base.resolve().parent
    facts["firmware"] = read_fact(disk / "device/firmware_rev") or read_fact(disk / "device/rev")
    facts["queue_depth"] = read_fact(disk / "device/queue_depth") or facts.get("nr_requests")
    address = next((p for p in reversed(pci_path_of(disk)) if p), None)
    facts["pci"] = pci_device(address, root) if address else None
    facts["numa_node"] = facts["pci"]["numa_node"] if facts["pci"] else None
    return facts


def pci_path_of(device: Path) -> list[str]:
    """The PCI addresses in a sysfs device's real path (its controller last)."""
    return [p for p in device.resolve().parts if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", p)]


def limit(device: dict[str, Any]) -> dict[str, Any]:
    """The target device's physical bound per direction: its PCIe link, and its NVMe model's figures."""
    bounds: list[tuple[float, float, str]] = []
    pci = device.get("pci") or {}
    rate = (pci.get("link") or {}).get("bytes_per_s")
    if rate:
        link_facts = pci["link"]
        bounds.append((rate, rate, f"PCIe link {link_facts['speed']} x{link_facts['width']}"))
    model = device.get("model") or ""
    for part, (read, write) in NVME_MODELS.items():
        if part in model:
            bounds.append((read, write, f"NVMe model {model.strip()} data sheet"))
    if not bounds:
        return {"read_bytes": None, "write_bytes": None, "why": "unknown (no PCIe link or known model)"}
    return {
        "read_bytes": min(b[0] for b in bounds),
        "write_bytes": min(b[1] for b in bounds),
        "why": "; ".join(b[2] for b in bounds),
    }


def fingerprint(directory: Path, cufile: Path | None = None, root: Path = SYS) -> dict[str, Any]:
    """This host's topology fingerprint (see the module doc)."""
    device = target_device(directory, root)
    gpus, nvmes = nvidia_gpus(root), nvme_controllers(root)
    return {
        "kernel": platform.release(),
        "kernel_build": platform.version(),
        "cpu": cpu_layout(root),
        "block_device": device,
        "limit": limit(device),
        "pcie": {"nvme": nvmes, "gpus": gpus, "pairs": gpu_nvme_pairs(gpus, nvmes)},
        "degraded_links": degraded([*nvmes, *gpus, *([device["pci"]] if device.get("pci") else [])]),
        "drivers": drivers(root),
        "cufile_sha256": file_sha256(cufile) if cufile is not None and gpus else None,
    }
