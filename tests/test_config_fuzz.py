"""Every shipped config mutated at random, as a half-edited or mistyped file would be: loading either
succeeds or raises ConfigError, never another exception, and the CLI answers a bad config with exit 2
and one line naming the file.

Mutations reach every depth (top-level settings, matrix blocks and their value lists, exclude rules,
checks with their where:/ratio: blocks): a value replaced by null, a negative number, an empty list,
an unknown string or a value of the wrong type; a key deleted or misspelt.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from gdsbench import config, qualify
from gdsbench.cli import cli
from gdsbench.errors import ConfigError

ROOT = Path(__file__).parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
DOCUMENTS = {path.name: yaml.safe_load(path.read_text()) for path in CONFIGS}
SAMPLE = sorted((ROOT / "results" / "sample").glob("*.csv"))[0]
#: Values a half-edited or mistyped config holds where something else belongs.
BAD_VALUES = (None, -1, -4096, -0.5, [], "bogus", "", {"unexpected": 1}, True, 3.5, [None], ["bogus"], 0)

Path_ = tuple[Any, ...]


def paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    """Every key and list index in a YAML document, at any depth, as paths from the root."""
    found: list[Path_] = []
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
    for key, child in children:
        found.append((*prefix, key))
        found += paths(child, (*prefix, key))
    return found


def parent_of(document: Any, path: Path_) -> Any:
    """The dict or list holding the node at `path`."""
    node = document
    for key in path[:-1]:
        node = node[key]
    return node


def misspelt(key: str, position: int, letter: str) -> str:
    """`key` with one letter replaced (or one added, past its end)."""
    position %= len(key) + 1
    return key[:position] + letter + key[position + 1 :]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A shipped config's document with one to three mutations."""
    name = draw(st.sampled_from(sorted(DOCUMENTS)))
    document = copy.deepcopy(DOCUMENTS[name])
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(document) or [()]))
        if not where:
            break
        parent, key = parent_of(document, where), where[-1]
        action = draw(st.sampled_from(("replace", "replace", "delete", "misspell")))
        if action == "replace":
            parent[key] = copy.deepcopy(draw(st.sampled_from(BAD_VALUES)))
        elif action == "delete":
            del parent[key]
        elif isinstance(key, str):
            wrong = misspelt(key, draw(st.integers(0, 40)), draw(st.sampled_from("aesx_")))
            parent[wrong] = parent.pop(key)
    return name, document


def invoke(*args: str) -> Result:
    """The CLI in-process."""
    return CliRunner().invoke(cli, list(args))


def failure(result: Result) -> str:
    """What a CLI run printed and, where it raised, the traceback (a flaky failure then names its cause)."""
    raised = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else ""
    return f"{result.output}{raised}"


def assert_one_line_error(result: Result, path: Path) -> None:
    """Exit 2, a SystemExit (no other exception), and one line naming the file."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gdsbench: error: {path}: "), result.output


def load(path: Path, with_checks: bool) -> ConfigError | None:
    """Load a config as `sweep` does (and its checks, as `qualify` does); the ConfigError, or None."""
    try:
        loaded = config.load(path)
        if with_checks:
            qualify.checks_of(loaded)
    except ConfigError as error:
        return error
    return None


def assert_named(error: ConfigError, path: Path) -> None:
    """A config error names the file, the key and what was expected."""
    assert error.file == str(path) and error.key and error.expected


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 150)), deadline=None)
@given(mutated())
def test_a_mutated_config_loads_or_is_one_config_error(case: tuple[str, dict[str, Any]]) -> None:
    name, document = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(yaml.safe_dump(document))
        error = load(path, with_checks=False)
        dry_run = invoke("sweep", str(path), "--dry-run")
        if error is None:
            assert dry_run.exit_code == 0, failure(dry_run)
        else:
            assert_named(error, path)
            assert_one_line_error(dry_run, path)
        if "checks" not in DOCUMENTS[name]:
            return
        error = load(path, with_checks=True)
        qualified = invoke("qualify", str(path), "--results", str(SAMPLE))
        if error is None:
            assert qualified.exit_code in (0, 1, 3), failure(qualified)  # 3: every check inconclusive (flagged rows)
            assert isinstance(qualified.exception, (SystemExit, type(None))), repr(qualified.exception)
        else:
            assert_named(error, path)
            assert_one_line_error(qualified, path)


def test_a_half_edited_io_size_is_one_line_from_the_real_cli(tmp_path: Path) -> None:
    """The issue's case, through the installed entry point: `io_size:` with no value."""
    path = tmp_path / "half.yaml"
    path.write_text("matrix:\n  engine: [fio]\n  pattern: [read]\n  io_size:\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gdsbench", "sweep", str(path), "--dry-run"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == f"gdsbench: error: {path}: matrix.io_size[0]: expected a size such as 4K, 128K, 1M, 16M\n"
