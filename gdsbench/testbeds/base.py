"""What the one-host clusters (ceph.py, slurm.py) share: a Testbed names its Debian packages and binaries, its
error and the make target that installs it, and gives each the same install, tool runner, data directory (its
marker and journal) and attach."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench.errors import GdsbenchError
from gdsbench.testbeds.datadir import DataDir
from gdsbench.testbeds.journal import Journal


@dataclass(frozen=True)
class Testbed:
    """A one-host cluster's declarations: its name (its marker's and state's), error, packages, binaries and the
    make target that installs them."""

    name: str
    error: type[GdsbenchError]
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    deps: str  # e.g. "`make ceph-deps` installs Debian's Ceph packages"

    def install(self) -> bool:
        """Install the Debian packages when a binary is missing (root); True when it installed them. The package
        lists are fetched only when an install from the present ones fails."""
        if all(map(shutil.which, self.binaries)):
            return False
        if os.geteuid() != 0:
            raise self.error(
                f"the {self.name} packages are missing and installing them needs root: run it as root, or with sudo"
            )
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        argv = ["apt-get", "install", "-y", "--no-install-recommends", *self.packages]
        try:
            self.run(argv, timeout=1200, env=env)
        except self.error:  # stale package lists: fetch them, then once more
            self.run(["apt-get", "update"], timeout=600, env=env)
            self.run(argv, timeout=1200, env=env)
        return True

    def run(
        self,
        argv: list[str],
        timeout: float = 60,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        with_stderr: bool = False,
    ) -> str:
        """Run a tool (an argument list, never a shell); its stdout (and stderr `with_stderr`), or (where `check`)
        the testbed's error naming the command and what it said."""
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env=None if env is None else dict(env),
            )
        except FileNotFoundError:
            raise self.error(f"{argv[0]} not found: {self.deps}") from None
        except subprocess.TimeoutExpired:
            raise self.error(f"{shlex.join(argv)}: no answer in {timeout:.0f} s") from None
        if done.returncode != 0 and check:
            raise self.error(f"{shlex.join(argv)}: {(done.stderr or done.stdout).strip() or f'exit {done.returncode}'}")
        return done.stdout + done.stderr if with_stderr else done.stdout

    def data_dir(self, directory: Path | str) -> DataDir:
        """The cluster's data directory: its marker and journal."""
        return DataDir(Path(directory), self.name, self.error)

    def journal(self, directory: Path | str) -> Journal:
        """The journal of what `up` made in `directory`: its state file."""
        return self.data_dir(directory).journal

    def attach(self, directory: Path, load_state: Callable[[Path], Any]) -> Any | None:
        """The state `up` finished in `directory` (read by `load_state`), or None (none there, or an `up` that did
        not finish)."""
        return self.data_dir(Path(directory).absolute()).finished(load_state)
