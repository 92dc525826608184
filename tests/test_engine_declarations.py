"""An engine declares what the core needs of it (its file sets and fill, its rank half, whether it takes a fleet,
the baseline it is), and the core reads the declarations: adding an engine is adding its module, never a name in
a shared room (the registry, the fill step, the disk guard, the sweep, the rank program, the report)."""

from __future__ import annotations

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gdsbench import config, filesets, fill, runners, sweep
from gdsbench.cases import Pattern, Transfer
from gdsbench.columns import FILES, Traits
from gdsbench.errors import ToolError
from gdsbench.hosts import parse_hosts
from gdsbench.runners.base import FleetRunner, Measurement
from gdsbench.runners.checkpoint.distributed import DistributedRunner
from gdsbench.runners.checkpoint.rank_half import StorageLayer, WholeJob
from gdsbench.runners.file_sets import FileSet, Fill, Fills, KeepsFiles

ROOT = Path(__file__).parent.parent
ENGINE_FOLDERS = (ROOT / "gdsbench/runners", ROOT / "gdsbench/runners/checkpoint")
#: The shared rooms the engines' halves used to be chosen in by name.
SHARED_ROOMS = (
    "gdsbench/runners/__init__.py",
    "gdsbench/runners/checkpoint/__init__.py",
    "gdsbench/fill.py",
    "gdsbench/filesets.py",
    "gdsbench/sweep.py",
    "gdsbench/cli_rank.py",
    "gdsbench/runners/checkpoint/ranks/rank.py",
    "gdsbench/report/ceilings.py",
    "gdsbench/ceilings.py",
)


class DdReader:
    """A test engine (the seam's own double, written here to show what a new engine adds): its reads need a file
    that `dd` writes before the sweep's first case, and it takes the sweep's fleet."""

    name = "dd_reader"
    description = "reads one file that dd wrote first"
    patterns = frozenset({Pattern.READ})
    transfers = frozenset({Transfer.CPU_ONLY})
    options = ()
    axes = frozenset({"pattern", "transfer", "threads"})
    traits = Traits(FILES)
    columns = ()

    def files(self, ctx: Any) -> FileSet:
        return FileSet(self.name, (ctx.directory / "dd_reader.0",), ctx.file_size)

    def file_sets(self, cases: list[Any], ctx: Any) -> list[FileSet]:
        return [self.files(ctx)]

    def fill(self, cases: list[Any], ctx: Any) -> Fill:
        files = self.files(ctx)
        argv = ["dd", "if=/dev/urandom", f"of={files.paths[0]}", "bs=64k", f"count={files.each >> 16}", "conv=fsync"]
        return Fill(files, argv, self.check)

    @staticmethod
    def check(done: subprocess.CompletedProcess) -> None:
        if done.returncode:
            raise ToolError(f"dd failed: {done.stderr.strip()}")

    def run_hosts(self, case: Any, ctx: Any) -> Any:
        raise AssertionError("not run here: only its declaration is read")

    def unavailable(self, case: Any, ctx: Any) -> str | None:
        return None

    def command(self, case: Any, ctx: Any) -> list[str]:
        return ["dd", f"if={self.files(ctx).paths[0]}", "of=/dev/null"]

    def run(self, case: Any, ctx: Any) -> Measurement:
        raise AssertionError("not run here")


@pytest.fixture
def dd_reader(monkeypatch: pytest.MonkeyPatch) -> DdReader:
    """The test engine, registered as a module defining ENGINE would be."""
    engine = DdReader()
    monkeypatch.setitem(runners.RUNNERS, engine.name, engine)
    return engine


def test_a_new_engine_s_files_are_counted_and_filled_by_its_own_tool(tmp_path: Path, dd_reader: DdReader) -> None:
    document = {
        "directory": str(tmp_path / "target"),
        "file_size": "1M",
        "allow_root_filesystem": True,
        "matrix": {"engine": ["dd_reader", "fio"], "pattern": ["read"], "threads": [2]},
    }
    loaded = config.from_dict(document, "t.yaml")
    ctx = sweep.context(loaded, None)
    ctx.directory.mkdir()
    sets = filesets.file_sets(list(loaded.cases), ctx)
    assert [s.label for s in sets] == ["dd_reader 1 x 1M", "fio 2 x 1M"]
    notes = [row["note"] for row in fill.prepare(loaded, ctx, sweep.skip_reason)]
    assert notes[0].startswith("fill dd_reader 1 x 1M") and "dd if=/dev/urandom" in notes[0]
    assert notes[1] == next(n for n in notes if n.startswith("fill dd_reader 1 x 1M done"))
    assert (ctx.directory / "dd_reader.0").stat().st_size == 1 << 20
    assert sorted(p.name for p in ctx.directory.iterdir()) == [
        "dd_reader.0",
        *[f"gdsbench.{1 << 20}.{j}.0" for j in (0, 1)],
    ]
    assert list(fill.prepare(loaded, ctx, sweep.skip_reason)) == []  # ready: nothing written twice
    ctx.resources.cleanup()
    assert not list(ctx.directory.iterdir())


def test_a_new_engine_s_failed_fill_is_its_own_check_s_words(tmp_path: Path, dd_reader: DdReader) -> None:
    document = {
        "directory": str(tmp_path),
        "file_size": "1M",
        "allow_root_filesystem": True,
        "matrix": {"engine": ["dd_reader"], "pattern": ["read"], "threads": [1]},
    }
    loaded = config.from_dict(document, "t.yaml")
    ctx = sweep.context(loaded, None)
    (tmp_path / "dd_reader.0").mkdir()  # dd cannot write over a folder
    notes = [row["note"] for row in fill.prepare(loaded, ctx, sweep.skip_reason)]
    assert notes[-1].startswith("fill dd_reader 1 x 1M failed: dd failed: ") and "Is a directory" in notes[-1]
    assert ctx.fill_failures["dd_reader"].startswith("dd failed")


def test_the_fleet_goes_to_the_engines_that_take_one(tmp_path: Path, dd_reader: DdReader) -> None:
    document = {
        "directory": str(tmp_path),
        "file_size": "1M",
        "matrix": {"engine": ["dd_reader", "fio"], "pattern": ["read"], "threads": [1]},
    }
    loaded = config.from_dict(document, "t.yaml")
    hosts = parse_hosts(["127.0.0.1:8765", "127.0.0.1:8766"])
    fleet = dataclasses.replace(loaded, settings={**loaded.settings, "hosts": hosts})
    assert {case.engine: len(sweep.fleet(fleet, case)) for case in fleet.cases} == {"dd_reader": 2, "fio": 2}
    taking = sorted(name for name, runner in runners.RUNNERS.items() if isinstance(runner, FleetRunner))
    assert taking == ["dd_reader", "fio"]  # fio's client/server and the engine that declares run_hosts; no other


def test_every_engine_module_is_registered_and_declares_its_halves() -> None:
    """Every module of the engine folders that defines ENGINE is in the registry (no list names them); the distributed
    ones carry their rank half, which the rank program takes by the case's engine; file engines declare their sets."""
    defined = set()
    for folder in ENGINE_FOLDERS:
        for path in folder.glob("*.py"):
            tree = ast.parse(path.read_text())
            if any(
                isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "ENGINE" for t in n.targets)
                for n in tree.body
            ):
                defined.add(path.stem)
    assert {type(r).__module__.rsplit(".", 1)[1] for r in runners.RUNNERS.values()} == defined
    pytest.importorskip("torch", reason="the rank program imports torch")
    from gdsbench import cli_rank

    ranked = cli_rank.ranked_engines()
    assert set(ranked) == {"collective", "dcp", "dcp_fast", "tiered_ranks", "torch_save_ranks"}
    assert all(isinstance(runners.RUNNERS[name], DistributedRunner) for name in ranked)
    assert isinstance(cli_rank.rank_half("dcp"), StorageLayer) and isinstance(
        cli_rank.rank_half("dcp_fast"), StorageLayer
    )
    assert not isinstance(cli_rank.rank_half("torch_save_ranks"), StorageLayer)  # a file of each rank's own
    assert all(isinstance(cli_rank.rank_half(n), WholeJob) for n in ("collective", "tiered_ranks"))  # their own job
    assert {n for n, r in runners.RUNNERS.items() if isinstance(r, Fills)} == {"fio", "gdsio"}
    assert {"fio", "gdsio", "torch_save", "dcp"} <= {n for n, r in runners.RUNNERS.items() if isinstance(r, KeepsFiles)}


def test_the_rank_program_refuses_an_engine_without_ranks_naming_those_with() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gdsbench.cli_rank",
            "--case",
            "engine=torch_save,pattern=save",
            "--checkpoint",
            "x",
            "--out",
            "y",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        "engine 'torch_save' has no ranks (engines with ranks: collective, dcp, dcp_fast, tiered_ranks, torch_save_ranks)"
        in done.stderr
    )


@pytest.mark.parametrize("room", SHARED_ROOMS)
def test_no_shared_room_names_an_engine(room: str) -> None:
    """The rooms that used to choose an engine's half by its name hold no engine's name now."""
    names = set(runners.RUNNERS)
    tree = ast.parse((ROOT / room).read_text())
    named = sorted({n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names})
    assert named == [], f"{room} names {named}"


def test_no_module_outside_the_engines_compares_an_engine_with_a_name() -> None:
    """`if engine == "dcp"` and its kin live nowhere outside the engines' own modules (the legacy reading of old
    files, columns.legacy_traits, is a table, not a comparison)."""
    names = set(runners.RUNNERS)
    found = []
    for path in sorted((ROOT / "gdsbench").rglob("*.py")):
        if "runners" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and "engine" in ast.unparse(node):
                hit = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in names}
                if hit:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
