"""s3torch_save and s3torch_dcp (issue 21, part 3): s3torchconnector's checkpoints against the one-host cluster's radosgw
(tests/ceph_cluster.py), real daemons and real s3torchconnectorclient exceptions, no fakes of the service: a save and a
verified load of each engine leave nothing behind, what someone else made is kept, radosgw 16.2's empty ETag is
accepted only as narrowly as s3torch_etag.py says, a corrupted checkpoint fails its load, and skips say why."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "s3torchconnectorclient", reason="s3torchconnector is not installed: pip install 'gdsbench[s3torch]'"
)
from s3torchconnector import s3writer
from s3torchconnectorclient import S3Exception

from gdsbench import config
from gdsbench.cases import Case, Pattern
from gdsbench.errors import ToolError
from gdsbench.runners import ceph, get, s3
from gdsbench.runners.base import Measurement, RunContext
from gdsbench.runners.checkpoint import s3torch, s3torch_etag
from gdsbench.runners.s3_client import Bucket
from tests.ceph_cluster import bucket_marker, garbage_of

MiB = 1 << 20
ENGINES = ("s3torch_save", "s3torch_dcp")
ETAG_ERROR = 'Client error: Internal S3 client error: Header "ETag" not found'
DEAD_ENDPOINT = "http://127.0.0.1:9"  # discard: nothing listens


def case_of(engine: str, pattern: str, **params: Any) -> Case:
    """One case as a config makes it (every key's default filled in): 8 MiB of llama3-8b, warm loads, free memory as
    it is (leveling it costs a garbage collection, 0.1 s, per call)."""
    matrix = {
        "engine": [engine],
        "pattern": [pattern],
        "checkpoint_size": ["8M"],
        "cache": ["warm"],
        "memory": ["as-is"],
        "transfer": ["CPU_ONLY"],
        **{key: [value] for key, value in params.items()},
    }
    [case] = config.from_dict({"matrix": matrix}, "s3torch.yaml").cases
    return case


def context(tmp_path: Path) -> RunContext:
    return RunContext(directory=tmp_path, file_size=8 * MiB)


# -- what needs no service ------------------------------------------------------------------------------


def test_the_engines_take_the_s3_engines_keys_and_save_load_and_train() -> None:
    shared = {key.name: key for key in s3.S3Runner.options}
    for name in ENGINES:
        runner = get(name)
        options = {key.name: key for key in runner.options}
        assert all(options[k] is shared[k] for k in s3torch.SHARED_KEYS)  # the same Key objects: one meaning
        assert "steps" in options and "osd_cache" not in options  # train: the durability ladder's baseline
        assert {p.value for p in runner.patterns} == {"save", "load", "train"}
        assert runner.transfers == s3.S3Runner.transfers
        assert {"stall_seconds", "durable_object_seconds", "work_at_risk_steps"} <= {c.name for c in runner.columns}
    assert get("s3torch_dcp").threaded and not get("s3torch_save").threaded


@pytest.mark.parametrize("engine", ENGINES)
def test_the_command_shows_the_uri_and_the_call_and_no_secret(engine: str, credentials: None, tmp_path: Path) -> None:
    argv = get(engine).command(case_of(engine, "load", cache="cold"), context(tmp_path))
    suffix = ".pt" if engine == "s3torch_save" else ".t1"  # DCP: one data object per thread
    assert argv[2] == f"s3://gdsbench/gdsbench/checkpoints/{engine}.llama3-8b.8M.mixed.s0{suffix}"
    assert argv[1] == get(engine).calls[Pattern.LOAD] and argv[1].endswith(("reader, weights_only=True)", "Reader)"))
    assert "cache=cold" in argv and f"endpoint={DEAD_ENDPOINT}" in argv and "retries=none" in argv
    assert not any("not-shown" in word for word in argv)


@pytest.mark.parametrize("engine", ENGINES)
def test_without_credentials_a_case_is_skipped_with_the_s3_engines_reason(
    engine: str, credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    reason = get(engine).unavailable(case_of(engine, "save"), context(tmp_path))
    assert reason == "no S3 credentials: set AWS_SECRET_ACCESS_KEY (never in a config)"


def test_cache_states_s3_lacks_are_skipped_saying_why(
    credentials: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, ctx = get("s3torch_save"), context(tmp_path)
    assert "never passes through" in str(runner.unavailable(case_of("s3torch_save", "load", cache="cold-machine"), ctx))
    assert runner.unavailable(case_of("s3torch_save", "save", cache="cold-machine"), ctx) is None  # saves: no cache
    monkeypatch.setattr(ceph, "CONF", tmp_path / "absent.conf")
    assert runner.unavailable(case_of("s3torch_save", "load", cache="cold"), ctx) == s3torch.COLD_NEEDS
    other = tmp_path / "other.conf"  # a cluster's conf whose radosgw is not the case's endpoint
    other.write_text("[client.rgw.a]\nrgw frontends = beast endpoint=127.0.0.1:7480\n")
    monkeypatch.setattr(ceph, "CONF", other)
    reason = str(runner.unavailable(case_of("s3torch_save", "load", cache="cold"), ctx))
    assert "radosgw is 127.0.0.1:7480, not this case's endpoint 127.0.0.1:9" in reason


def test_dcp_refuses_an_endpoint_its_client_would_not_use(credentials: None, tmp_path: Path) -> None:
    """S3StorageWriter and S3StorageReader take no endpoint: their client reads AWS_ENDPOINT_URL only."""
    elsewhere = case_of("s3torch_dcp", "save", endpoint="http://127.0.0.1:7480")
    assert get("s3torch_dcp").unavailable(elsewhere, context(tmp_path)) == (
        "s3torch_dcp's client reads its endpoint from AWS_ENDPOINT_URL only (http://127.0.0.1:9), not this case's "
        "http://127.0.0.1:7480: set AWS_ENDPOINT_URL to it"
    )
    assert (
        get("s3torch_save").unavailable(
            case_of("s3torch_save", "save", endpoint="http://127.0.0.1:7480"), context(tmp_path)
        )
        is None
    )


def test_the_etag_workaround_lets_every_other_error_through_untouched() -> None:
    """Any S3Exception but the empty ETag is raised as it is, with no HEAD (the HEAD client's endpoint is dead)."""
    etag = s3torch_etag.EmptyEtag("us-east-1", DEAD_ENDPOINT)
    other = S3Exception("Client error: Unknown response error: MetaRequestResult { response_status: 404 }")
    with pytest.raises(S3Exception) as raised:
        etag.accept(other, "b", "k", 10)
    assert raised.value is other and etag.count == 0 and etag.note() is None


def test_the_etag_workaround_is_installed_only_inside_its_block() -> None:
    original = s3writer.S3Writer.close
    with pytest.raises(RuntimeError, match="inside"), s3torch_etag.accepted("us-east-1", DEAD_ENDPOINT):
        assert s3writer.S3Writer.close is not original
        raise RuntimeError("inside")
    assert s3writer.S3Writer.close is original


# -- against the one-host cluster's radosgw ---------------------------------------------------------------


def bucket(name: str) -> Bucket:
    return Bucket(os.environ["AWS_ENDPOINT_URL"], name, "us-east-1", 16 * MiB)


def run(case: Case, ctx: RunContext) -> Measurement:
    runner = get(case.engine)
    assert runner.unavailable(case, ctx) is None
    return runner.run(case, ctx)


def checkpoint_objects(engine: str, store: Bucket) -> dict[str, int]:
    return store.sizes(f"gdsbench/checkpoints/{engine}.")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "threads", "objects"), [("s3torch_save", {}, 1), ("s3torch_dcp", {"threads": 2}, 3)]
)
def test_a_save_and_a_verified_load_move_the_workload_and_leave_nothing(
    engine: str, threads: dict[str, int], objects: int, radosgw: Any, tmp_path: Path
) -> None:
    """radosgw 16.2.15 sends an empty ETag for every object (DCP on 2 threads: 2 data objects, then .metadata),
    accepted and counted."""
    name, ctx = f"gdsbench-s3t-{engine[8:]}", context(tmp_path)
    assert not bucket(name).exists()
    save = run(case_of(engine, "save", bucket=name, **threads), ctx)
    stored = checkpoint_objects(engine, bucket(name))
    assert (
        len(stored) == objects and save.figures["bytes_on_disk"] == sum(stored.values()) > save.bytes > 8 * MiB - 4096
    )
    assert f"radosgw sent an empty ETag {objects} time" in str(save.note) and "(timed)" in str(save.note)
    load = run(case_of(engine, "load", bucket=name, **threads), ctx)
    assert load.bytes == save.bytes and load.cache == "warm" and "; verified;" in str(load.note)
    assert "saved first" not in str(load.note)
    ctx.resources.cleanup()
    assert not bucket(name).exists()  # its objects, then the bucket it made


@pytest.mark.slow
def test_a_bucket_and_objects_someone_else_made_are_kept(radosgw: Any, tmp_path: Path) -> None:
    """A load with no checkpoint there saves one first (unmeasured); only what the sweep made is removed."""
    theirs, ctx = bucket("gdsbench-s3t-3"), context(tmp_path)
    theirs.create()
    other = "gdsbench/checkpoints/s3torch_dcp.theirs/.metadata"
    theirs.put(other, memoryview(b"someone's"))
    try:
        load = run(case_of("s3torch_dcp", "load", bucket="gdsbench-s3t-3"), ctx)
        assert "no checkpoint there: saved first (unmeasured)" in str(load.note) and "verified" in str(load.note)
        assert len(checkpoint_objects("s3torch_dcp", theirs)) == 3
        ctx.resources.cleanup()
        assert theirs.exists() and checkpoint_objects("s3torch_dcp", theirs) == {other: 9}
    finally:
        theirs.delete(other)
        theirs.remove()


@pytest.mark.slow
def test_the_empty_etag_is_accepted_only_for_an_object_holding_the_bytes_written(radosgw: Any) -> None:
    store, etag = bucket("gdsbench-s3t-4"), s3torch_etag.EmptyEtag("us-east-1", os.environ["AWS_ENDPOINT_URL"])
    store.create()
    store.put("k", memoryview(b"x" * 1000))
    try:
        with pytest.raises(s3torch_etag.StoredSizeMismatch, match="holds 1000 bytes, not the 999 written"):
            etag.accept(S3Exception(ETAG_ERROR), "gdsbench-s3t-4", "k", 999)
        with pytest.raises(s3torch_etag.StoredSizeMismatch, match="its HEAD failed: Service error: The object was"):
            etag.accept(S3Exception(ETAG_ERROR), "gdsbench-s3t-4", "missing", 1000)
        assert etag.count == 0
        etag.accept(S3Exception(ETAG_ERROR), "gdsbench-s3t-4", "k", 1000)
        assert etag.count == 1
    finally:
        store.delete("k")
        store.remove()


def corrupt(store: Bucket, key: str, same_size: bool) -> None:
    """Overwrite an object: the same size with a stretch of its middle inverted, or its first half only."""
    size = store.sizes(key)[key]
    data = bytearray(size)
    store.get(key, memoryview(data))
    middle = size // 2
    data[middle : middle + 4096] = bytes(b ^ 0xFF for b in data[middle : middle + 4096])
    store.put(key, memoryview(data if same_size else data[:middle]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "same_size"), [("s3torch_save", True), ("s3torch_dcp", False)], ids=["save-same-size", "dcp-shorter"]
)
def test_a_corrupted_checkpoint_fails_its_load(engine: str, same_size: bool, radosgw: Any, tmp_path: Path) -> None:
    """A torch or DCP error (here: a torn zip, a short S3 stream) or verify's mismatch, never a number (one
    corruption an engine: the other two pairs ran alike when written)."""
    name, ctx = f"gdsbench-s3t-5{int(same_size)}{len(engine)}", context(tmp_path)
    run(case_of(engine, "save", bucket=name), ctx)
    key = next(k for k in checkpoint_objects(engine, bucket(name)) if k.endswith((".pt", ".distcp")))
    corrupt(bucket(name), key, same_size)
    try:
        with pytest.raises(ToolError, match=rf"^{engine}: (s3://{name}/.* differs from the saved one|\w+Error: \w)"):
            run(case_of(engine, "load", bucket=name), ctx)
    finally:
        ctx.resources.cleanup()
    assert not bucket(name).exists()


@pytest.mark.slow
def test_a_cold_load_drops_the_osds_caches_and_gc_leaves_no_garbage(radosgw: Any, tmp_path: Path) -> None:
    """Both act on the cluster of /etc/ceph/ceph.conf: only where that is this run's."""
    conf = ceph.CONF
    if not (conf.is_symlink() and os.readlink(conf) == str(radosgw.conf)):
        pytest.skip(f"{conf} is not this test run's cluster: its caches and garbage are not ours")
    ctx = context(tmp_path)
    save = run(case_of("s3torch_save", "save", bucket="gdsbench-s3t-6", rgw_gc=True), ctx)
    assert "radosgw garbage collected" in str(save.note)
    load = run(case_of("s3torch_save", "load", bucket="gdsbench-s3t-6", rgw_gc=True, cache="cold"), ctx)
    assert load.cache == "cold" and "OSDs' caches dropped" in str(load.note)
    marker = bucket_marker(conf, "gdsbench-s3t-6")
    ctx.resources.cleanup()
    assert garbage_of(conf, marker) == [] and not bucket("gdsbench-s3t-6").exists()
