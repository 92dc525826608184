"""A bucket of a test module's own in the test cluster's radosgw (tests/ceph_cluster.py), for ckptio's s3:// tests."""

from __future__ import annotations

import contextlib
import os
import signal
import time
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


def killed_mid_upload(url: str, bucket: str, key: str, tries: int = 3) -> None:
    """Fork a child (from this already-imported process) saving 64 MiB to `url` in 5 MiB parts, and SIGKILL it as
    soon as an incomplete upload of `key` is listed: a save killed mid-upload, its upload left behind."""
    from ckptio.s3.client import Bucket

    for _ in range(tries):  # a child whose save completed before its upload was listed is tried again
        pid = os.fork()
        if pid == 0:
            _child_save(url)
        running = True
        try:
            client = Bucket(bucket)
            while running := os.waitpid(pid, os.WNOHANG) == (0, 0):
                if any(u.key == key for u in client.uploads(key)):
                    return
                time.sleep(0.005)
        finally:
            if running:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    raise AssertionError(f"{tries} saves to {url} completed before their upload was listed")


def _child_save(url: str) -> None:
    """In a forked child: a 64 MiB save to `url` through its own client; never returns. One torch thread: the
    parent's OpenMP pool does not survive the fork (a parallel op would hang)."""
    try:
        import torch
        from ckptio import save
        from ckptio.options import IOOptions

        torch.set_num_threads(1)
        save({"big": torch.ones(16 << 20)}, url, options=IOOptions(part_bytes=5 << 20))
    finally:
        os._exit(0)
