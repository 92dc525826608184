"""A bucket of a test module's own in the test cluster's radosgw (tests/ceph_cluster.py), for ckptio's s3:// tests."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import forkserver


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


def start_save(url: str, tag: int, *, dcp: bool, mib: int = 64) -> tuple[Any, Any]:
    """Start a child saving `mib` MiB tagged `tag` to `url` in 5 MiB parts (a DCP save, or ckptio.save) with this
    process's AWS_* settings: (the child, the pipe on which it says "r" when ready, then "d" or "e<error>"). It is
    forked from the tests' fork server, never from this process: the CRT's threads do not survive a fork."""
    receive, send = forkserver().Pipe(duplex=False)
    aws = {key: value for key, value in os.environ.items() if key.startswith("AWS_")}
    child = forkserver().Process(target=_save_child, args=(url, tag, dcp, mib, aws, send), daemon=True)
    child.start()
    send.close()
    return child, receive


def heard(child: Any, said: Any, seconds: float = 60.0) -> str:
    """What `child` said next on `said` within `seconds`: "r", "d", "e<error>", or "e" naming its exit."""
    try:
        if said.poll(seconds):
            return str(said.recv())
        return f"esaid nothing in {seconds:.0f} s"
    except EOFError:
        child.join(5)
        return f"eended, exit code {child.exitcode}"


def killed_mid_upload(url: str, bucket: str, key: str, tries: int = 3) -> None:
    """Start a child saving 64 MiB to `url` in 5 MiB parts, and SIGKILL it as soon as an incomplete upload of `key`
    is listed: a save killed mid-upload, its upload left behind."""
    from ckptio.s3.client import Bucket

    client = Bucket(bucket)
    for _ in range(tries):  # a child whose save completed before its upload was listed is tried again
        child, said = start_save(url, 0, dcp=False)
        try:
            assert (ready := heard(child, said)) == "r", f"the saving child: {ready[1:]}"
            while child.is_alive():
                if any(u.key == key for u in client.uploads(key)):
                    return
                time.sleep(0.005)
        finally:
            child.kill()
            child.join()
            said.close()
    raise AssertionError(f"{tries} saves to {url} completed before their upload was listed")


def _save_child(url: str, tag: int, dcp: bool, mib: int, aws: dict[str, str], said: Any) -> None:
    """In a child: take the parent's AWS_* settings (the fork server's are older), say "r", save, say "d"; an
    error is said as "e<type>: <message>"."""
    for key in [key for key in os.environ if key.startswith("AWS_")]:
        del os.environ[key]
    os.environ.update(aws)
    try:
        import torch
        import torch.distributed.checkpoint as torch_dcp
        from ckptio import IOOptions, Writer, save

        warnings.simplefilter("ignore")  # DCP's "assuming the intent is to save in a single process"
        options = IOOptions(part_bytes=5 << 20)
        writer = Writer(url, options=options) if dcp else None
        said.send("r")
        big = torch.full((mib << 18,), float(tag))
        if writer is not None:
            state = {"w": torch.full((1000,), float(tag)), "tag": tag, "big": big}
            torch_dcp.save(state, storage_writer=writer, no_dist=True)
        else:
            save({"big": big}, url, options=options)
        said.send("d")
    except Exception as error:
        said.send(f"e{type(error).__name__}: {error}"[:4000])
