"""TieredCheckpointer (issue 33, part 2): saves land in tier 0 (blocking, or copied and written behind), drain
to the later tiers from tier 0's file, keep per tier, and restores load the newest copy that verifies, nearest
tier first, skipping (and naming) missing, torn or corrupt ones. Local tiers here; a local tier then radosgw
(tests/ceph_cluster.py) below, with the object store stopped mid-drain."""

from __future__ import annotations

import copy
import os
import shutil
import socket
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ckptio import CheckpointError, TieredCheckpointer, load
from ckptio.errors import AsyncSaveFailed, NoCheckpoint, NotDurable, OptionError, UnsupportedLocation
from ckptio.format import read_index
from ckptio.records import Restored, Skipped

from tests.ceph_cluster import ceph_cluster, radosgw  # noqa: F401
from tests.checkpoint.conftest import assert_same, random_tensor
from tests.checkpoint.s3_bucket import killed_mid_upload, own_bucket


def loaded(ckpt: TieredCheckpointer) -> Restored:
    """A load's record: what ckpt.load() returned is its state, `last` says from where."""
    state = ckpt.load()
    assert isinstance(ckpt.last, Restored) and ckpt.last.state is state
    return ckpt.last


def loaded_into(ckpt: TieredCheckpointer, state_dict: dict[str, Any]) -> Restored:
    """A load_into's record (it returns the caller's state dict, filled)."""
    assert ckpt.load_into(state_dict) is state_dict
    assert isinstance(ckpt.last, Restored) and ckpt.last.state is state_dict
    return ckpt.last


pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # O_DIRECT refused on tmpfs: buffered instead


def state(seed: int) -> OrderedDict[str, Any]:
    """A state dict as training has one: tied weights, a view, a plain counter and a config, _metadata."""
    w = random_tensor((64, 33), torch.float32, seed)
    sd: OrderedDict[str, Any] = OrderedDict(
        embed=w, head=w, rows=w[3:9], bias=random_tensor((7,), torch.bfloat16, seed + 1), step=seed, cfg={"lr": 0.1}
    )
    sd._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]
    return sd


def steps_in(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def flip_a_data_byte(path: Path) -> None:
    """Corrupt one byte inside the first storage's data (the file's size and index stay as they were)."""
    at = read_index(path).storages[0].offset + 5
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_blocking_and_behind_saves_reach_every_tier_and_restore_exact(tmp_path: Path) -> None:
    """A blocking save is durable in tier 0 on return; one written behind is copied first (what the caller changes
    afterwards never reaches the file), keeps ties and views; both drain to tier 1 and restore bit-exact."""
    t0, t1 = tmp_path / "local", tmp_path / "far"
    with TieredCheckpointer([t0, t1]) as ckpt:
        first = ckpt.save(state(1), 1)
        assert 0 in first.durable_seconds and first.stall_seconds >= first.durable_seconds[0] > 0
        live = state(2)
        expected = copy.deepcopy(live)
        second = ckpt.save(live, 2, blocking=False)
        live["embed"].add_(1)  # the caller trains on: the save holds its own copy
        live["cfg"]["lr"] = 9
        assert second.wait(30) and not second.errors and set(second.durable_seconds) == {0, 1}
        restored = loaded(ckpt)
    assert (restored.step, restored.tier, restored.skipped) == (2, 0, [])
    assert_same(expected, restored.state)
    assert restored.state._metadata == {"": {"version": 1}}
    assert restored.state["head"].data_ptr() == restored.state["embed"].data_ptr()  # still tied
    assert_same(expected, load(t1 / "step-000000000002.ckpt"))  # tier 1 holds the same bytes


def test_each_tier_keeps_its_newest_steps_and_nothing_else_is_touched(tmp_path: Path) -> None:
    t0, t1 = tmp_path / "local", tmp_path / "far"
    t0.mkdir()
    for name in ("notes.txt", "step-7.ckpt", "step-000000000007.ckpt.bak"):
        (t0 / name).write_text("not ours")
    with TieredCheckpointer([t0, t1], keep=[1, 3]) as ckpt:
        for step in range(1, 6):
            ckpt.save(state(step), step, blocking=step % 2 == 0)
        ckpt.wait_drained()
    ours = [f"step-{s:012d}.ckpt" for s in (3, 4, 5)]
    assert steps_in(t0) == sorted(["notes.txt", "step-000000000007.ckpt.bak", ours[2], "step-7.ckpt"])
    assert steps_in(t1) == ours


def test_a_corrupt_tier0_copy_is_skipped_and_tier1_restores_exact(tmp_path: Path) -> None:
    """One byte flipped in tier 0: the restore names why it skipped that copy (the file, not a descriptor) and
    loads tier 1's verified copy; restore_into fills the caller's tensors the same way."""
    t0, t1 = tmp_path / "local", tmp_path / "far"
    with TieredCheckpointer([t0, t1]) as ckpt:
        ckpt.save(state(3), 3)
        ckpt.wait_drained()
        flip_a_data_byte(t0 / "step-000000000003.ckpt")
        restored = loaded(ckpt)
        into = loaded_into(ckpt, state(0))
    assert (restored.step, restored.tier) == (3, 1)
    assert_same(state(3), restored.state)
    [skipped] = restored.skipped
    assert (skipped.tier, skipped.step) == (0, 3)
    assert "checksum mismatch" in skipped.reason and str(t0 / "step-000000000003.ckpt") in skipped.reason
    assert (into.step, into.tier, into.skipped) == (3, 1, restored.skipped)
    assert_same(state(3), into.state)


def test_a_tier0_copy_damaged_before_its_drain_is_never_durable_and_keep_removes_no_good_step(
    tmp_path: Path,
) -> None:
    """Issue 45, item 3: the newest local copy damaged between its save and its drain (the drainer busy with an
    earlier job meanwhile). The drain verifies it against its checksums, drains it nowhere and trims no tier:
    with keep=1 the previous good step stays in both tiers and is what restore loads, exact."""
    import threading

    t0, t1 = tmp_path / "local", tmp_path / "far"
    closing = pytest.raises(NotDurable, match=r"step 2, the newest save, is not durable in the farthest tier: tier 1")
    with closing, TieredCheckpointer([t0, t1], keep=1) as ckpt:  # and its end says so: step 2 is only local
        ckpt.save(state(1), 1)
        ckpt.wait_drained()
        busy = threading.Event()
        ckpt._drainer.submit(busy.wait, 30)  # the drain of step 2 queues behind this
        record = ckpt.save(state(2), 2)
        flip_a_data_byte(t0 / "step-000000000002.ckpt")
        busy.set()
        ckpt.wait_drained()
        restored = loaded(ckpt)
    assert 1 not in record.durable_seconds and "tier 0's copy does not verify" in record.errors[1]
    assert "checksum mismatch" in record.errors[1]
    assert steps_in(t0) == ["step-000000000001.ckpt", "step-000000000002.ckpt"]
    assert steps_in(t1) == ["step-000000000001.ckpt"]
    assert (restored.step, restored.tier) == (1, 0)
    assert_same(state(1), restored.state)
    assert [(s.tier, s.step) for s in restored.skipped] == [(0, 2)]


def test_a_lost_tier0_directory_restores_from_tier1_and_saves_again(tmp_path: Path) -> None:
    t0, t1 = tmp_path / "local", tmp_path / "far"
    with TieredCheckpointer([t0, t1]) as ckpt:
        ckpt.save(state(4), 4)
    shutil.rmtree(t0)
    with TieredCheckpointer([t0, t1]) as ckpt:  # a new node: its local directory is gone
        restored = loaded(ckpt)
        assert (restored.step, restored.tier) == (4, 1)
        assert restored.skipped[0].tier == 0 and "No such file or directory" in restored.skipped[0].reason
        assert_same(state(4), restored.state)
        assert ckpt.save(state(5), 5).durable_seconds[0] > 0
    assert steps_in(t0) == ["step-000000000005.ckpt"]


def test_nothing_that_verifies_anywhere_is_no_checkpoint_listing_what_was_skipped(tmp_path: Path) -> None:
    t0, t1 = tmp_path / "local", tmp_path / "far"
    with TieredCheckpointer([t0, t1]) as ckpt, pytest.raises(NoCheckpoint, match="tier 1: cannot be listed"):
        loaded(ckpt)
    t0.mkdir()
    t1.mkdir()
    with TieredCheckpointer([t0, t1]) as ckpt:
        with pytest.raises(NoCheckpoint, match="no tier holds one"):
            loaded(ckpt)
        ckpt.save(state(1), 1)
        ckpt.wait_drained()
        for tier in (t0, t1):
            flip_a_data_byte(tier / "step-000000000001.ckpt")
        with pytest.raises(NoCheckpoint) as info:
            loaded(ckpt)
    assert isinstance(info.value, CheckpointError)
    assert [(s.tier, s.step) for s in info.value.skipped] == [(0, 1), (1, 1)]
    assert all("checksum mismatch" in s.reason for s in info.value.skipped)


def test_only_checkpoint_files_of_the_tier_are_read_never_a_link_out_of_it(tmp_path: Path) -> None:
    """A link named like a newer step (to a valid checkpoint elsewhere) and other names are never loaded."""
    t0, outside = tmp_path / "local", tmp_path / "elsewhere"
    with TieredCheckpointer([outside]) as ckpt:
        ckpt.save(state(9), 9)
    with TieredCheckpointer([t0]) as ckpt:
        ckpt.save(state(1), 1)
        (t0 / "step-000000000009.ckpt").symlink_to(outside / "step-000000000009.ckpt")
        shutil.copy(outside / "step-000000000009.ckpt", t0 / "step-9.ckpt")
        restored = loaded(ckpt)
    assert (restored.step, restored.tier, restored.skipped) == (1, 0, [])
    assert_same(state(1), restored.state)


def test_a_tier_that_fails_is_recorded_then_its_newest_step_drains_when_it_is_back(tmp_path: Path) -> None:
    """A drain failing never raises into save: the error is in TierSave.errors, tier 0 keeps the newest undrained
    copy (even beyond keep), the older undrained step is superseded, and wait_drained retries the newest."""
    t0, blocker = tmp_path / "local", tmp_path / "mount"
    blocker.write_text("the far tier is not there")
    t1 = blocker / "far"
    with TieredCheckpointer([t0, t1], keep=1) as ckpt:
        saves = [ckpt.save(state(1), 1), ckpt.save(state(2), 2, blocking=False)]
        ckpt.wait_drained()  # retries step 2: the tier is still not there
        for saved in saves:
            assert saved.done() and 0 in saved.durable_seconds and "Not a directory" in saved.errors[1]
        assert steps_in(t0) == ["step-000000000002.ckpt"]
        blocker.unlink()
        assert ckpt.wait_drained() == [saves[1]]
        assert saves[1].errors == {} and 1 in saves[1].durable_seconds and 1 in saves[0].errors
    assert steps_in(t1) == ["step-000000000002.ckpt"]


class Mine:
    """A type torch's weights-only unpickler refuses: a save refuses it (UnsafeObject)."""


def test_a_failed_write_behind_is_raised_by_the_next_save(tmp_path: Path) -> None:
    with TieredCheckpointer([tmp_path / "local"]) as ckpt:
        failed = ckpt.save({"w": torch.ones(3), "mine": Mine()}, 1, blocking=False)
        assert failed.wait(30) and "cannot be checkpointed" in failed.errors[0]
        with pytest.raises(AsyncSaveFailed, match="step 1"):
            ckpt.save(state(2), 2)
        assert ckpt.save(state(2), 2).durable_seconds[0] > 0


@pytest.mark.parametrize(
    "tiers, keep, error",
    [
        (["s3://bucket/ck"], None, OptionError),  # tier 0 must be local
        (["a", "gs://bucket/ck"], None, UnsupportedLocation),
        ("a", None, OptionError),  # a lone location, not a list
        (["a", "a"], None, OptionError),
        (["a", "b"], 0, OptionError),
        (["a", "b"], [1], OptionError),
    ],
)
def test_bad_tiers_and_keep_are_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiers: Any, keep: Any, error: type
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(error):
        TieredCheckpointer(tiers, keep=keep)
    with TieredCheckpointer(["a"]) as ckpt, pytest.raises(OptionError, match="step must be"):
        ckpt.save(state(1), -1)


# -- a local tier, then radosgw ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bucket(ceph_cluster: Any) -> Iterator[str]:  # noqa: F811  (the fixture imported above)
    """A bucket of this module's own on the test cluster's radosgw."""
    with own_bucket(ceph_cluster, "ckptio-tiers") as name:
        yield name


def objects(bucket: str, prefix: str) -> list[str]:
    from ckptio.s3.client import Bucket

    return sorted(s.key for s in Bucket(bucket).listing(prefix + "/"))


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_save_drains_to_s3_and_a_corrupt_local_copy_restores_from_s3(
    radosgw: Any,  # noqa: F811
    bucket: str,
    tmp_path: Path,
) -> None:
    t0, far = tmp_path / "local", f"s3://{bucket}/drained"
    with TieredCheckpointer([t0, far], keep=[2, 1]) as ckpt:
        saves = [ckpt.save(state(1), 1), ckpt.save(state(2), 2, blocking=False)]
        ckpt.wait_drained()
        assert all(s.durable_seconds[1] > s.durable_seconds[0] and not s.errors for s in saves)
        assert objects(bucket, "drained") == ["drained/step-000000000002.ckpt"]  # keep 1 there
        flip_a_data_byte(t0 / "step-000000000002.ckpt")
        restored = loaded(ckpt)
    assert (restored.step, restored.tier) == (2, 1)
    assert restored.skipped == [Skipped(0, 2, restored.skipped[0].reason)]
    assert "checksum mismatch" in restored.skipped[0].reason
    assert_same(state(2), restored.state)


def test_the_object_store_stopped_mid_drain_costs_training_nothing_and_the_drain_resumes(
    radosgw: Any,  # noqa: F811
    bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t0, far = tmp_path / "local", f"s3://{bucket}/stopped"
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    with TieredCheckpointer([t0, far]) as ckpt:
        saved = ckpt.save(state(1), 1)
        assert saved.wait(30) and 0 in saved.durable_seconds and 1 not in saved.durable_seconds
        assert "PutObject failed (no answer)" in saved.errors[1] and "CONNECTION_REFUSED" in saved.errors[1]
        assert_same(state(1), load(t0 / "step-000000000001.ckpt"))  # the local copy stays good
        local = loaded(ckpt)  # the store cannot even be listed: tier 0 is read
        assert (local.step, local.tier) == (1, 0) and local.skipped[0].step is None
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)  # the store is back
        assert ckpt.wait_drained() == [saved]
        assert saved.errors == {} and saved.durable_seconds[1] > 0
    assert objects(bucket, "stopped") == ["stopped/step-000000000001.ckpt"]
    shutil.rmtree(t0)
    with TieredCheckpointer([t0, far]) as ckpt:
        restored = loaded(ckpt)
    assert (restored.step, restored.tier) == (1, 1)
    assert_same(state(1), restored.state)


def test_a_drain_aborts_the_uploads_killed_saves_left_of_checkpoint_names_only(
    radosgw: Any,  # noqa: F811
    bucket: str,
    tmp_path: Path,
) -> None:
    from ckptio.s3.client import Bucket

    stale, foreign = "aborted/step-000000000007.ckpt", "aborted/notes.ckpt"
    for key in (stale, foreign):
        killed_mid_upload(f"s3://{bucket}/{key}", bucket, key)
    with TieredCheckpointer([tmp_path / "local", f"s3://{bucket}/aborted"]) as ckpt:
        saved = ckpt.save(state(1), 1)
        ckpt.wait_drained()
    assert saved.errors == {} and objects(bucket, "aborted") == ["aborted/step-000000000001.ckpt"]
    assert [u.key for u in Bucket(bucket).uploads("aborted/")] == [foreign]  # not a checkpoint's: left alone


def test_both_checkpointers_speak_one_verb_pair_and_the_old_names_warn(tmp_path: Path) -> None:
    """save / load / load_into as a Checkpointer has them, `last` the record; restore() and restore_into() still
    answer, with a DeprecationWarning naming the new verb, and the same record."""
    with TieredCheckpointer([tmp_path / "t0"]) as ckpt:
        saved = ckpt.save(state(5), 5)
        assert ckpt.last is saved
        assert_same(state(5), ckpt.load())
        with pytest.warns(DeprecationWarning, match=r"restore\(\) is load\(\) now"):
            old = ckpt.restore()
        assert old is ckpt.last and (old.step, old.tier) == (5, 0)
        with pytest.warns(DeprecationWarning, match=r"restore_into\(\) is load_into\(\) now"):
            into = ckpt.restore_into(state(0))
        assert_same(state(5), into.state)
