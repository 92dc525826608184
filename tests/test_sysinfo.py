"""sysinfo's storage facts: /proc/self/mounts parsed from real recorded text (octal escapes included),
the longest mount point wins, block device facts equal sysfs, and the sidecar's commit and host facts."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gdsbench import sysinfo
from gdsbench.sysinfo import host, storage
from gdsbench.sysinfo.storage import Mount, mount_of, parse_mounts, unescape

from .conftest import DATA

#: Recorded by tests/data/proc/record-mounts.sh: tmpfs mounts whose points hold a space, a tab, a newline
#: and a backslash, one nested mount, one mount stacked on another.
RECORDED = (DATA / "proc" / "mounts-escapes.txt").read_text()
ROOT = "/tmp/gdsbench-mounts"


@pytest.mark.parametrize(
    "field, plain",
    [
        (r"with\040space", "with space"),
        (r"tab\011here", "tab\there"),
        (r"new\012line", "new\nline"),
        (r"back\134slash", "back\\slash"),
        (r"\134040", "\\040"),  # an escaped backslash followed by digits is not a second escape
        ("plain", "plain"),
    ],
)
def test_unescape_decodes_the_kernels_octal_escapes(field: str, plain: str) -> None:
    assert unescape(field) == plain


def test_recorded_mounts_parse_with_every_escape() -> None:
    ours = [m for m in parse_mounts(RECORDED) if m.point.startswith(ROOT)]
    assert ours == [
        Mount("gdsbench-outer", ROOT, "tmpfs"),
        Mount("gdsbench probe", f"{ROOT}/with space", "tmpfs"),
        Mount("gdsbench probe", f"{ROOT}/tab\there", "tmpfs"),
        Mount("gdsbench probe", f"{ROOT}/back\\slash", "tmpfs"),
        Mount("gdsbench probe", f"{ROOT}/new\nline", "tmpfs"),
        Mount("gdsbench-inner", f"{ROOT}/with space/inner", "tmpfs"),
        Mount("gdsbench-over", f"{ROOT}/back\\slash", "tmpfs"),
    ]
    assert Mount("/dev/vda", "/", "ext4") in parse_mounts(RECORDED)


@pytest.mark.parametrize(
    "path, point, device",
    [
        (f"{ROOT}/with space/file", f"{ROOT}/with space", "gdsbench probe"),
        (f"{ROOT}/with space/inner/deeper/file", f"{ROOT}/with space/inner", "gdsbench-inner"),
        (f"{ROOT}/with space", f"{ROOT}/with space", "gdsbench probe"),
        (f"{ROOT}/with spacex/file", ROOT, "gdsbench-outer"),  # a longer name is not a parent
        (f"{ROOT}/tab\there/f", f"{ROOT}/tab\there", "gdsbench probe"),
        (f"{ROOT}/new\nline/f", f"{ROOT}/new\nline", "gdsbench probe"),
        (f"{ROOT}/back\\slash/f", f"{ROOT}/back\\slash", "gdsbench-over"),  # the last one stacked wins
        ("/var/lib/somewhere", "/", "/dev/vda"),
    ],
)
def test_mount_of_picks_the_longest_mount_point(path: str, point: str, device: str) -> None:
    assert mount_of(Path(path), parse_mounts(RECORDED)) == {
        "mount_point": point,
        "device": device,
        "fstype": "tmpfs",
    } | ({"fstype": "ext4"} if point == "/" else {})


def test_mount_of_nothing_matching_is_empty() -> None:
    assert mount_of(Path("/anywhere"), [Mount("tmpfs", "/elsewhere", "tmpfs")]) == {}


@pytest.mark.needs_root
def test_mount_of_a_live_mount_point_with_a_space(tmp_path: Path) -> None:
    """A real tmpfs mounted at a path with a space and a tab: the live /proc/self/mounts names it."""
    point = tmp_path / "a b\tc"
    point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "gdsbench test", str(point)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount here: {mounted.stderr.decode().strip()}")
    try:
        assert mount_of(point / "file") == {"mount_point": str(point), "device": "gdsbench test", "fstype": "tmpfs"}
    finally:
        subprocess.run(["umount", str(point)], check=True)


def test_block_device_of_the_root_filesystem_matches_sysfs() -> None:
    device = mount_of(Path("/")).get("device", "")
    name = Path(device).name
    if not (Path("/sys/class/block") / name).exists():
        pytest.skip(f"/ is on {device!r}, not a block device")
    facts = storage.block_device(device)
    sectors = int((Path("/sys/class/block") / name / "size").read_text())
    assert facts["name"] == name and facts["size_bytes"] == sectors * 512
    assert (
        facts["logical_block_size"]
        == (Path("/sys/class/block") / name / "queue/logical_block_size").read_text().strip()
    )


def test_block_device_of_something_that_is_not_one_is_empty() -> None:
    assert storage.block_device("tmpfs") == {} and storage.block_device("") == {}


def test_odirect_probe_leaves_no_file(tmp_path: Path) -> None:
    works, why = storage.odirect_works(tmp_path)
    assert (works, why == "ok") in ((True, True), (False, False))
    assert list(tmp_path.iterdir()) == []


def test_git_commit_names_this_checkout() -> None:
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert host.git_commit().removesuffix("-dirty") == head


def test_collect_holds_every_section(tmp_path: Path) -> None:
    facts = sysinfo.collect(tmp_path)
    assert set(facts) == {"machine", "target", "tools", "gpu_gds", "packages", "gdsbench_commit", "topology"}
    assert facts["topology"]["block_device"]["name"] == facts["target"]["block_device"]["name"]
    assert facts["machine"]["cpu_count"] == os.cpu_count() and facts["machine"]["cpu_model"] != ""
    assert facts["machine"]["usable_cpus"] == len(os.sched_getaffinity(0))
    assert facts["target"]["directory"] == str(tmp_path) and facts["target"]["mount_point"]


def test_a_cpu_build_of_torch_is_read_without_importing_it_and_agrees_with_torch() -> None:
    from gdsbench.sysinfo import gpu

    probed = subprocess.run([sys.executable, "-c", gpu._TORCH_PROBE], capture_output=True, text=True, check=True)
    assert gpu.torch_cuda() == json.loads(probed.stdout)
    assert (
        "torch" not in sys.modules
        or gpu.torch_build(importlib.util.find_spec("torch"))["__version__"] == sys.modules["torch"].__version__
    )


@pytest.mark.parametrize(
    "build", ["cuda: Optional[str] = '12.8'\nhip = None", "cuda = None\nhip = '6.2.4'", "cuda = x"]
)
def test_a_gpu_or_unreadable_build_of_torch_is_asked_in_a_child(
    build: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU build (CUDA or ROCm) or a version.py that is not plain constants: torch itself is asked. The child is
    a test double here (no GPU build of torch on this machine): it answers as a CUDA build with no device would."""
    from gdsbench.sysinfo import gpu

    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    (tmp_path / "torch" / "version.py").write_text(f"from typing import Optional\n__version__ = '2.13.0'\n{build}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    asked: list[list[str]] = []

    def child(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        asked.append(argv)
        answer = '{"version": "2.13.0", "cuda_build": "12.8", "cuda_available": false, "devices": 0}\n'
        return subprocess.CompletedProcess(argv, 0, answer, "")

    monkeypatch.setattr(gpu.subprocess, "run", child)
    assert gpu.torch_cuda()["cuda_build"] == "12.8" and asked == [[sys.executable, "-c", gpu._TORCH_PROBE]]
