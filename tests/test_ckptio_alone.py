"""ckptio installs and works alone: pip installs lib/ckptio into a clean venv that holds torch (and what torch
needs) and nothing else, then a save, a verified load and a DCP save/load run there, with none of the
benchmark's packages importable.

torch is linked into the venv from this one rather than installed again (a 700 MB wheel, 45 s here): its
files are the ones pip installed, with their metadata, so pip sees the requirement met and installs the
rest of ckptio's dependencies (xxhash, crc32c) itself.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = [pytest.mark.needs_torch, pytest.mark.slow]

LIBRARY = Path(__file__).parent.parent / "lib" / "ckptio"
BENCHMARK_ONLY = ("gdsbench", "pandas", "matplotlib", "seaborn", "click", "rich", "yaml", "zstandard", "blosc2")

PROGRAM = """
import importlib.util, os, sys
import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
import ckptio

present = [name for name in sys.argv[2].split(",") if importlib.util.find_spec(name) is not None]
assert not present, f"importable in the clean venv: {present}"
folder, rank, world = sys.argv[1], int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


class Loader:  # a Stateful holding bytes, as a data loader's state
    def __init__(self, blob):
        self.blob = blob

    def state_dict(self):
        return {"blob": self.blob}

    def load_state_dict(self, state):
        self.blob = state["blob"]


def state(seed):
    return {"w": torch.arange(1 << 16, dtype=torch.float32) + seed, "step": seed, "name": f"run-{seed}",
            "lrs": [0.1, seed], "loader": Loader(bytes([seed]) * 100)}


def check(seed, path, kind):
    back = {**state(0), "w": torch.zeros(1 << 16), "loader": Loader(b"")}
    dcp.load(back, storage_reader=ckptio.Reader(path), no_dist=world == 1)
    want = state(seed)
    assert torch.equal(back["w"], want["w"]), kind
    assert (back["step"], back["name"], back["lrs"], back["loader"].blob) == (seed, want["name"], want["lrs"],
                                                                             want["loader"].blob), kind


if world > 1:
    dist.init_process_group("gloo", rank=rank, world_size=world)
else:
    single = state(3)
    ckptio.save({"w": single["w"], "step": 3}, folder + "/one.pt")
    back = ckptio.load(folder + "/one.pt")
    assert torch.equal(back["w"], single["w"]) and back["step"] == 3
    try:  # without the extra s3, an s3:// location is refused by name (and nothing else breaks)
        ckptio.save({"w": single["w"]}, "s3://bucket/one.ckpt")
        raise SystemExit("an s3:// save ran without awscrt")
    except ckptio.errors.BackendUnavailable as e:
        assert "pip install 'ckptio[s3]'" in str(e), e
path = f"{folder}/dcp-{world}"
dcp.save(state(1), storage_writer=ckptio.Writer(path), no_dist=world == 1)
check(1, path, "sync")
writer = ckptio.Writer(path)
dcp.async_save(state(2), storage_writer=writer, **({"no_dist": True} if world == 1 else {})).result()
writer.close()
check(2, path, "async")
print("ok", ckptio.__file__)
"""
LINKED = ("torch", "numpy")  # big wheels linked from this venv where ckptio declares them; pip installs the rest


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


def declared(library: Path) -> set[str]:
    """The names of the distributions a library's pyproject requires."""
    listed = re.search(r"^dependencies = (\[.*?\])$", (library / "pyproject.toml").read_text(), re.M | re.S)
    assert listed, "no dependencies in the pyproject"
    return {re.split(r"[^A-Za-z0-9_.-]", r, maxsplit=1)[0].lower() for r in ast.literal_eval(listed.group(1))}


def run_ranks(python: Path, world: int, args: list[str], cwd: Path) -> list[subprocess.Popen[str]]:
    """The program on `world` ranks (gloo on 127.0.0.1), in an environment holding nothing of this tree."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    ranks = []
    for rank in range(world):
        env = clean | {
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        ranks.append(
            subprocess.Popen(
                [str(python), "-c", PROGRAM, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=cwd,
                env=env,
            )
        )
    return ranks


def test_ckptio_installs_alone_and_round_trips_a_dcp_save(tmp_path):
    """A plain save and load, then DCP saves and loads, sync and async, of tensors, an int, a str, a list and a
    Stateful holding bytes, at 1 and 2 ranks."""
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
    for name in sorted(declared(LIBRARY) & set(LINKED)):
        for dist in requirement_closure(name):
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
    args = [str(data), ",".join((*BENCHMARK_ONLY, "awscrt"))]  # awscrt: only with the extra ckptio[s3]
    for world in (1, 2):
        ranks = run_ranks(python, world, args, tmp_path)
        outs = [rank.communicate(timeout=300) for rank in ranks]
        for rank, (out, err) in zip(ranks, outs):
            assert rank.returncode == 0, err[-3000:]
            assert out.startswith("ok ") and str(site) in out, "the installed copy ran, not the source tree"
