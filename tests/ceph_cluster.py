"""The one-host Ceph cluster tests share (root, Debian's packages, real daemons): one per test run, with radosgw
and CephFS. The first xdist worker to take the lock brings it up, the others reuse it, and the controller takes it
down at the end (tests/conftest.py's pytest_sessionfinish). /etc/ceph/ceph.conf points at it when that path was
free (fio's ceph engines read only that file)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gdsbench.testbeds import ceph
from tests.conftest import CEPH_LOCK, ceph_test_dir
from tests.shared_testbed import shared_cluster


def _installed() -> None:
    """Install the Ceph packages if missing; skip, saying why, where they cannot be."""
    try:
        ceph.install()
    except ceph.CephError as exc:
        pytest.skip(f"the Ceph packages cannot be installed: {exc}")


@pytest.fixture(scope="session")
def ceph_cluster(request: pytest.FixtureRequest) -> Iterator[ceph.Cluster]:
    """This run's shared cluster (radosgw and CephFS): brought up by the first worker, reused by the others."""
    if os.geteuid() != 0:
        pytest.skip("needs root (Ceph daemons, /etc/ceph, ceph-fuse)")
    directory = ceph_test_dir(request.config)
    found = shared_cluster(ceph, CEPH_LOCK, directory, prepare=_installed)
    yield found


@pytest.fixture
def radosgw(ceph_cluster: ceph.Cluster, monkeypatch: pytest.MonkeyPatch) -> ceph.Cluster:
    """The shared cluster's S3 endpoint and credentials, in the environment as the S3 engines read them."""
    if not ceph_cluster.s3_endpoint:
        pytest.skip("the test cluster has no radosgw")
    for name, value in ceph_cluster.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return ceph_cluster


def bucket_marker(conf: Path, bucket: str) -> str:
    """radosgw's marker of a bucket: the prefix of every RADOS object holding its data."""
    stats = subprocess.run(
        ["radosgw-admin", "-c", str(conf), "bucket", "stats", f"--bucket={bucket}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return str(json.loads(stats)["marker"])


def garbage_of(conf: Path, marker: str) -> list[str]:
    """The RADOS objects of the bucket with `marker` waiting for radosgw's garbage collection (other tests' buckets
    on the shared cluster make garbage of their own at any time: only this bucket's is the test's to judge)."""
    listed = subprocess.run(
        ["radosgw-admin", "-c", str(conf), "gc", "list", "--include-all"], capture_output=True, text=True, check=True
    ).stdout
    return [o["oid"] for entry in json.loads(listed) for o in entry["objs"] if o["oid"].startswith(f"{marker}_")]
