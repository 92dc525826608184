"""A bucket of a test module's own in the test cluster's radosgw (tests/ceph_cluster.py), for ckptio's s3:// tests."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def own_bucket(cluster: Any, prefix: str) -> Iterator[str]:
    """A new bucket named `prefix-<random>`, with the cluster's endpoint and keys in the environment meanwhile;
    emptied (incomplete uploads aborted) and removed after. Skips where ckptio[s3] or radosgw is missing."""
    pytest.importorskip("awscrt", reason="s3:// locations need ckptio[s3]")
    if not cluster.s3_endpoint:
        pytest.skip("the test cluster has no radosgw")
    from ckptio.s3.client import Bucket

    from gdsbench.runners import s3_client

    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    with pytest.MonkeyPatch.context() as env:
        for key, value in cluster.env().items():
            env.setenv(key, value)
        env.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        made = s3_client.Bucket(cluster.s3_endpoint, name, "us-east-1", 16 << 20)
        made.create()
        try:
            yield name
        finally:
            objects = Bucket(name)
            for upload in objects.uploads(""):
                objects.abort(upload)
            for stored in objects.listing(""):
                objects.delete(stored.key)
            made.remove()
