"""ckptio installs and works alone: pip installs lib/ckptio into a clean venv that holds torch (and what torch
needs) and nothing else, then a save, a verified load and a DCP save/load run there, with none of the
benchmark's packages importable.

torch is linked into the venv from this one rather than installed again (a 700 MB wheel, 45 s here): its
files are the ones pip installed, with their metadata, so pip sees the requirement met and installs the
rest of ckptio's dependencies (xxhash, crc32c) itself.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = [pytest.mark.needs_torch, pytest.mark.slow]

LIBRARY = Path(__file__).parent.parent / "lib" / "ckptio"
BENCHMARK_ONLY = ("gdsbench", "pandas", "matplotlib", "seaborn", "click", "rich", "yaml", "zstandard", "blosc2")

PROGRAM = """
import importlib.util, sys
import torch, torch.distributed.checkpoint as dcp
import ckptio
from ckptio.errors import CorruptCheckpoint

present = [name for name in sys.argv[2].split(",") if importlib.util.find_spec(name) is not None]
assert not present, f"importable in the clean venv: {present}"
folder = sys.argv[1]
state = {"w": torch.arange(1 << 20, dtype=torch.float32), "step": 3}
ckptio.save(state, folder + "/one.pt")
back = ckptio.load(folder + "/one.pt")
assert torch.equal(back["w"], state["w"]) and back["step"] == 3
dcp.save({"w": state["w"]}, storage_writer=ckptio.Writer(folder + "/dcp"), no_dist=True)
target = {"w": torch.zeros(1 << 20)}
dcp.load(target, storage_reader=ckptio.Reader(folder + "/dcp"), no_dist=True)
assert torch.equal(target["w"], state["w"])
print("ok", ckptio.__file__)
"""


def requirement_closure(name: str) -> list[importlib.metadata.Distribution]:
    """A distribution and everything it requires on this platform, as installed here."""
    seen: dict[str, importlib.metadata.Distribution] = {}
    todo = [name]
    while todo:
        dist = importlib.metadata.distribution(todo.pop())
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen[key] = dist
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            wanted = re.match(r"[A-Za-z0-9_.-]+", requirement)
            marker = requirement.split(";", 1)[1] if ";" in requirement else ""
            if wanted and not ("platform_system" in marker and "Linux" not in marker):
                try:
                    importlib.metadata.distribution(wanted.group())
                except importlib.metadata.PackageNotFoundError:
                    continue  # a requirement this platform's marker skips
                todo.append(wanted.group())
    return list(seen.values())


def link_distribution(dist: importlib.metadata.Distribution, site: Path) -> None:
    """Make an installed distribution's files (packages and metadata) appear in another site-packages."""
    root = Path(str(dist.locate_file("")))
    for top in {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}:
        if (root / top).exists() and not (site / top).exists():
            (site / top).symlink_to(root / top)


def test_ckptio_installs_alone_and_round_trips_a_dcp_save(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    assert site != Path(sysconfig.get_paths()["purelib"])
    for dist in requirement_closure("torch"):
        link_distribution(dist, site)
    source = tmp_path / "ckptio-src"  # pip builds in the source folder: a copy keeps the checkout clean
    shutil.copytree(LIBRARY, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(source)]
    done = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.lower()
    assert "ckptio==" in listed and "xxhash==" in listed and "crc32c==" in listed
    assert not any(f"{name}==" in listed for name in ("gdsbench", "pandas", "click", "rich", "matplotlib"))
    data = tmp_path / "data"
    data.mkdir()
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}  # nothing of this tree
    ran = subprocess.run(
        [str(python), "-c", PROGRAM, str(data), ",".join(BENCHMARK_ONLY)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=clean,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.startswith("ok ") and str(site) in ran.stdout, "the installed copy ran, not the source tree"
