"""The one-host Slurm tests share (root, Debian's packages, real slurmctld, slurmd and munged): one per test run.
The first xdist worker to take the lock brings it up (under a second), the others reuse it, and the controller
takes it down at the end (tests/conftest.py's pytest_sessionfinish), as the shared Ceph cluster is handled."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from gdsbench.testbeds import slurm
from tests.conftest import SLURM_LOCK, slurm_test_dir
from tests.shared_testbed import shared_cluster


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
    found = shared_cluster(slurm, SLURM_LOCK, directory, prepare=lambda: None)
    yield found
