"""The one-host Slurm tests share (root, Debian's packages, real slurmctld, slurmd and munged): one per test run.
The first xdist worker to take the lock brings it up (under a second), the others reuse it, and the controller
takes it down at the end (tests/conftest.py's pytest_sessionfinish), as the shared Ceph cluster is handled."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdsbench import trusted
from gdsbench.testbeds import slurm
from gdsbench.testbeds.daemons import alive
from tests.conftest import SLURM_LOCK, slurm_test_dir


def slurm_installed() -> None:
    """Install the Slurm and munge packages if missing; skip, saying why, where they cannot be."""
    if os.geteuid() != 0:
        pytest.skip("needs root (slurmd, munged)")
    try:
        slurm.install()
    except slurm.SlurmError as exc:
        pytest.skip(f"the Slurm packages cannot be installed: {exc}")


@pytest.fixture(scope="session")
def slurm_cluster(request: pytest.FixtureRequest) -> Iterator[slurm.Cluster]:
    """This run's shared one-node cluster (`SLURM_CONF` in its `env()`): brought up by the first worker, reused."""
    slurm_installed()
    directory = slurm_test_dir(request.config)
    lock = os.open(SLURM_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)  # /var/tmp: no link
    with os.fdopen(lock, "r+"):
        trusted.check_owned(SLURM_LOCK, os.fstat(lock))
        fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in Path("/var/tmp").glob("gdsbench-slurm-test-*"):  # left by a run that was killed
            if stale != directory and not Path(f"/proc/{stale.name.rsplit('-', 1)[1]}").exists():
                with contextlib.suppress(trusted.UntrustedError):  # one others made: left alone
                    slurm.down(stale)
        found = slurm.attach(directory)
        if found is None or len(found.pids()) != len(found.pidfiles) or not all(map(alive, found.pids())):
            slurm.down(directory)  # an unfinished `up` or a dead daemon: start again
            found = slurm.up(directory)
    yield found
