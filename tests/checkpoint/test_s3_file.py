"""ckptio's single-file calls on `s3://bucket/prefix/name.ckpt` (issue 33, item 1): the object is the file a local
save writes, loads check it as they check a file, a failed save leaves the previous object, a replaced object fails
a load in progress, and hostile locations are refused by name. Against the test suite's radosgw (one bucket for the
module)."""

from __future__ import annotations

import io
import logging
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from ckptio import Checkpointer, TieredCheckpointer, load, load_into, load_mmap, save
from ckptio.backends import ReadPiece
from ckptio.errors import (
    BackendUnavailable,
    CorruptCheckpoint,
    InvalidCheckpoint,
    InvalidLocation,
    ObjectStoreError,
    OptionError,
    TruncatedCheckpoint,
    UnsupportedLocation,
)
from ckptio.inspect import read_index
from ckptio.loading import opened
from ckptio.options import IOOptions
from ckptio.s3.client import Bucket, Segments

from tests.ceph_cluster import ceph_cluster, radosgw  # noqa: F401  (fixtures)
from tests.checkpoint.conftest import assert_same, random_tensor
from tests.checkpoint.s3_bucket import killed_mid_upload, own_bucket


def state() -> dict[str, Any]:
    """Several dtypes (bf16 included), a non-contiguous view, a shared storage, plain values."""
    base = random_tensor((48, 40), torch.float32, seed=1)
    return {
        "w": random_tensor((300, 257), torch.float32, seed=2),
        "bf": random_tensor((129, 3), torch.bfloat16, seed=3),
        "i": torch.arange(1000, dtype=torch.int64),
        "h": random_tensor((7,), torch.float16, seed=4),
        "view": base.t()[::2],
        "again": base,
        "step": 41,
        "lrs": [0.5, "cosine"],
    }


def zeros_like(sd: dict[str, Any]) -> dict[str, Any]:
    """A destination of the same shapes (the view's storage a separate, contiguous tensor)."""
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in sd.items()} | {"lrs": [0, ""]}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit (random bits hold NaNs, which torch.equal calls different)."""
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@pytest.fixture(scope="module")
def bucket(ceph_cluster: Any) -> Iterator[str]:  # noqa: F811
    """A bucket of this module's own in the test cluster's radosgw."""
    with own_bucket(ceph_cluster, "ckptio-file") as name:
        yield name


def fetch(bucket: str, key: str) -> bytes:
    """The whole object."""
    client = Bucket(bucket)
    into = memoryview(bytearray(client.head(key).size))  # type: ignore[union-attr]
    return bytes(into[: client.get(key, 0, into)])


def put(bucket: str, key: str, data: bytes) -> None:
    """Replace an object by `data` (as another writer would)."""
    Bucket(bucket).put(key, Segments([(0, memoryview(data))], len(data)), len(data))


@pytest.mark.usefixtures("radosgw")
def test_save_load_and_load_into_round_trip_exactly(bucket: str) -> None:
    url, sd = f"s3://{bucket}/run/a.ckpt", state()
    save(sd, url)
    back = load(url)
    assert_same(back, sd)
    assert back["view"].untyped_storage().data_ptr() == back["again"].untyped_storage().data_ptr()
    dest = zeros_like(sd)
    assert load_into(url, dest) is dest
    assert all(same_bits(dest[k], sd[k]) for k in ("w", "bf", "i", "h", "view", "again"))
    assert dest["step"] == 41 and dest["lrs"] == [0.5, "cosine"]
    with Checkpointer(url) as ckpt:
        saved = ckpt.save({**sd, "step": 42})
        assert (saved.path, saved.recycled) == (url, False) and ckpt.load()["step"] == 42
        assert ckpt.load_into(zeros_like(sd))["step"] == 42


@pytest.mark.usefixtures("radosgw")
def test_an_object_past_the_read_ahead_loads_exactly(bucket: str) -> None:
    """Records whose zip headers lie beyond the first 256 KiB and the last 1 MiB (read apart, in parallel)."""
    sd = {f"t{i}": random_tensor((1 << 17,) if i % 2 else (9,), torch.float32, seed=i) for i in range(16)}
    save(sd, f"s3://{bucket}/wide.ckpt")
    assert_same(load(f"s3://{bucket}/wide.ckpt"), sd)


def parts_of(bucket: str, key: str) -> int:
    """How many parts the object was uploaded in (a multipart upload's ETag ends in -<parts>; 1 for one PUT)."""
    etag = Bucket(bucket).head(key).etag.strip('"')  # type: ignore[union-attr]
    return int(etag.rpartition("-")[2]) if "-" in etag else 1


@pytest.mark.usefixtures("radosgw")
def test_part_bytes_sets_the_upload_parts_and_a_load_in_small_parts_is_exact(bucket: str, tmp_path: Any) -> None:
    """A 12 MiB save goes up in parts of IOOptions.part_bytes (3 of 5 MiB, 2 of 8 MiB), as a tier's drain does;
    a load whose GETs are split into 5 MiB ranges, one in flight at a time, reads it back exactly."""
    sd = {"w": random_tensor((3 << 20,), torch.float32, seed=5), "step": 7}
    five, url = IOOptions(part_bytes=5 << 20, object_connections=1), f"s3://{bucket}/parts.ckpt"
    save(sd, url, options=five)
    assert parts_of(bucket, "parts.ckpt") == 3
    assert_same(load(url, options=five), sd)
    save(sd, url, options=IOOptions(part_bytes=8 << 20))
    assert parts_of(bucket, "parts.ckpt") == 2
    with TieredCheckpointer([tmp_path, f"s3://{bucket}/tiered"], options=five) as ckpt:
        saved = ckpt.save(sd, 1)
        assert saved.wait() and not saved.errors
    assert parts_of(bucket, "tiered/step-000000000001.ckpt") == 3


@pytest.mark.usefixtures("radosgw")
def test_the_object_is_the_file_a_local_save_writes_and_torch_loads_it(bucket: str, tmp_path: Any) -> None:
    sd = state()
    save(sd, f"s3://{bucket}/b.ckpt")
    save(sd, tmp_path / "b.ckpt")
    data = fetch(bucket, "b.ckpt")
    assert data == (tmp_path / "b.ckpt").read_bytes()
    assert_same(torch.load(io.BytesIO(data), weights_only=True), sd)


@pytest.mark.usefixtures("radosgw")
def test_a_flipped_byte_cut_object_or_foreign_object_is_refused_by_name(bucket: str, tmp_path: Any) -> None:
    sd, url = state(), f"s3://{bucket}/c.ckpt"
    save(sd, tmp_path / "c.ckpt")
    good = (tmp_path / "c.ckpt").read_bytes()
    at = next(s for s in read_index(tmp_path / "c.ckpt").storages if s.name == "bf").offset + 100
    put(bucket, "c.ckpt", good[:at] + bytes([good[at] ^ 1]) + good[at + 1 :])
    for call in (lambda: load(url), lambda: load_into(url, zeros_like(sd))):
        with pytest.raises(CorruptCheckpoint, match="bf") as info:
            call()
        assert info.value.path == url
    put(bucket, "c.ckpt", good[: len(good) - 5000])
    with pytest.raises(TruncatedCheckpoint):
        load(url)
    for foreign in (os.urandom(10000), b""):
        put(bucket, "c.ckpt", foreign)
        with pytest.raises(InvalidCheckpoint):
            load(url)


@pytest.mark.usefixtures("radosgw")
def test_a_missing_object_is_named_with_http_404(bucket: str) -> None:
    url = f"s3://{bucket}/nothing/here.ckpt"
    for call in (lambda: load(url), lambda: load_into(url, {"w": torch.zeros(1)}), lambda: Checkpointer(url).load()):
        with pytest.raises(ObjectStoreError, match=r"here\.ckpt") as info:
            call()
        assert info.value.status == 404


@pytest.mark.usefixtures("radosgw")
def test_a_failed_save_leaves_the_previous_object(bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url, sd = f"s3://{bucket}/d.ckpt", state()
    save(sd, url)
    before = fetch(bucket, "d.ckpt")
    with pytest.raises(ObjectStoreError) as missing:
        save(sd, f"s3://{bucket}-gone/d.ckpt")
    assert missing.value.status == 404
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(ObjectStoreError) as refused:
        save({"w": torch.ones(1 << 20)}, url)  # 4 MiB, uploaded in one PUT; refused
    assert refused.value.status == 403 and "not-the-secret" not in str(refused.value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    assert fetch(bucket, "d.ckpt") == before
    assert_same(load(url), sd)


@pytest.mark.usefixtures("radosgw")
def test_a_killed_save_leaves_the_object_and_the_next_save_aborts_its_upload(bucket: str) -> None:
    url, key, sd = f"s3://{bucket}/killed/k.ckpt", "killed/k.ckpt", state()
    save(sd, url)
    before = fetch(bucket, key)
    killed_mid_upload(url, bucket, key)
    client = Bucket(bucket)
    assert [u.key for u in client.uploads("killed/")] == [key]  # the killed save's, left behind
    assert fetch(bucket, key) == before
    assert_same(load(url), sd)
    save({**sd, "step": 42}, url)
    assert client.uploads("killed/") == [] and load(url)["step"] == 42


def test_uploads_that_cannot_be_listed_or_aborted_are_a_warning_not_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("awscrt")
    from ckptio.s3.client import Upload
    from ckptio.s3.stale import abort_earlier, earlier_uploads

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
        client = Bucket("nowhere")
        with caplog.at_level(logging.WARNING, logger="ckptio"):
            assert earlier_uploads(client, "k.ckpt", "k.ckpt".__eq__) == []
            abort_earlier(client, [Upload("k.ckpt", "id", None)])
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and all("s3://nowhere/k.ckpt" in m and "no answer" in m for m in said), said


@pytest.mark.usefixtures("radosgw")
def test_an_object_replaced_during_a_load_fails_it_with_http_412(bucket: str) -> None:
    url = f"s3://{bucket}/e.ckpt"
    save({"w": torch.ones(1 << 20)}, url)
    with pytest.raises(ObjectStoreError, match="replaced during the load") as info, opened(url, IOOptions()) as source:
        save({"w": torch.zeros(1 << 20)}, url)
        entry = source.index.storages[0]
        into = torch.empty(entry.nbytes, dtype=torch.uint8)
        reader = source.reader(IOOptions(), None, "s3")
        reader.read([ReadPiece(entry.offset, entry.nbytes, entry.nbytes, into.data_ptr(), None)])
    assert info.value.status == 412
    assert torch.equal(load(url)["w"], torch.zeros(1 << 20))


@pytest.mark.parametrize(
    "url,error",
    [
        ("s3://Bad_Bucket/x.ckpt", InvalidLocation),
        ("s3://bkt/a/../x.ckpt", InvalidLocation),
        ("s3://AKIAEXAMPLE:sekrit@bkt/x.ckpt", InvalidLocation),
        ("s3://bkt:9000/x.ckpt", InvalidLocation),
        ("s3://bkt", InvalidLocation),  # a bucket, not an object
        ("gs://bkt/x.ckpt", UnsupportedLocation),
        ("gs://user:sekrit@bkt/x.ckpt", UnsupportedLocation),
    ],
)
def test_hostile_locations_are_refused_before_any_request(url: str, error: type[Exception]) -> None:
    calls = {
        "save": lambda: save({"w": torch.ones(2)}, url),
        "load": lambda: load(url),
        "load_into": lambda: load_into(url, {"w": torch.ones(2)}),
        "Checkpointer": lambda: Checkpointer(url),
    }
    for name, call in calls.items():
        with pytest.raises(error) as info:
            call()
        assert "sekrit" not in str(info.value) and "sekrit" not in repr(info.value), name


def test_calls_that_need_a_file_refuse_an_object() -> None:
    url = "s3://bkt/x.ckpt"
    with pytest.raises(UnsupportedLocation):
        load_mmap(url)
    with pytest.raises(UnsupportedLocation):
        Checkpointer(url).load_mmap()
    with pytest.raises(OptionError, match="recycle"):
        Checkpointer(url, recycle=True)


def test_without_awscrt_an_object_location_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "awscrt" or m.startswith("awscrt.")]:
        monkeypatch.setitem(sys.modules, name, None)  # what `import awscrt.s3` meets where it is not installed
    monkeypatch.setitem(sys.modules, "awscrt", None)
    for call in (lambda: save({"w": torch.ones(2)}, "s3://bkt/x.ckpt"), lambda: load("s3://bkt/x.ckpt")):
        with pytest.raises(BackendUnavailable, match=r"pip install 'ckptio\[s3\]'"):
            call()


@pytest.mark.usefixtures("radosgw")
def test_a_missing_bucket_fails_a_save_alone_and_create_bucket_makes_it(
    bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A ckptio-only user has a way to make the bucket (issue 43), and NoSuchBucket comes alone: no second line
    about incomplete uploads not listed. create_bucket is idempotent for the bucket's owner."""
    import logging
    import uuid

    from ckptio.errors import OptionError
    from ckptio.s3 import create_bucket
    from ckptio.s3.client import Bucket

    fresh = f"{bucket}-made-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.WARNING, logger="ckptio"), pytest.raises(ObjectStoreError) as missing:
        save(state(), f"s3://{fresh}/c.ckpt")
    assert missing.value.status == 404 and "NoSuchBucket" in str(missing.value)
    assert not [r for r in caplog.records if "not listed" in r.getMessage()]
    assert create_bucket(f"s3://{fresh}/run1") is True and create_bucket(f"s3://{fresh}") is False
    try:
        save(state(), f"s3://{fresh}/run1/c.ckpt")
        assert same_bits(load(f"s3://{fresh}/run1/c.ckpt")["w"], state()["w"])
    finally:
        made = Bucket(fresh)
        for stored in made.listing(""):
            made.delete(stored.key)
        made._wait("DeleteBucket", "", made._start("DeleteBucket", "DELETE", ""))
    with pytest.raises(OptionError, match="create_bucket takes an s3://bucket location"):
        create_bucket("/local/folder")
