"""The topology fingerprint: PCIe links (and links trained low), GPU-NVMe relations and limits from a sysfs
tree built by the test in sysfs's own layout and formats; this machine's real fingerprint; compare names
a changed field; doctor and the report warn of a degraded link."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gdsbench import compare, doctor, report, results
from gdsbench.sysinfo import topology

SAMPLE = sorted((Path(__file__).parents[1] / "results" / "sample").glob("*.csv"))[0]


def device(root: Path, path: str, **facts: str) -> None:
    """A PCI device at `path` under /sys/devices, linked from /sys/bus/pci/devices, with sysfs facts."""
    folder = root / "devices" / path
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in facts.items():
        (folder / name).write_text(value + "\n")
    link = root / "bus/pci/devices" / Path(path).name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(folder)


def link(speed: str, width: str, top: str | None = None, widest: str | None = None) -> dict[str, str]:
    """sysfs link files: '16.0 GT/s PCIe' speeds, lane counts."""
    return {
        "current_link_speed": f"{speed} GT/s PCIe",
        "max_link_speed": f"{top or speed} GT/s PCIe",
        "current_link_width": width,
        "max_link_width": widest or width,
    }


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """Two root ports: nvme0 (trained at 8 GT/s of 16) on one, a GPU on another; a switch with nvme1 and GPU 1."""
    root = tmp_path / "sys"
    device(root, "pci0000:00/0000:00:01.0", **link("16.0", "4"), numa_node="0")
    device(root, "pci0000:00/0000:00:01.0/0000:01:00.0", **link("8.0", "4", "16.0"), numa_node="0", vendor="0x144d")
    device(root, "pci0000:00/0000:00:02.0", **link("16.0", "16"), numa_node="0")
    device(
        root,
        "pci0000:00/0000:00:02.0/0000:02:00.0",
        **link("16.0", "16"),
        numa_node="0",
        vendor="0x10de",
        **{"class": "0x030200"},
    )
    switch = "pci0000:00/0000:00:03.0/0000:03:00.0"
    device(root, "pci0000:00/0000:00:03.0", **link("32.0", "16"), numa_node="0")
    device(root, switch, **link("32.0", "16"), numa_node="0")
    device(root, f"{switch}/0000:04:00.0", **link("32.0", "4"), numa_node="0")
    device(root, f"{switch}/0000:04:00.0/0000:05:00.0", **link("32.0", "4"), numa_node="0", vendor="0x144d")
    device(root, f"{switch}/0000:04:01.0", **link("32.0", "16"), numa_node="0")
    gpu1 = f"{switch}/0000:04:01.0/0000:06:00.0"
    device(root, gpu1, **link("32.0", "8", widest="16"), numa_node="0", vendor="0x10de", **{"class": "0x030200"})
    for name, address, model in (
        ("nvme0", "0000:01:00.0", "SAMSUNG MZQL23T8HCLS-00A07"),
        ("nvme1", "0000:05:00.0", "X"),
    ):
        controller = root / "class/nvme" / name
        controller.mkdir(parents=True)
        (controller / "model").write_text(model + "\n")
        (controller / "firmware_rev").write_text("GDC5302Q\n")
        (controller / "device").symlink_to(root / "bus/pci/devices" / address)
    return root


def test_links_relations_and_degraded_links(sysfs):
    nvmes, gpus = topology.nvme_controllers(sysfs), topology.nvidia_gpus(sysfs)
    assert [(n["name"], n["address"], n["model"]) for n in nvmes] == [
        ("nvme0", "0000:01:00.0", "SAMSUNG MZQL23T8HCLS-00A07"),
        ("nvme1", "0000:05:00.0", "X"),
    ]
    assert nvmes[0]["link"]["bytes_per_s"] == pytest.approx(8e9 * 128 / 130 / 8 * 4)
    assert nvmes[0]["link"]["degraded"] and not nvmes[1]["link"]["degraded"]
    assert [g["address"] for g in gpus] == ["0000:02:00.0", "0000:06:00.0"]
    pairs = {(p["gpu"], p["nvme"]): p for p in topology.gpu_nvme_pairs(gpus, nvmes)}
    assert pairs[("0000:02:00.0", "nvme0")]["relation"] == "PHB"
    assert pairs[("0000:06:00.0", "nvme1")]["relation"] == "PXB"  # through the switch, not the host bridge
    assert pairs[("0000:06:00.0", "nvme1")]["narrowest_bytes_per_s"] == pytest.approx(32e9 * 128 / 130 / 8 * 4)
    lines = topology.degraded([*nvmes, *gpus])
    assert lines == [
        "nvme0 (0000:01:00.0): PCIe link at 8.0 GT/s PCIe x4, maximum 16.0 GT/s PCIe x4",
        "gpu 1 (0000:06:00.0): PCIe link at 32.0 GT/s PCIe x8, maximum 32.0 GT/s PCIe x16",
    ]


def test_a_devices_limit_is_its_link_and_its_model(sysfs):
    nvme0 = topology.nvme_controllers(sysfs)[0]
    limit = topology.limit({"model": nvme0["model"], "pci": nvme0})
    assert limit["read_bytes"] == pytest.approx(8e9 * 128 / 130 / 8 * 4)  # the low link, below the 6.9 GB/s model
    assert limit["write_bytes"] == pytest.approx(8e9 * 128 / 130 / 8 * 4)
    assert "PCIe link 8.0 GT/s PCIe x4" in limit["why"] and "data sheet" in limit["why"]
    assert topology.limit({"model": "QEMU HARDDISK"})["read_bytes"] is None
    assert topology.lane_bytes("2.5 GT/s") == pytest.approx(250e6) and topology.lane_bytes("Unknown") is None


def test_this_machines_fingerprint(tmp_path):
    facts = topology.fingerprint(tmp_path)
    assert set(facts) >= {"kernel", "cpu", "block_device", "limit", "pcie", "degraded_links", "drivers"}
    assert facts["block_device"]["name"] and facts["block_device"]["scheduler"]
    assert facts["cpu"]["cpus"] >= 1 and facts["cpu"]["numa_nodes"]


def test_doctor_warns_of_a_link_below_its_maximum(sysfs):
    nvmes = topology.nvme_controllers(sysfs)
    facts = {"topology": {"degraded_links": topology.degraded(nvmes), "pcie": {"nvme": nvmes, "gpus": []}}}
    ok, why = doctor.CHECKS["PCIe links"](facts)
    assert not ok and "nvme0 (0000:01:00.0): PCIe link at 8.0 GT/s PCIe x4" in why
    assert doctor.CHECKS["PCIe links"]({"topology": {"degraded_links": [], "pcie": {"nvme": nvmes}}})[0]


def run_with(tmp_path: Path, name: str, change) -> Path:
    """A copy of the sample results with a sidecar whose fingerprint `change` edits."""
    path = tmp_path / f"{name}.csv"
    shutil.copy(SAMPLE, path)
    meta = results.read_sidecar(SAMPLE)
    facts = {"kernel": "6.1.0", "block_device": {"name": "nvme0n1", "firmware": "GDC5302Q"}, "degraded_links": []}
    meta["fingerprint"] = {"hosts": {meta["machine"]["host"]: facts}}
    change(meta)
    results.write_sidecar(path, meta)
    return path


def test_compare_names_the_changed_field_and_report_the_low_link(tmp_path):
    base = run_with(tmp_path, "base", lambda m: None)

    def newer(meta):
        facts = meta["fingerprint"]["hosts"].pop(meta["machine"]["host"])
        facts["block_device"]["firmware"] = "GDC7102Q"
        facts["degraded_links"] = ["nvme0 (0000:01:00.0): PCIe link at 8.0 GT/s PCIe x4, maximum 16.0 GT/s PCIe x4"]
        meta["machine"]["host"] = "other"  # another machine name: its fingerprint is still the one compared
        meta["fingerprint"]["hosts"]["other"] = facts

    new = run_with(tmp_path, "new", newer)
    result = compare.compare_files(base, new)
    assert "fingerprint of this machine differs: block_device.firmware: 'GDC5302Q' -> 'GDC7102Q'" in result.warnings
    assert "warning: fingerprint of this machine differs: block_device.firmware" in compare.render(result, "text")
    assert compare.compare_files(base, base).warnings == ()
    text = report.render(results.load([new]), None, "text")
    assert "host other: nvme0 (0000:01:00.0): PCIe link at 8.0 GT/s PCIe x4, maximum 16.0 GT/s PCIe x4" in text
    assert json.loads(results.sidecar_path(new).read_text())["fingerprint"]["hosts"]["other"]["kernel"] == "6.1.0"
