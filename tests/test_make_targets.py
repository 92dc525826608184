"""The Makefile installs what each target needs, nothing more: `make run` fio and the venv, not Ceph (~200 MB);
`make ceph-up`, `make ceph-demo` and `make test` Ceph; `make test` Chromium, for the HTML report's browser tests.

Read from make's own database (`make -pq`: nothing is run) and its dry run of `make run` (whose recipes call no
sub-make, so `-n` runs none of them).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import HANG_S

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed (apt-get install make)")


def make(*args: str) -> str:
    """make's output in the repository root (its exit status is not the point: -q says 'out of date')."""
    return subprocess.run(["make", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=HANG_S).stdout


def prerequisites(target: str) -> set[str]:
    """Every target `target` depends on, directly or through others, from make's database."""
    rules: dict[str, list[str]] = {}
    for name, deps in re.findall(r"^([\w./-]+):(?!=) *(.*)$", make("-pq", "system-deps"), re.MULTILINE):
        rules.setdefault(name, []).extend(deps.split())
    seen: set[str] = set()
    todo = [target]
    while todo:
        for dep in rules.get(todo.pop(), []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def test_make_run_installs_fio_and_the_venv_but_not_ceph():
    assert "ceph-deps" not in prerequisites("run") and "browser-deps" not in prerequisites("run")
    planned = make("-n", "run", "RESULTS=/nonexistent", "VENV=/nonexistent-venv")
    assert "apt-get install -y fio python3-venv" in planned
    assert "ceph" not in planned.lower() and "chromium" not in planned
    # the default sweep's Python packages only: no S3 clients, no test tools
    assert '-e ".[checkpoint]"' in planned and "s3torch" not in planned and "test]" not in planned


@pytest.mark.parametrize("target", ["ceph-up", "ceph-demo", "test"])
def test_ceph_is_installed_for_its_cluster_and_its_tests(target):
    assert "ceph-deps" in prerequisites(target)


def test_make_test_installs_chromium_for_the_browser_tests():
    assert "browser-deps" in prerequisites("test")
    assert "apt-get install -y chromium" in make("-n", "browser-deps")


def test_make_test_installs_slurm_for_its_one_host_cluster_and_make_run_does_not():
    assert "slurm-deps" in prerequisites("test") and "slurm-deps" not in prerequisites("run")
    planned = make("-n", "slurm-deps")
    assert "--no-install-recommends" in planned and "slurmd slurmctld slurm-client munge;" in planned
