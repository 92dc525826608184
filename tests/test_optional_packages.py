"""Where optional packages are missing. `pip install gdsbench` without its checkpoint extra (torch, ckptio and
safetensors not there): every checkpoint engine's case is one skipped row that names what is missing and the install
line, in dry runs and real runs alike, never a traceback. The test suite where the extras and the test tools beyond
pytest are missing (`gdsbench smoke --gpu`'s step 05 on a GPU host): every module collects, its tests skip.

The packages are hidden in a child process rather than uninstalled (a venv without them costs minutes): every
import finder (pytest's assertion rewriter too) is wrapped so it finds none of them, as where they were never
installed (find_spec returns None, an import raises ModuleNotFoundError).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import HANG_S, data_rows

CONFIGS = Path(__file__).parent.parent / "configs"
CHECKPOINT_EXTRA = ("torch", "ckptio", "safetensors")
#: Optional beyond torch and ckptio: the other extras' packages and the test tools beyond pytest and hypothesis.
EXTRAS = (
    "safetensors",
    "blosc2",
    "zstandard",
    "awscrt",
    "s3torchconnector",
    "s3torchconnectorclient",
    "kvikio",
    "deepspeed",
    "nbformat",
    "nbclient",
    "ipykernel",
    "xmlschema",
)
TESTS = Path(__file__).parent
INSTALL = "not installed: pip install 'gdsbench[checkpoint]'"

WITHOUT = """
import sys

hidden = set(sys.argv.pop(1).split(","))
assert not hidden & set(sys.modules), "imported before they could be hidden"


class Hidden:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)


sys.meta_path[:] = [Hidden(finder) for finder in sys.meta_path]
"""


def python_without(hidden: tuple[str, ...], program: str, *args: str) -> subprocess.CompletedProcess:
    """`program` run where the `hidden` packages cannot be imported."""
    argv = [sys.executable, "-c", WITHOUT + program, ",".join(hidden), *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=HANG_S, check=False)


def gdsbench_without(*args: str) -> subprocess.CompletedProcess:
    """The CLI run where the checkpoint extra's packages cannot be imported."""
    return python_without(CHECKPOINT_EXTRA, "from gdsbench.cli import main\nmain()", *args)


def skip_lines(plan: str) -> dict[str, str]:
    """A dry run's checkpoint-engine cases (fio, gdsio and s3 left out) and the line after each."""
    lines = plan.splitlines()
    return {
        case: after.strip()
        for case, after in itertools.pairwise(lines)
        if case.startswith("[") and not case.split("engine=")[1].startswith(("fio", "gdsio", "s3,"))
    }


DRY_RUN_CONFIGS = ("local", "distributed", "cpu-cost", "fast-device", "goodput", "mlperf-checkpoint")
DRY_RUNS = """
import contextlib, io, json
from gdsbench.cli import main

answers = {}
for config in sys.argv[1:]:
    sys.argv, out, err, code = ["gdsbench", "sweep", "--dry-run", config], io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as stop:
            code = stop.code
    answers[config] = [code, out.getvalue(), err.getvalue()]
print(json.dumps(answers))
"""


@pytest.fixture(scope="module")
def dry_runs() -> dict[str, subprocess.CompletedProcess]:
    """`gdsbench sweep --dry-run` of each of DRY_RUN_CONFIGS as the CLI answers it (exit status, stdout, stderr),
    all run in one child where the checkpoint extra's packages cannot be imported (one Python start-up)."""
    paths = [str(CONFIGS / f"{config}.yaml") for config in DRY_RUN_CONFIGS]
    done = python_without(CHECKPOINT_EXTRA, DRY_RUNS, *paths)
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    return {c: subprocess.CompletedProcess(p, *answers[p]) for c, p in zip(DRY_RUN_CONFIGS, paths, strict=True)}


@pytest.mark.parametrize("config", DRY_RUN_CONFIGS)
def test_a_dry_run_skips_each_checkpoint_case_with_the_install_line(config, dry_runs):
    done = dry_runs[config]
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    cases = skip_lines(done.stdout)
    assert cases, done.stdout
    for case, line in cases.items():
        assert line.startswith("skipped: ") and (INSTALL in line or " has no " in line), f"{case}\n{line}"
    needs_ckptio = [line for case, line in cases.items() if "engine=fastpersist" in case or "engine=dcp_fast" in case]
    assert all("ckptio" in line for line in needs_ckptio if INSTALL in line)


def test_a_real_sweep_writes_one_skipped_row_per_case_and_prints_the_install_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "no-extra",
                "directory": str(tmp_path / "target"),
                "allow_root_filesystem": True,
                "file_size": "16M",
                "matrix": {
                    "engine": ["fastpersist", "dcp_fast"],
                    "pattern": ["save", "load"],
                    "transfer": ["CPU_ONLY"],
                },
            }
        )
    )
    done = gdsbench_without("sweep", str(config), "-o", str(tmp_path / "out"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr  # 1: nothing was measured
    rows = data_rows(next((tmp_path / "out").glob("*.csv")))
    assert [(r["status"], r["error"]) for r in rows] == [("skipped", f"skipped: torch, ckptio {INSTALL}")] * 4
    assert f"4 cases skipped: torch, ckptio {INSTALL}" in done.stderr  # the extra's [brackets] are text, not markup


@pytest.mark.needs_torch
def test_ranks_of_engines_without_ckptio_start_where_ckptio_is_missing():
    program = """
import warnings
from gdsbench.runners.checkpoint.ranks import rank
rank.quiet_but_direct()
print(warnings.filters[0][0])
"""
    done = python_without(("ckptio",), program)
    assert done.returncode == 0 and done.stdout.split() == ["ignore"], done.stderr  # dcp's ranks: warnings quiet


COLLECT = """
from _pytest.assertion import rewrite

rewriter_finds = rewrite.AssertionRewritingHook.find_spec
rewrite.AssertionRewritingHook.find_spec = lambda self, name, path=None, target=None: (
    None if name.partition(".")[0] in hidden else rewriter_finds(self, name, path, target))
import pytest

sys.exit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-m", "needs_cuda",
                      sys.argv[1]]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("hidden", [EXTRAS, (*EXTRAS, "torch", "ckptio")], ids=["gpu-host", "no-torch"])
def test_the_needs_cuda_tests_collect_where_optional_packages_are_missing(hidden):
    done = python_without(hidden, COLLECT, str(TESTS))
    collected = pytest.ExitCode.OK if hidden == EXTRAS else pytest.ExitCode.NO_TESTS_COLLECTED  # no torch, no CUDA
    assert done.returncode == collected and "error" not in done.stdout.splitlines()[-1], done.stdout[-3000:]
