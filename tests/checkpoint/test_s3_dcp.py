"""ckptio's DCP Writer and Reader on `s3://bucket/prefix` (issue 33, item 1): exact round trips (sync, async,
compressed), the commit on objects (metadata last, old objects removed only after it, a killed save's upload
aborted by the next commit), failures named with their HTTP status, and hostile metadata or data refused by name.
Against the test suite's radosgw (one bucket for the module)."""

from __future__ import annotations

import dataclasses
import pickle
import random
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckptio import IOOptions, Reader, Writer
from ckptio.dcp.metadata import seal_table
from ckptio.dcp.records import METADATA, SEAL_MAGIC
from ckptio.dcp.table_encode import encode
from ckptio.errors import (
    BackendUnavailable,
    CheckpointError,
    CorruptCheckpoint,
    InvalidCheckpoint,
    ObjectStoreError,
    TruncatedCheckpoint,
    UnsupportedMetadata,
    unwrap,
)
from torch.distributed.checkpoint import DefaultSavePlanner
from torch.distributed.checkpoint.api import CheckpointException

from tests.ceph_cluster import ceph_cluster, radosgw  # noqa: F401
from tests.checkpoint.conftest import assert_same, random_tensor
from tests.checkpoint.s3_bucket import heard, own_bucket, start_save

SMALL = IOOptions(chunk_bytes=64 << 10, buffer_bytes=256 << 10, threads=3)
BIG = 16 << 20  # float32 elements: 64 MiB, a multipart upload of 4 parts (16 MiB each)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def bucket(ceph_cluster: Any) -> Iterator[Any]:  # noqa: F811
    """A bucket of this module's own in the test cluster's radosgw (its client)."""
    with own_bucket(ceph_cluster, "ckptio-dcp") as name:
        from ckptio.s3.client import Bucket

        yield Bucket(name)


def state(seed: int = 0) -> dict[str, Any]:
    """Several dtypes around the chunk size, a 0-d tensor and plain values."""
    return {
        "bf16": random_tensor((300, 257), torch.bfloat16, seed + 1),
        "fp32": torch.randn(70_000, generator=torch.Generator().manual_seed(seed + 2)),
        "i64": torch.arange(5000, dtype=torch.int64) * (seed + 1),
        "scalar": torch.tensor(2.5 + seed),
        "step": 41 + seed,
        "schedule": f"cosine-{seed}",
    }


def zeros(sd: dict[str, Any]) -> dict[str, Any]:
    """A destination shaped like `sd`: tensors zeroed, plain values reset."""
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else type(v)() for k, v in sd.items()}


def save(sd: dict[str, Any], url: str, **kw: Any) -> Writer:
    writer = Writer(url, options=SMALL, **kw)
    dcp.save(sd, storage_writer=writer, no_dist=True)
    return writer


def load(url: str, like: dict[str, Any]) -> dict[str, Any]:
    out = zeros(like)
    dcp.load(out, storage_reader=Reader(url, options=SMALL), no_dist=True)
    return out


def failure(call: Any) -> BaseException:
    """The library's error a DCP call raised (inside DCP's CheckpointException)."""
    with pytest.raises((CheckpointException, CheckpointError)) as info:
        call()
    return unwrap(info.value)


def names(objects: Any, prefix: str) -> set[str]:
    """The objects directly under a prefix."""
    return {s.key.removeprefix(f"{prefix}/") for s in objects.listing(f"{prefix}/")}


def fetch(objects: Any, key: str) -> bytes:
    """A whole object."""
    into = memoryview(bytearray(objects.head(key).size))
    return bytes(into[: objects.get(key, 0, into)])


def put(objects: Any, key: str, data: bytes) -> None:
    """Replace an object by `data` (as another writer would)."""
    from ckptio.s3.client import Segments

    objects.put(key, Segments([(0, memoryview(data))], len(data)), len(data))


def data_names(objects: Any, prefix: str) -> set[str]:
    return {n for n in names(objects, prefix) if n.endswith(".data")}


# -- round trips ---------------------------------------------------------------------------------------------


def test_a_sync_save_round_trips_exactly_as_one_object_per_rank_equal_to_the_local_file(
    radosgw: Any,  # noqa: F811
    bucket: Any,
    tmp_path: Any,
) -> None:
    sd, url = state(), f"s3://{bucket.bucket}/sync"
    writer = save(sd, url)
    assert str(writer.path) == url
    assert_same(load(url, sd), sd)
    [data] = data_names(bucket, "sync")
    assert names(bucket, "sync") == {METADATA, data}
    save(sd, tmp_path / "ckpt")
    [local] = (tmp_path / "ckpt").glob("*.data")
    assert fetch(bucket, f"sync/{data}") == local.read_bytes()  # the same encode path: the same bytes


def test_a_rank_object_goes_up_in_part_bytes_parts_and_loads_exactly_in_small_gets(
    radosgw: Any,  # noqa: F811
    bucket: Any,
) -> None:
    """IOOptions.part_bytes of 5 MiB: a rank's 12 MiB data object is a multipart upload of 3 parts (its ETag ends
    in -3), and a Reader with the same options (GETs split into 5 MiB ranges, one piece at a time) loads it exactly."""
    sd, url = {"w": random_tensor((3 << 20,), torch.float32, 9), "step": 3}, f"s3://{bucket.bucket}/parts"
    five = SMALL.with_(part_bytes=5 << 20, object_connections=1)
    dcp.save(sd, storage_writer=Writer(url, options=five), no_dist=True)
    [data] = data_names(bucket, "parts")
    assert bucket.head(f"parts/{data}").etag.strip('"').endswith("-3")
    out = zeros(sd)
    dcp.load(out, storage_reader=Reader(url, options=five), no_dist=True)
    assert_same(out, sd)


def test_an_async_save_round_trips_and_replaces_the_previous_checkpoint(radosgw: Any, bucket: Any) -> None:  # noqa: F811
    """Two async saves through one Writer: the second replaces the first's object; the Writer pickles (DCP's
    process executor) without its connections and saves again from the other side."""
    url, writer = f"s3://{bucket.bucket}/async", Writer(f"s3://{bucket.bucket}/async", options=SMALL)
    dcp.async_save(state(0), storage_writer=writer, no_dist=True).result()
    first = data_names(bucket, "async")
    dcp.async_save(state(1), storage_writer=writer, no_dist=True).result()
    writer.close()
    assert_same(load(url, state(1)), state(1))
    assert len(data_names(bucket, "async")) == 1 and not data_names(bucket, "async") & first
    copy = pickle.loads(pickle.dumps(writer))
    assert str(copy.path) == url and copy.store._bucket is None
    dcp.save(state(2), storage_writer=copy, no_dist=True)
    assert_same(load(url, state(2)), state(2))


def test_a_compressed_save_round_trips_and_stores_less(radosgw: Any, bucket: Any) -> None:  # noqa: F811
    pytest.importorskip("zstandard", reason="zstd needs ckptio[zstd]")
    sd = {"flat": torch.zeros(1 << 18), "ramp": torch.arange(1 << 16, dtype=torch.int64), "step": 3}
    url = f"s3://{bucket.bucket}/zstd"
    writer = save(sd, url, compression="zstd")
    assert writer.stats.stored_bytes < writer.stats.raw_bytes // 10
    assert_same(load(url, sd), sd)


# -- failures: named, and nothing visible ---------------------------------------------------------------------


def test_a_missing_bucket_is_named_with_http_404(radosgw: Any, bucket: Any) -> None:  # noqa: F811
    url = f"s3://{bucket.bucket}-gone/ckpt"
    error = failure(lambda: save(state(), url))
    assert isinstance(error, ObjectStoreError) and error.status == 404
    assert isinstance(failure(lambda: load(url, state())), InvalidCheckpoint)


def test_an_upload_aborted_mid_write_fails_the_save_and_shows_nothing(radosgw: Any, bucket: Any) -> None:  # noqa: F811
    """Another client aborts the save's multipart upload while its parts go up (what a concurrent save's sweep
    would do): the save fails with the store's 404, the previous checkpoint stays, whole, and nothing new shows."""
    url = f"s3://{bucket.bucket}/aborted"
    save(state(0), url)
    committed, kept = fetch(bucket, f"aborted/{METADATA}"), names(bucket, "aborted")
    done = threading.Event()

    def abort_uploads() -> None:
        while not done.is_set():
            for upload in bucket.uploads("aborted/"):
                bucket.abort(upload)

    aborter = threading.Thread(target=abort_uploads)
    aborter.start()
    try:
        error = failure(lambda: save({"w": torch.ones(BIG), "step": 1}, url))
    finally:
        done.set()
        aborter.join()
    assert isinstance(error, ObjectStoreError) and error.status == 404
    assert fetch(bucket, f"aborted/{METADATA}") == committed and names(bucket, "aborted") == kept
    assert_same(load(url, state(0)), state(0))


class OddPlanner(DefaultSavePlanner):
    """A planner whose global metadata carries planner data of a type format 3 cannot express (a set)."""

    def create_global_plan(self, all_plans: Any) -> Any:
        plans, metadata = super().create_global_plan(all_plans)
        self.metadata = dataclasses.replace(metadata, planner_data={"odd": {1, 2}})
        return plans, self.metadata


def test_old_objects_go_only_after_a_commit_and_format_2_is_never_written(radosgw: Any, bucket: Any) -> None:  # noqa: F811
    """A save whose metadata needs a pickle is refused (UnsupportedMetadata) before its commit: the previous
    checkpoint and its data object stay, beside the refused save's uncommitted one; the next save's commit
    removes both."""
    url = f"s3://{bucket.bucket}/order"
    save(state(0), url)
    committed, first = fetch(bucket, f"order/{METADATA}"), data_names(bucket, "order")
    writer = Writer(url, options=SMALL)
    error = failure(lambda: dcp.save(state(1), storage_writer=writer, planner=OddPlanner(), no_dist=True))
    assert isinstance(error, UnsupportedMetadata) and "set" in str(error)
    assert fetch(bucket, f"order/{METADATA}") == committed
    orphan = data_names(bucket, "order") - first
    assert len(orphan) == 1  # the refused save's data object: uploaded, never named by a commit
    assert_same(load(url, state(0)), state(0))
    save(state(2), url)
    assert not data_names(bucket, "order") & (first | orphan) and len(data_names(bucket, "order")) == 1
    assert_same(load(url, state(2)), state(2))


# -- hostile metadata and data --------------------------------------------------------------------------------


def forged(objects: Any, prefix: str, edit: Any) -> bytes:
    """The committed metadata of `prefix`, decoded, edited by `edit(metadata)` and sealed again in format 3."""
    from ckptio.dcp.object_commit import read_committed
    from ckptio.s3.location import ObjectLocation

    metadata = read_committed(objects, ObjectLocation(objects.bucket, prefix))[0]
    metadata.storage_data = dict(metadata.storage_data.items())
    edit(metadata)
    payload = encode(metadata)
    assert payload is not None
    return seal_table(payload)


def name_records(name: str) -> Any:
    def edit(metadata: Any) -> None:
        for index, record in list(metadata.storage_data.items()):
            metadata.storage_data[index] = dataclasses.replace(record, file=name)

    return edit


def pickled(objects: Any, prefix: str) -> bytes:
    """The checkpoint's metadata as format 2 would hold it: a pickle, sealed."""
    import hashlib

    from ckptio.dcp.object_commit import read_committed
    from ckptio.s3.location import ObjectLocation

    metadata = read_committed(objects, ObjectLocation(objects.bucket, prefix))[0]
    metadata.storage_data = dict(metadata.storage_data.items())
    payload = pickle.dumps(metadata, protocol=2)
    return payload + SEAL_MAGIC + hashlib.sha256(payload).digest()


@pytest.mark.parametrize(
    "forge,error,match",
    [
        (
            lambda o, p: forged(o, p, name_records("sub/" + "a" * 32 + "-r0.data")),
            InvalidCheckpoint,
            "not one a Writer",
        ),
        (lambda o, p: forged(o, p, name_records("../" + "a" * 32 + "-r0.data")), InvalidCheckpoint, "not one a Writer"),
        (pickled, InvalidCheckpoint, "format 1 or 2"),
        (
            lambda o, p: (lambda d: d[:100] + bytes([d[100] ^ 1]) + d[101:])(fetch(o, f"{p}/{METADATA}")),
            CorruptCheckpoint,
            "SHA-256",
        ),
    ],
    ids=["slash", "dotdot", "format-2", "flipped"],
)
def test_hostile_metadata_is_refused_by_name(radosgw: Any, bucket: Any, forge: Any, error: type, match: str) -> None:  # noqa: F811
    prefix = f"hostile-{uuid.uuid4().hex[:8]}"
    url = f"s3://{bucket.bucket}/{prefix}"
    save(state(), url)
    put(bucket, f"{prefix}/{METADATA}", forge(bucket, prefix))
    found = failure(lambda: load(url, state()))
    assert isinstance(found, error) and match in str(found) and url in str(found)


@pytest.mark.parametrize(
    "damage,error",
    [("flip", CorruptCheckpoint), ("cut", TruncatedCheckpoint), ("delete", InvalidCheckpoint)],
)
def test_a_damaged_or_missing_data_object_is_refused_by_name(
    radosgw: Any,  # noqa: F811
    bucket: Any,
    damage: str,
    error: type,
) -> None:
    prefix = f"damaged-{damage}"
    url = f"s3://{bucket.bucket}/{prefix}"
    save(state(), url)
    [data] = data_names(bucket, prefix)
    key = f"{prefix}/{data}"
    good = fetch(bucket, key)
    if damage == "delete":
        bucket.delete(key)
    else:
        put(bucket, key, good[:-5000] if damage == "cut" else good[:5000] + bytes([good[5000] ^ 1]) + good[5001:])
    found = failure(lambda: load(url, state()))
    assert isinstance(found, error) and f"s3://{bucket.bucket}/{key}" in str(found)


def test_without_awscrt_an_object_location_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "awscrt" or m.startswith("awscrt.")]:
        monkeypatch.setitem(sys.modules, name, None)  # what `import awscrt.s3` meets where it is not installed
    monkeypatch.setitem(sys.modules, "awscrt", None)
    for make in (Writer, Reader):
        with pytest.raises(BackendUnavailable, match=r"pip install 'ckptio\[s3\]'"):
            make("s3://bkt/ckpt")
    assert Reader.validate_checkpoint_id("s3://bkt/ckpt") and Writer.validate_checkpoint_id("s3://bkt/ckpt")


# -- killed saves ----------------------------------------------------------------------------------------------


def _forked_save(url: str, tag: int, kill_after: float | None) -> float:
    """Start a child saving to `url` (tests.checkpoint.s3_bucket.start_save); SIGKILL it `kill_after` seconds after
    it is ready, or (None) let it finish. Returns the seconds from ready to the kill or to its end."""
    child, said = start_save(url, tag, dcp=True, mib=16)  # a multipart upload of 4 parts
    try:
        assert (ready := heard(child, said)) == "r", f"the saving child: {ready[1:]}"
        start = time.monotonic()
        if kill_after is None:
            assert (end := heard(child, said)) == "d", f"the child's save failed: {end[1:]}"
        else:
            time.sleep(kill_after)
        return time.monotonic() - start
    finally:
        child.kill()
        child.join()
        said.close()


def _committed(url: str) -> int:
    """The tag of the checkpoint at `url`, its small items loaded in one load (one commit) and checked: the first
    save's, or a child's that got through its commit (a request sent before the kill may land after it)."""
    out: dict[str, Any] = {"w": torch.zeros(1000), "tag": -1}
    dcp.load(out, storage_reader=Reader(url), no_dist=True)
    tag = int(out["tag"])
    assert torch.equal(out["w"], torch.arange(1000.0) if tag == 0 else torch.full((1000,), float(tag)))
    return tag


def _settled(bucket: Any, prefix: str, quiet: float = 1.0, most: float = 15.0) -> None:
    """Wait until the incomplete uploads under `prefix` have not changed for `quiet` seconds (a loaded store may
    still be handling what a killed child sent): the next save's start is then after every one of them."""
    seen, since, deadline = None, time.monotonic(), time.monotonic() + most
    while time.monotonic() < deadline:
        now = sorted(u.upload_id for u in bucket.uploads(prefix))
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.1)


@pytest.mark.timeout(120)
def test_killed_saves_never_show_and_the_next_commit_aborts_their_uploads(radosgw: Any, bucket: Any) -> None:  # noqa: F811
    """20 times, a child (forked from the tests' fork server) saves 16 MiB (a multipart upload) to a committed
    checkpoint's prefix and is SIGKILLed at a random moment: what loads is always one committed save, whole (the
    first one, unless a child got through its commit); then one more save commits, aborts the killed saves' uploads
    and leaves only its own objects."""
    url = f"s3://{bucket.bucket}/killed"
    save({"w": torch.arange(1000.0), "tag": 0}, url)
    seconds = _forked_save(f"{url}-timing", 99, None)  # how long a child's save takes, start to commit
    draw, torn = random.Random(33), 0
    for tag in range(1, 21):
        _forked_save(url, tag, draw.uniform(0, 0.75 * seconds))  # mostly before its commit: inside its upload
        assert _committed(url) in (0, *range(1, tag + 1))
        torn += bool(bucket.uploads("killed/"))
    assert torn, f"no kill of 20 landed inside a multipart upload (a save took {seconds:.2f} s)"
    _settled(bucket, "killed/")  # requests the children sent before their deaths reach the store first
    last = {"w": torch.arange(1000.0) + 7, "tag": 0, "big": torch.ones(BIG)}
    save(last, url)
    left = [(u.key, u.initiated) for u in bucket.uploads("killed/")]
    assert not left, f"uploads the last commit did not abort: {left}"
    found = names(bucket, "killed")
    assert len(data_names(bucket, "killed")) == 1 and found - data_names(bucket, "killed") == {METADATA}, found
    assert_same(load(url, last), last)
