"""A broken or hostile object store cannot hang ckptio or make it storm (issue 44, part 1): against a real server
on 127.0.0.1 that never answers, trickles a body, answers 503 SlowDown to everything, or sends truncated,
oversized, endlessly paged or entity-laden listings, every s3:// path (save, load, the DCP Writer and Reader,
a TieredCheckpointer's drain and restore) ends within its documented limit (IOOptions.request_seconds,
operation_seconds) in a named CheckpointError that says which request failed and why, having sent no more
requests than its retry budget allows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from ckptio import IOOptions, TieredCheckpointer, Writer, load, save
from ckptio.errors import CheckpointError, NoCheckpoint, NotDurable, ObjectStoreError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.checkpoint.hostile_s3 import LISTING_HEAD, Hostile, hostile

pytest.importorskip("awscrt", reason="s3:// locations need ckptio[s3]")
pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::UserWarning")]
REQUEST_S = 2
#: Tight limits so that each misbehaviour is measured in seconds: a request 2 s, an operation 6 s, 2 retries.
OPTIONS = IOOptions(request_seconds=REQUEST_S, operation_seconds=6, object_retries=2, part_bytes=5 << 20)
STATE = {"w": torch.arange(1 << 16, dtype=torch.float32)}
SLACK_S = 4.0  # the CRT's cancel and our own start-up
LISTING = LISTING_HEAD
#: Pieces of real listings, shuffled and cut by hypothesis into pages a store could send.
XML_BITS = st.lists(
    st.sampled_from(
        [
            b"<Contents>",
            b"</Contents>",
            b"<Key>k</Key>",
            b"<Key></Key>",
            b"<Size>12</Size>",
            b"<Size>-1</Size>",
            b"<Size>x</Size>",
            b"<ETag>e</ETag>",
            b"<LastModified>2026-13-99</LastModified>",
            b"<IsTruncated>true</IsTruncated>",
            b"<NextContinuationToken>t</NextContinuationToken>",
            b"</ListBucketResult>",
            b"&amp;",
            b"&bogus;",
            b"\x00",
        ]
    ),
    max_size=30,
).map(b"".join)


@pytest.fixture
def store(request: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hostile]:
    with hostile(request.param) as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        yield server


def timed(call: Any) -> tuple[BaseException, float]:
    """The error `call` raised and the seconds it took (it must raise)."""
    started = time.monotonic()
    with pytest.raises(BaseException) as caught:
        call()
    return caught.value, time.monotonic() - started


@pytest.mark.parametrize("store", ["stall", "slow_body"], indirect=True)
@pytest.mark.parametrize("call", ["save", "load"])
def test_a_store_that_never_finishes_an_answer_ends_the_call_within_its_limits(store: Hostile, call: str) -> None:
    url = "s3://bucket/run/c.ckpt"
    do = (lambda: save(STATE, url, options=OPTIONS)) if call == "save" else (lambda: load(url, options=OPTIONS))
    error, seconds = timed(do)
    assert isinstance(error, ObjectStoreError), repr(error)
    assert seconds < OPTIONS.operation_seconds + SLACK_S, seconds
    assert "cancelled" in str(error) and "IOOptions." in str(error), str(error)


@pytest.mark.parametrize("store", ["storm_503"], indirect=True)
def test_a_503_storm_is_retried_within_the_budget_then_named(store: Hostile) -> None:
    """Every request answered 503 SlowDown: a load's first request (HEAD) is tried 1 + object_retries times, with
    back-off, then fails naming the status, the code and the tries; nothing more is sent."""
    error, seconds = timed(lambda: load("s3://bucket/run/c.ckpt", options=OPTIONS))
    assert isinstance(error, ObjectStoreError) and error.status == 503, repr(error)
    assert "HeadObject" in str(error) and "after up to 3 tries" in str(error), str(error)
    assert len(store.requests) <= 1 + OPTIONS.object_retries, store.requests
    assert seconds < OPTIONS.operation_seconds + SLACK_S


@pytest.mark.parametrize("store", ["storm_503"], indirect=True)
def test_a_503_storm_during_a_save_sends_no_more_than_each_requests_retries(store: Hostile) -> None:
    """A save of two parts: the listing of earlier uploads fails after its tries (a warning: the save goes on), the
    upload's first request fails after its own, and the save fails naming it: each request tried 1 + object_retries
    times, no part sent."""
    error, _ = timed(lambda: save({"w": torch.zeros(3 << 20)}, "s3://bucket/run/c.ckpt", options=OPTIONS))
    assert isinstance(error, ObjectStoreError) and error.status == 503, repr(error)
    assert "PutObject" in str(error) and "after up to 3 tries" in str(error), str(error)
    tries = 1 + OPTIONS.object_retries
    assert (
        store.requests
        == ["GET /bucket?uploads=&prefix=run%2Fc.ckpt"] * tries + ["POST /bucket/run/c.ckpt?uploads"] * tries
    )


@pytest.mark.parametrize(
    ("store", "said"),
    [
        ("truncated_xml", "not an XML answer"),
        ("oversized_xml", "an answer of"),
        ("paging_forever", "page token repeats"),
        ("entities", "DOCTYPE or entities: refused unparsed"),
    ],
    indirect=["store"],
)
def test_a_malformed_listing_is_a_named_error_and_a_restore_skips_the_tier_naming_it(store: Hostile, said: str) -> None:
    """What the DCP Reader and a tier list through (the client's listing): a bad page is an ObjectStoreError after
    a bounded number of requests, never a raw traceback, a page loop or an expanded entity; a restore skips the
    tier naming it."""
    from ckptio.s3.client import Bucket

    with pytest.raises(ObjectStoreError, match=said):
        Bucket("bucket", retries=OPTIONS.object_retries, request_seconds=REQUEST_S).listing("dcp/")
    assert 1 <= len(store.requests) <= 2, store.requests  # a repeated page token: the second page is the last
    with TieredCheckpointer(["/nonexistent-ckptio-tier", "s3://bucket/tiers"], options=OPTIONS) as ckpt:
        error, seconds = timed(ckpt.load)
    assert isinstance(error, NoCheckpoint) and said in str(error), str(error)
    assert seconds < OPTIONS.operation_seconds + SLACK_S


@given(st.binary(max_size=2000) | st.builds(lambda a, b: LISTING + a + b, st.binary(max_size=500), XML_BITS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_listing_page_parses_to_entries_or_a_named_error(data: bytes) -> None:
    from ckptio.s3.client import parse_listing, parse_xml

    try:
        entries, token = parse_listing(parse_xml(data, "s3://bucket/", "ListObjectsV2"))
    except ObjectStoreError:
        return
    assert all(isinstance(e.key, str) and e.key and isinstance(e.size, int) and e.size >= 0 for e in entries)
    assert token is None or (isinstance(token, str) and token)


@pytest.mark.parametrize("store", ["stall"], indirect=True)
def test_a_dcp_save_and_a_tier_drain_to_a_stalled_store_end_within_their_limits(store: Hostile, tmp_path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    started = time.monotonic()
    with pytest.raises(CheckpointException) as caught:
        dcp.save({"w": torch.zeros(1024)}, storage_writer=Writer("s3://bucket/dcp", options=OPTIONS))
    assert "cancelled" in str(caught.value)
    assert time.monotonic() - started < 2 * (OPTIONS.operation_seconds + SLACK_S)
    lost = pytest.raises(
        NotDurable, match=r"step 1, the newest save, is not durable in the farthest tier: tier 1 .*cancelled"
    )
    with lost, TieredCheckpointer([tmp_path / "t0", "s3://bucket/tiers"], options=OPTIONS) as ckpt:
        record = ckpt.save(STATE, 1)
        assert record.wait(timeout=OPTIONS.operation_seconds + SLACK_S, tier=1)
        assert "cancelled" in record.errors[1], record
        assert record.durable_seconds.keys() == {0}  # and the exit says the step lives only locally


def test_the_limits_are_options_with_documented_defaults_and_bad_values_are_refused() -> None:
    defaults = IOOptions()
    assert (defaults.request_seconds, defaults.object_retries, defaults.operation_seconds) == (120, 2, 3600)
    for bad in ({"request_seconds": 0}, {"object_retries": 11}, {"object_retries": -1}, {"operation_seconds": 0}):
        with pytest.raises(CheckpointError, match=rf"IOOptions\.{next(iter(bad))} must be"):
            IOOptions(**bad)
