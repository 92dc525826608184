"""The s3 engine (issue 21, part 2): PUT and GET of whole objects through the AWS CRT, every request timed, the
first apart, failures named and never retried, reads of objects never written written first, writes checked
against what the store holds, only what a sweep created removed. Against the one-host cluster's radosgw
(tests/ceph_cluster.py), real daemons; parsing against radosgw's own responses (tests/data/s3)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("awscrt", reason="the s3 engine's client is not installed: pip install 'gdsbench[s3]'")
from awscrt.s3 import S3ResponseError
from hypothesis import given
from hypothesis import strategies as st

from gdsbench import config as config_module
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.errors import ConfigError, ToolError
from gdsbench.runners import ceph, s3, s3_client, s3_requests
from gdsbench.runners.base import RunContext
from gdsbench.runners.s3_requests import Request
from tests.ceph_cluster import bucket_marker, garbage_of

MiB = 1 << 20
DATA = Path(__file__).parent / "data" / "s3"


def s3_case(**params: Any) -> Case:
    base = {
        "pattern": Pattern.WRITE,
        "transfer": Transfer.CPU_ONLY,
        "io_size": MiB,
        "threads": 2,
        "endpoint": None,
        "bucket": "gdsbench-test",
        "prefix": "gdsbench",
        "region": "us-east-1",
        "part_size": 16 * MiB,
        "rgw_gc": False,
    }
    base.update(params)
    if base["pattern"] is Pattern.READ:
        base.setdefault("osd_cache", "keep")
    return Case("s3", tuple(base.items()))


# -- what needs no service ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ab", "a", "Gdsbench", "my_bucket", "-abc", "abc-", "a..b", "192.168.1.1", "x" * 64])
def test_bucket_names_s3_refuses_are_refused_in_the_config(name: str, tmp_path: Path) -> None:
    """Pitfall 8: radosgw refuses names under 3 characters (InvalidBucketName) only once the sweep runs."""
    path = tmp_path / "s3.yaml"
    path.write_text(f"matrix:\n  engine: [s3]\n  pattern: [write]\n  bucket: ['{name}']\n")
    with pytest.raises(ConfigError, match=r"bucket.*S3 bucket name \(3-63 lowercase"):
        config_module.load(path)


@given(st.from_regex(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]", fullmatch=True))
def test_plain_bucket_names_are_taken(name: str) -> None:
    assert s3_client.bucket_name(name) == name


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://host", "not an http"),
        ("http://user:secret@host:80", "credentials"),
        ("http://host/bucket", "path"),
        ("http://host:99999", "out of range"),
        ("127.0.0.1:7480", "not an http"),
        (7480, "not a string"),
    ],
)
def test_endpoints_are_a_scheme_and_a_host_without_credentials(url: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        s3_client.endpoint_url(url)
    assert s3_client.endpoint_url(" https://s3.example.com:9000/ ") == "https://s3.example.com:9000"


def test_a_listing_is_read_page_by_page_from_radosgws_own_responses() -> None:
    first = s3_client._listing((DATA / "radosgw-16.2.15-list-page1.xml").read_bytes(), 744)
    assert first.sizes == {"g/1-1/0.0": 12, "g/1-1/0.1": 12} and first.next_token == "g/1-1/0.1"
    last = s3_client._listing((DATA / "radosgw-16.2.15-list-page2.xml").read_bytes(), 515)
    assert last.sizes == {"g/1-1/1.0": 12} and last.next_token is None


@pytest.mark.parametrize(
    "document",
    [
        b"<html>proxy error</html>",
        b"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
        b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
        b"not xml",
    ],
)
def test_a_response_that_is_not_a_listing_is_an_error(document: bytes) -> None:
    with pytest.raises(s3_client.S3RequestError, match="ListObjectsV2"):
        s3_client._listing(document, len(document))


def test_a_failed_request_says_its_status_and_s3_code() -> None:
    body = (DATA / "radosgw-16.2.15-nosuchkey.xml").read_bytes()
    error = S3ResponseError(
        code=14343,
        name="AWS_ERROR_S3_INVALID_RESPONSE_STATUS",
        message="Invalid response status",
        status_code=404,
        headers=[],
        body=body,
    )
    assert s3_client._reason(error) == "HTTP 404 NoSuchKey"


def timed(*seconds: float, slot: int = 0, error: str | None = None) -> list[Request]:
    return [Request(slot, f"k{i}", start=float(i), seconds=s, bytes=MiB, error=error) for i, s in enumerate(seconds)]


def test_the_first_request_is_kept_apart_from_the_percentiles() -> None:
    """Pitfall 7: the first request (a new connection) is `lat_first_us`; percentiles by nearest rank, as fio."""
    requests = timed(0.030, *([0.010] * 198), 0.020)
    measured = s3_requests.measure(requests, wall=200.0)
    assert measured.figures["lat_first_us"] == pytest.approx(30_000)
    assert measured.lat_p50_us == pytest.approx(10_000) and measured.lat_p99_us == pytest.approx(10_000)
    assert measured.lat_p999_us == pytest.approx(20_000)
    assert measured.bytes == 200 * MiB and measured.bw_bytes == pytest.approx(MiB) and measured.iops == 1.0
    assert measured.raw is not None and len(measured.raw.splitlines()) == 201


def test_requests_within_ramp_time_are_left_out_but_the_first_is_still_reported() -> None:
    requests = timed(0.5, *([0.1] * 9))  # request i starts at i seconds
    kept, wall = s3_requests.after_ramp(requests, 10.0, ramp=4.0)
    assert [r.start for r in kept] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0] and wall == 6.0
    measured = s3_requests.measure(kept, wall, first=requests[0])
    assert measured.figures["lat_first_us"] == pytest.approx(500_000) and measured.bytes == 6 * MiB
    assert measured.lat_p999_us == pytest.approx(100_000)
    with pytest.raises(ToolError, match="no request started after ramp_time 12s"):
        s3_requests.after_ramp(requests, 10.0, ramp=12.0)


def test_the_time_series_is_each_slots_bytes_and_latency_per_window() -> None:
    requests = [
        *timed(0.5, 0.5, 0.5),
        Request(1, "b", start=0.0, seconds=2.5, bytes=2 * MiB),
    ]  # slot 0 ends 0.5, 1.5, 2.5
    samples = s3_requests.series(requests, window_s=1.0)
    assert [(s.job, s.time_s, s.bw_bytes, s.lat_us) for s in samples] == [
        (1, 1.0, MiB, 500_000),
        (1, 2.0, MiB, 500_000),
        (1, 3.0, MiB, 500_000),
        (2, 3.0, 2 * MiB, 2_500_000),
    ]


def test_slots_give_the_bandwidth_range_and_the_spread() -> None:
    requests = [*timed(1.0, 1.0, slot=0), Request(1, "b", start=0.0, seconds=4.0, bytes=MiB)]
    measured = s3_requests.measure(requests, wall=4.0)
    figures = measured.figures
    assert figures["bw_min_bytes"] == MiB / 4 and figures["bw_max_bytes"] == pytest.approx(2 * MiB / 2)
    assert figures["seconds_min"] == 2.0 and figures["spread_seconds"] == 2.0


def test_failed_requests_are_counted_by_reason_and_the_first_named() -> None:
    requests = [
        *timed(0.1, 0.1),
        *timed(0.1, error="PutObject b/gdsbench/1.0: HTTP 503 SlowDown", slot=1),
        Request(2, "x", 0.5, 0.1, 0, "PutObject b/gdsbench/2.0: HTTP 503 SlowDown"),
    ]
    with pytest.raises(
        ToolError,
        match=r"2 of 4 S3 requests failed, none retried \(2x PutObject HTTP 503 SlowDown\); "
        r"first: PutObject b/gdsbench/1.0: HTTP 503 SlowDown",
    ):
        s3_requests.failures(requests)
    s3_requests.failures(timed(0.1))


def test_every_object_gets_a_body_of_its_own() -> None:
    bodies = {bytes(s3_requests.body(4096, index)[:64]) for index in range(256)}
    assert len(bodies) == 256 and all(len(s3_requests.body(4096, i)) == 4096 for i in (0, 255, 10_000))


def test_without_an_endpoint_or_credentials_a_case_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*s3.ENDPOINT_ENV, *s3.CREDENTIALS_ENV):
        monkeypatch.delenv(name, raising=False)
    ctx = RunContext(directory=tmp_path, file_size=MiB)
    runner = s3.S3Runner()
    assert runner.unavailable(s3_case(), ctx) == "no S3 endpoint: set `endpoint` or AWS_ENDPOINT_URL"
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert runner.unavailable(s3_case(), ctx) == (
        "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (never in a config)"
    )
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert runner.unavailable(s3_case(), ctx) is None
    assert "CPU_ONLY" in str(runner.unavailable(s3_case(transfer=Transfer.CPU_CACHED), ctx))
    tiny = s3_case(io_size=4096)
    assert "more than 10000" in str(runner.unavailable(tiny, RunContext(directory=tmp_path, file_size=1 << 30)))
    argv = runner.command(s3_case(), RunContext(directory=tmp_path, file_size=3 * MiB))
    assert argv[2:5] == ["http://127.0.0.1:9/gdsbench-test/gdsbench/3145728-1048576/", "slots=2", "objects_per_slot=3"]
    assert not any(word.rpartition("=")[2] == "s" for word in argv)  # no secret in the command


# -- against the one-host cluster's radosgw ---------------------------------------------------------------


def run(case: Case, ctx: RunContext) -> Any:
    runner = s3.S3Runner()
    assert runner.unavailable(case, ctx) is None
    return runner.run(case, ctx)


def bucket(name: str) -> s3_client.Bucket:
    return s3_client.Bucket(os.environ["AWS_ENDPOINT_URL"], name, "us-east-1", 16 * MiB)


@pytest.mark.slow
def test_a_write_then_a_read_move_real_bytes_and_leave_nothing(radosgw: Any, tmp_path: Path) -> None:
    ctx = RunContext(directory=tmp_path, file_size=3 * MiB)
    case = s3_case(bucket="gdsbench-t1")
    assert not bucket("gdsbench-t1").exists()
    write = run(case, ctx)
    keys = [k for slot in s3.object_keys(case, ctx) for k in slot]
    assert write.bytes == 6 * MiB and write.figures["lat_first_us"] and write.lat_p50_us and write.cache is None
    assert bucket("gdsbench-t1").sizes("gdsbench/") == dict.fromkeys(keys, MiB)
    assert write.raw is not None and len(write.raw.splitlines()) == 1 + 6
    assert write.figures["requests"] == 6  # a column the engine declares (S3Runner.columns)
    read = run(s3_case(bucket="gdsbench-t1", pattern=Pattern.READ, io_size=MiB, threads=1), ctx)
    assert read.bytes == 3 * MiB and "written first" not in (read.note or "") and read.cache is None
    assert read.row()["requests"] == 3
    ctx.resources.cleanup()
    assert not bucket("gdsbench-t1").exists()  # its objects, then the bucket it made


@pytest.mark.slow
def test_a_read_of_objects_never_written_writes_them_first(radosgw: Any, tmp_path: Path) -> None:
    ctx = RunContext(directory=tmp_path, file_size=2 * MiB)
    case = s3_case(bucket="gdsbench-t2", pattern=Pattern.READ, threads=1)
    read = run(case, ctx)
    assert read.bytes == 2 * MiB and "2 of 2 objects written first (unmeasured)" in (read.note or "")
    ctx.resources.cleanup()
    assert not bucket("gdsbench-t2").exists()


@pytest.mark.slow
def test_objects_and_buckets_a_sweep_did_not_create_are_never_removed(radosgw: Any, tmp_path: Path) -> None:
    theirs = bucket("gdsbench-t3")
    theirs.create()
    ctx = RunContext(directory=tmp_path, file_size=2 * MiB)
    case = s3_case(bucket="gdsbench-t3", threads=1)
    first, _ = s3.object_keys(case, ctx)[0]
    theirs.put(first, memoryview(b"someone's"))
    try:
        run(case, ctx)
        ctx.resources.cleanup()
        assert theirs.sizes("gdsbench/") == {first: MiB}  # overwritten by the case, kept: it was someone's
    finally:
        theirs.delete(first)
        theirs.remove()


@pytest.fixture
def quota_user(radosgw: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An S3 user of the test cluster allowed 2 objects, its credentials in the environment (removed after)."""
    uid, conf = f"gdsbench-quota-{os.getpid()}", str(radosgw.conf)
    admin = ["radosgw-admin", "-c", conf]
    key, secret = f"QUOTA{os.getpid()}", "quota-secret"
    subprocess.run(
        [
            *admin,
            "user",
            "create",
            f"--uid={uid}",
            "--display-name=quota",
            f"--access-key={key}",
            f"--secret-key={secret}",
        ],
        check=True,
        capture_output=True,
    )
    for step in ("set", "enable"):
        extra = ["--max-objects=2"] if step == "set" else []
        subprocess.run([*admin, "quota", step, "--quota-scope=user", f"--uid={uid}", *extra], check=True)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    yield uid
    subprocess.run([*admin, "user", "rm", f"--uid={uid}", "--purge-data"], check=True, capture_output=True)


@pytest.mark.slow
def test_a_request_the_service_refuses_fails_the_case_naming_it(quota_user: str, tmp_path: Path) -> None:
    """The third PUT exceeds the user's quota: the slot stops there, nothing is retried, the row says why."""
    ctx = RunContext(directory=tmp_path, file_size=4 * MiB)
    with pytest.raises(
        ToolError,
        match=r"^1 of 3 S3 requests failed, none retried \(1x PutObject HTTP 403 "
        r"QuotaExceeded\); first: PutObject gdsbench-t4/gdsbench/4194304-1048576/0.2: HTTP 403",
    ):
        run(s3_case(bucket="gdsbench-t4", threads=1), ctx)
    ctx.resources.cleanup()
    assert not bucket("gdsbench-t4").exists()


@pytest.mark.slow
def test_wrong_credentials_or_no_service_fail_the_case_naming_why(
    radosgw: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = RunContext(directory=tmp_path, file_size=4 * MiB)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(ToolError, match=r"^HeadBucket gdsbench-t7/: HTTP 403$"):
        run(s3_case(bucket="gdsbench-t7"), ctx)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # discard: nothing listens
    with pytest.raises(ToolError, match=r"^HeadBucket gdsbench-t7/: AWS_IO_SOCKET_CONNECTION_REFUSED"):
        run(s3_case(bucket="gdsbench-t7"), ctx)


@pytest.mark.slow
def test_objects_the_store_did_not_keep_whole_fail_the_write(radosgw: Any, tmp_path: Path) -> None:
    ctx = RunContext(directory=tmp_path, file_size=MiB)
    case = s3_case(bucket="gdsbench-t5", threads=1)
    run(case, ctx)
    [[key]] = s3.object_keys(case, ctx)
    store = bucket("gdsbench-t5")
    store.put(key, memoryview(b"short"))
    with pytest.raises(
        ToolError,
        match=rf"1 of 1 objects written do not hold 1048576 bytes in the store \(first: "
        rf"{key}, 5\)",
    ):
        s3._check_stored(store, case, ctx, {key})
    ctx.resources.cleanup()
    assert not store.exists()


@pytest.mark.slow
def test_garbage_is_collected_and_caches_dropped_on_the_tests_own_cluster(radosgw: Any, tmp_path: Path) -> None:
    """rgw_gc leaves no garbage behind (radosgw keeps deleted data 2 h otherwise: pitfall 5); osd_cache drop
    makes a cold read. Both act on the cluster of /etc/ceph/ceph.conf: only where that is this run's."""
    conf = ceph.CONF
    if not (conf.is_symlink() and os.readlink(conf) == str(radosgw.conf)):
        pytest.skip(f"{conf} is not this test run's cluster: its garbage and caches are not ours")
    ctx = RunContext(directory=tmp_path, file_size=8 * MiB)
    write = run(s3_case(bucket="gdsbench-t6", io_size=8 * MiB, rgw_gc=True), ctx)
    assert "garbage collected" in (write.note or "")
    read = run(s3_case(bucket="gdsbench-t6", io_size=8 * MiB, rgw_gc=True, pattern=Pattern.READ, osd_cache="drop"), ctx)
    assert read.cache == "cold"
    marker = bucket_marker(conf, "gdsbench-t6")
    ctx.resources.cleanup()
    assert garbage_of(conf, marker) == [] and not bucket("gdsbench-t6").exists()


def test_gc_and_cache_drops_refuse_a_conf_of_another_clusters_radosgw(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rgw_gc and osd_cache drop act on the cluster of /etc/ceph/ceph.conf: never on one whose radosgw is not the
    case's endpoint (a test cluster's link while another cluster is measured)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    other = tmp_path / "ceph.conf"
    other.write_text("[client.rgw.a]\nrgw frontends = beast endpoint=127.0.0.1:7480\nrgw data = /x\n")
    monkeypatch.setattr(ceph, "CONF", other)
    ctx, runner = RunContext(directory=tmp_path, file_size=MiB), s3.S3Runner()
    elsewhere = s3_case(endpoint="http://127.0.0.1:9", rgw_gc=True)
    if runner.unavailable(s3_case(endpoint="http://127.0.0.1:7480", rgw_gc=True), ctx) is not None:
        pytest.skip("no radosgw-admin here")
    assert runner.unavailable(elsewhere, ctx) == (
        f"{other} is the conf of a cluster whose radosgw is 127.0.0.1:7480, not this case's endpoint 127.0.0.1:9: "
        "rgw_gc and dropping OSD caches would act on that cluster"
    )
    cold = s3_case(endpoint="http://127.0.0.1:9", pattern=Pattern.READ, osd_cache="drop")
    assert "would act on that cluster" in str(runner.unavailable(cold, ctx))
    assert runner.unavailable(s3_case(endpoint="http://127.0.0.1:9"), ctx) is None  # neither: the conf is not read


def test_the_sidecar_records_the_endpoint_variable_and_never_the_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from gdsbench import sweep

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7480")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:7481")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-to-be-recorded")
    recorded = sweep.environment(sweep.RECORDED_ENV)
    assert recorded["AWS_ENDPOINT_URL"] == "http://127.0.0.1:7480" and "AWS_ENDPOINT_URL_S3" in recorded
    assert not any(name.startswith(("AWS_SECRET", "AWS_ACCESS", "AWS_SESSION")) for name in recorded)
