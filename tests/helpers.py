"""Shared test helpers: small real sweep configs written to temporary folders."""

from __future__ import annotations

import contextlib
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

#: The most a command a test starts may take before the test calls it hung: a guard against hangs, never a measure
#: of speed, so generous (a Python start with torch imported took 2-5 s here on a quiet machine, 40 s on one loaded
#: by the whole suite and a neighbour) and below pytest's own 300 s per test (pyproject.toml), which names the test.
HANG_S = 240


def write_config(folder: Path, **overrides: Any) -> Path:
    """A tiny real fio sweep config (16 MiB files, size-bound) in `folder`, with overrides."""
    document = {
        "name": "tiny",
        "directory": str(folder / "target"),
        "allow_root_filesystem": True,  # tmp_path is on this VM's root file system
        "file_size": "16M",
        "repetitions": 2,
        "matrix": {"engine": ["fio"], "pattern": ["write", "read"], "io_size": ["1M"], "iodepth": [4]},
    }
    document.update(overrides)
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def assert_exits(result: Any, code: int, one_line_error: bool = False) -> None:
    """A CliRunner result ended by the command's own exit with `code`, not by an exception escaping it.

    CliRunner catches exceptions, so a traceback never shows in its output: `"Traceback" not in output`
    proves nothing; the exception it kept does. With `one_line_error`, the output is one error line.
    """
    assert result.exit_code == code, result.output
    if code == 0:
        assert result.exception is None, repr(result.exception)
    else:
        assert isinstance(result.exception, SystemExit) and result.exception.code == code, repr(result.exception)
    if one_line_error:
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("gdsbench: error: "), result.output


def data_rows(csv_path: Path) -> list[dict[str, str]]:
    """The rows of a results CSV as dictionaries."""
    import csv

    with csv_path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def fio_case(**params: Any) -> Any:
    """A fio Case holding every parameter the config fills in (defaults), overridden by `params`."""
    from gdsbench.cases import Case
    from gdsbench.config import AXIS_KEYS
    from gdsbench.runners import get

    runner = get("fio")
    values = {name: key.default for name, key in AXIS_KEYS.items()}
    values.update({key.name: key.default for key in runner.options if key.axis})
    values.update(params)
    order = [name for name in (*AXIS_KEYS, *(key.name for key in runner.options)) if name in runner.axes]
    return Case("fio", tuple((name, values[name]) for name in order))


@contextlib.contextmanager
def mounted(point: Path, fstype: str, *options: str) -> Iterator[Path]:
    """A real file system of `fstype` mounted at `point` for one test (root only: skipped where mount fails)."""
    point.mkdir()
    done = subprocess.run(
        ["mount", "-t", fstype, *options, f"gdsbench-{fstype}", str(point)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount {fstype} here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "--lazy", str(point)], check=True)  # lazy: a leaked descriptor cannot wedge it


#: Modules the tests' torch children need (kill tests, ranks, concurrent savers), imported once by a fork server:
#: each child is a fork of it, so a child costs a fork, not an interpreter importing torch (~2.5 s of CPU here;
#: a kill test's crash is the same: SIGKILL mid-save).
PRELOAD = ["torch", "torch.distributed.checkpoint", "ckptio"]
_servers: list[Any] = []


def forkserver() -> Any:
    """This process's multiprocessing context whose fork server preloaded PRELOAD (started on first use)."""
    import multiprocessing

    if not _servers:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _servers.append(context)
    return _servers[0]


def _run_program(program: str, args: list[str], ready: Any) -> None:
    """A forked child: `program` run as `python -c program *args` would run it, `ready()` telling the test (when
    it listens) that the program is about to work."""
    sys.argv = ["-c", *args]
    told = (lambda: ready.send(True)) if ready is not None else (lambda: None)
    exec(compile(program, "<forked child>", "exec"), {"__name__": "__main__", "ready": told})


def start_program(program: str, args: list[str], ready: Any = None) -> Any:
    """`python -c program *args` as a child forked from the fork server (PRELOAD imported): the started
    multiprocessing Process, whose exitcode is the program's (1 with its traceback on stderr if it raised)."""
    child = forkserver().Process(target=_run_program, args=(program, args, ready), daemon=True)
    child.start()
    return child


def kill_when_busy(program: str, args: list[str], seed: int, window: tuple[float, float]) -> None:
    """Run `program` (with `args` as its argv) in a child forked from a fork server that preloaded torch and
    ckptio, wait for it to call `ready()`, then SIGKILL it at a moment drawn (by `seed`) from `window` seconds:
    a crash at a random point of its work."""
    receive, send = forkserver().Pipe(duplex=False)
    child = start_program(program, args, send)
    try:
        assert receive.poll(60) and receive.recv() is True, f"the child never became ready (exit {child.exitcode})"
        time.sleep(random.Random(seed).uniform(*window))
    finally:
        child.kill()
        child.join()
