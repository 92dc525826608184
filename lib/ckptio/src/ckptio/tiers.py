"""TieredCheckpointer: saves into a near, fast tier (a local directory), drains each save to the later tiers
(local directories or `s3://bucket/prefix`) in the background, and restores from the nearest copy that verifies.

Each save is one ckptio single-file checkpoint `step-<step:012d>.ckpt` per tier. Tier 0 is written by ckptio's
own save (temp name, fsync, rename) from the caller's state dict, or, with `blocking=False`, from host
storages the call copies it into (host_copy.py) by a background thread. The later tiers are filled from tier
0's file, never from training memory: one background thread drains each save to each tier in tier order (a
file copy made durable, or one PUT), so a drain that fails (the store is down) costs training nothing: it is
recorded in that save's TierSave, tier 0's copy stays, and the newest undrained step is retried. A restore
tries the newest step any tier holds, nearest tier first, and loads only a copy that verifies. With a peer tier
(places/peer.py) the ranks restore together: the newest step every rank can get whole, from any tier.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from typing import TYPE_CHECKING, Any, TypeVar

from . import integrity
from . import tier_stores as stores
from .errors import (
    AsyncSaveFailed,
    CheckpointError,
    NoCheckpoint,
    NotDurable,
    OptionError,
    PeerError,
    StateDictMismatch,
)
from .loading import device_of
from .memory import StagingCache
from .options import IOOptions, resolve
from .saving import save_to
from .tier_names import name_of, pinned
from .tier_records import Restored, Skipped, TierSave, reason
from .tier_stores import LocalTier, PeerTier, Tier
from .verify import verify_file

if TYPE_CHECKING:
    from .host_copy import HostCopy
    from .peers import Ring

log = logging.getLogger("ckptio")
T = TypeVar("T")


class TieredCheckpointer:
    """Saves to an ordered list of tiers, nearest first, and restores from the nearest copy that verifies.

    Args:
        tiers: tier 0 a local directory or `memory://name` (RAM); later ones local directories, memory folders,
            `peer://name` (each rank's copy also in the RAM of the same local rank on the next node, over
            torch.distributed: every rank makes, saves and loads together) or `s3://bucket/prefix` (endpoint and
            credentials from the environment, the extra `ckptio[s3]`).
        keep: how many newest steps each tier keeps (an int for every tier, or one per tier; default 2). Older
            ones (ckptio's names only) are removed only once a newer one is durable in that tier, never a tier-0
            file a drain still needs.
        options: how to move the bytes (host defaults if None).
        checksum: "xxh3" (default), "crc32c" or None, for every save.
        require_durable: `close()` (and the `with` block's end) raises NotDurable, after freeing everything, where
            the newest save is not durable in the farthest tier once the drains were waited for and retried (a
            memory-only exit loses that step with the node). False allows such an exit (default True).

    The verbs are a Checkpointer's: `save` (returns its TierSave), `load` and `load_into` (return the state, as
    ckptio.load and load_into do); `last` is the newest call's record (a TierSave, or the Restored a load made:
    its step, tier and the copies it skipped). ckptio.records names the types.

    Example:
        with TieredCheckpointer(["/local/ckpt", "s3://bucket/run1"]) as ckpt:
            ckpt.load_into(model.state_dict())   # NoCheckpoint on a fresh run
            for step in range(ckpt.last.step + 1, steps):
                train(...)
                ckpt.save(model.state_dict(), step, blocking=False)
    """

    def __init__(
        self,
        tiers: Sequence[str | os.PathLike[str]],
        *,
        keep: int | Sequence[int] | None = None,
        options: IOOptions | None = None,
        checksum: str | None = "xxh3",
        require_durable: bool = True,
    ) -> None:
        integrity.normalize(checksum)
        self.require_durable = require_durable
        self.options = resolve(options)
        tiers = stores.listed(tiers)
        self.keep = stores.keep_counts(keep, len(tiers))
        self.tiers: list[Tier] = stores.places(tiers, self.options, self.keep)
        self._collective = [i for i, tier in enumerate(self.tiers) if tier.collective]
        tier0 = self.tiers[0]
        assert isinstance(tier0, LocalTier)  # places() refuses anything else
        self._tier0: LocalTier = tier0
        self.checksum = checksum
        self._saving: StagingCache | None = StagingCache()
        self._loading = StagingCache()
        self._host: HostCopy | None = None  # made by the first save(blocking=False)
        self._writer = ThreadPoolExecutor(1, "ckptio-tier0")
        self._drainer = ThreadPoolExecutor(1, "ckptio-drain")
        self._lock = threading.RLock()
        self._writing: tuple[Future[None], TierSave] | None = None
        self._jobs: dict[Future[None], tuple[TierSave, list[int]]] = {}  # drains queued or running
        self._needed: dict[int, int] = {}  # step -> drains that will read its tier-0 file
        self._undrained: dict[int, TierSave] = {}  # tier -> the newest save not durable there, to retry
        self.last: TierSave | Restored | None = None  # the newest save's TierSave or load's Restored
        self._saved: TierSave | None = None  # the newest save's, which close() holds to the farthest tier

    # -- saves ------------------------------------------------------------------------------------

    def save(self, state_dict: Any, step: int, *, blocking: bool = True) -> TierSave:
        """Save `state_dict` as `step`: durable in tier 0 on return (`blocking`), or copied into host buffers kept
        between saves and written to tier 0 in the background (the next save first waits for that write, and
        raises AsyncSaveFailed if it failed). The later tiers are filled in the background."""
        start = time.monotonic()
        name_of(step)
        self._open()
        self._finish_writing()
        record = TierSave(step, len(self.tiers), start)
        if blocking:
            try:
                self._write(state_dict, step)
            except BaseException as error:
                self._not_written(record, error)
                raise
            record._durable(0)
            self._queue(record, range(1, len(self.tiers)))
        else:
            staged = self._host_copy().stage(state_dict)
            self._writing = (self._writer.submit(self._write_behind, record, staged), record)
        record.stall_seconds = time.monotonic() - start
        self.last = self._saved = record
        return record

    def wait_drained(self, timeout: float | None = None) -> list[TierSave]:
        """Wait for the background work (a tier-0 write, the drains), after queuing a retry of the newest
        undrained step of each tier; the saves waited for, oldest first (each done unless `timeout` ran out)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waited: list[TierSave] = []
        if self._writing is not None and not self._writing[0].done():
            waited.append(self._writing[1])
            wait_for([self._writing[0]], _left(deadline))
        for retry in (False, True):  # the drains queued, then the retries of what they left undrained
            with self._lock:
                if retry:
                    self._retry()
                pending = {f: job[0] for f, job in self._jobs.items() if not f.done()}
            wait_for(list(pending), _left(deadline))
            waited += [record for record in pending.values() if record not in waited]
        return sorted(waited, key=lambda r: r._start)

    def _write(self, state_dict: Any, step: int) -> None:
        """Save durably into tier 0 (a folder ours alone), once the state fits there (a memory tier's room)."""
        self._tier0.prepare()
        self._tier0.room_for(state_bytes(state_dict))
        staging = self._staging().within(self.options.buffer_bytes, self.options.chunk_bytes)
        save_to(state_dict, self._tier0.file(step), self.options, self.checksum, staging)

    def _write_behind(self, record: TierSave, staged: Any) -> None:
        """The background tier-0 write of a non-blocking save, then its drains queued."""
        try:
            self._write(staged, record.step)
        except BaseException as error:
            self._not_written(record, error)
            raise
        record._durable(0)
        self._queue(record, range(1, len(self.tiers)))

    def _not_written(self, record: TierSave, error: BaseException) -> None:
        """A save whose tier-0 write failed: recorded; the collective tiers' exchange still takes place (this rank
        sends nothing, so its peers wait for nothing); the older undrained steps retried."""
        record._failed(0, reason(error))
        for i in range(1, len(self.tiers)):
            record._failed(i, "not drained: the write to tier 0 failed")
        with self._lock:
            if self._collective:
                self._drain_later(record, self._collective)
            self._retry()

    def _finish_writing(self) -> None:
        """Wait for the background tier-0 write; AsyncSaveFailed if it failed."""
        if self._writing is None:
            return
        future, record = self._writing
        self._writing = None
        error = future.exception()
        if error is not None:
            where = self.tiers[0]
            raise AsyncSaveFailed(f"the background save of step {record.step} to {where} failed: {error}") from error

    # -- drains -----------------------------------------------------------------------------------

    def _queue(self, record: TierSave, tiers: Iterable[int]) -> None:
        """Queue a save's drain to `tiers` (its tier-0 file kept until done), then the retries it does not cover."""
        with self._lock:
            self._drain_later(record, list(tiers))
            self._retry()

    def _drain_later(self, record: TierSave, tiers: list[int]) -> None:
        """Submit a drain job; its tier-0 file counts as needed until the job ends."""
        with self._lock:
            self._jobs = {f: job for f, job in self._jobs.items() if not f.done()}
            self._needed[record.step] = self._needed.get(record.step, 0) + 1
            self._jobs[self._drainer.submit(self._drain, record, tiers)] = (record, tiers)

    def _retry(self) -> list[TierSave]:
        """Queue a drain of each tier's newest undrained step that no queued drain of a step as new covers; the
        saves retried. (A newer save's own drain supersedes the older step instead of uploading it first.)"""
        due: dict[int, tuple[TierSave, list[int]]] = {}
        with self._lock:
            queued = [job for f, job in self._jobs.items() if not f.done()]
            for i, record in sorted(self._undrained.items()):
                if not any(r.step >= record.step and i in tiers for r, tiers in queued):
                    due.setdefault(id(record), (record, []))[1].append(i)
                    del self._undrained[i]
            for record, tiers in due.values():
                self._drain_later(record, tiers)
        return [record for record, _ in due.values()]

    def _drain(self, record: TierSave, tiers: list[int]) -> None:
        """Verify a save's tier-0 file against the checksums it was saved with, then copy that same file (as it was
        opened) to each of `tiers` in order, then keep tier 0. A copy that does not verify is drained nowhere and
        trims no tier: the older steps it would have replaced stay."""
        verified = False
        try:
            with pinned(self._tier0.file(record.step)) as source:
                verify_file(source, self._tier0.file(record.step))
                verified = True
                for i in tiers:
                    self._drain_to(record, i, source)
        except (OSError, CheckpointError) as error:  # tier 0's copy is gone or damaged: nothing to retry from
            said = "cannot be read" if isinstance(error, OSError) else "does not verify"
            log.warning("step %d: tier 0's copy %s, not drained: %s", record.step, said, reason(error))
            for i in tiers:
                if i in self._collective:
                    self._take_part(i, record.step)
                record._failed(i, f"tier 0's copy {said}: {reason(error)}")
        finally:
            with self._lock:
                self._needed[record.step] -= 1
                if not self._needed[record.step]:
                    del self._needed[record.step]
            if verified:
                self._keep(0, record.step)

    def _take_part(self, i: int, step: int) -> None:
        """A collective tier's exchange of `step` with nothing of this rank's to send: its peers wait for nothing,
        and what they send it is kept."""
        tier = self.tiers[i]
        assert isinstance(tier, PeerTier)
        try:
            tier.put(None, step)
        except CheckpointError as error:  # recorded by the caller: this rank had no copy to send
            log.debug("step %d: tier %d's exchange without a copy of ours: %s", step, i, error)

    def _drain_to(self, record: TierSave, i: int, source: str) -> None:
        """One copy into tier i: durable (older steps there then trimmed to `keep`), or its failure recorded and
        the step kept for a retry when it is the newest one that tier lacks (never in a collective tier: every rank
        would have to retry)."""
        tier = self.tiers[i]
        try:
            tier.put(source, record.step)
        except Exception as error:  # never into training: recorded, retried
            tier.forget()
            log.warning("step %d not copied to tier %d (%s): %s", record.step, i, tier, reason(error))
            with self._lock:
                newest = self._undrained.get(i)
                if (newest is None or newest.step <= record.step) and i not in self._collective:
                    self._undrained[i] = record
            record._failed(i, reason(error))
            return
        with self._lock:
            newest = self._undrained.get(i)
            if newest is not None and newest.step <= record.step:  # superseded: dropped from the retries
                del self._undrained[i]
        record._durable(i)
        self._keep(i, record.step)

    def _keep(self, i: int, newest: int) -> None:
        """Remove tier i's steps older than `newest` (durable there) beyond its `keep` newest; in tier 0 never one a
        drain still needs or a retry may."""
        tier = self.tiers[i]
        try:
            steps = sorted(tier.steps(), reverse=True)
            with self._lock:
                needed = set(self._needed) | {r.step for r in self._undrained.values()} if i == 0 else set()
            kept = {*steps[: self.keep[i]], newest, *needed}
            for step in steps:
                if step < newest and step not in kept:
                    tier.remove(step)
        except Exception as error:  # the next save trims again
            tier.forget()
            log.warning("old checkpoints in tier %d (%s) not removed: %s", i, tier, reason(error))

    # -- restores ---------------------------------------------------------------------------------

    def load(self, *, map_location: Any = "cpu") -> Any:
        """The newest step any tier holds, from the nearest tier whose copy verifies, in new memory; missing, torn
        or corrupt copies are skipped. `last` is then the Restored record (step, tier, seconds, skipped).
        NoCheckpoint when no copy verifies."""
        device = device_of(map_location)
        return self._restore(lambda tier, step: stores.load(tier, step, device, self.options, self._loading)).state

    def load_into(self, state_dict: T) -> T:
        """As `load`, filling `state_dict`'s tensors in place (strict: the same key paths, dtypes and shapes, else
        StateDictMismatch); returns `state_dict`."""
        self._restore(lambda tier, step: stores.load_into(tier, step, state_dict, self.options, self._loading))
        return state_dict

    def restore(self, *, map_location: Any = "cpu") -> Restored:
        """Deprecated: `load`, returning its Restored record (now `last`)."""
        _renamed("restore", "load")
        self.load(map_location=map_location)
        assert isinstance(self.last, Restored)
        return self.last

    def restore_into(self, state_dict: T) -> Restored:
        """Deprecated: `load_into`, returning its Restored record (now `last`)."""
        _renamed("restore_into", "load_into")
        self.load_into(state_dict)
        assert isinstance(self.last, Restored)
        return self.last

    def _restore(self, load: Callable[[Tier, int], Any]) -> Restored:
        """Try every copy, newest step first, nearest tier first, until one loads verified; it is `last`."""
        start = time.monotonic()
        self._open()
        if self._writing is not None:  # the newest save becomes visible (its failure is raised by the next save)
            wait_for([self._writing[0]])
        if self._collective:
            return self._restore_together(load, start)
        skipped: list[Skipped] = []
        for step, tiers in self._holders(skipped):
            for i in tiers:
                try:
                    state = load(self.tiers[i], step)
                except (StateDictMismatch, OptionError):
                    raise  # the caller's state dict or arguments, not the copy
                except (CheckpointError, OSError) as error:
                    skipped.append(Skipped(i, step, reason(error)))
                    log.warning("tier %d (%s) step %d skipped: %s", i, self.tiers[i], step, reason(error))
                    continue
                self.last = Restored(step, i, state, time.monotonic() - start, skipped)
                return self.last
        raise NoCheckpoint([str(t) for t in self.tiers], skipped)

    def _restore_together(self, load: Callable[[Tier, int], Any], start: float) -> Restored:
        """With a collective tier, every rank restores the same step: the newest that every rank lists in some
        tier; each tries its tiers nearest first (all take part in a collective tier's fetch, sending what they
        hold to the ranks that ask), and where any rank got no verified copy, all try the next older step."""
        with self._lock:
            jobs = list(self._jobs)
        wait_for(jobs)  # no drain's exchange on the tier's group meanwhile (waited outside the lock the drains take)
        ring = self._ring()
        skipped: list[Skipped] = []
        held, tried = dict(self._holders(skipped, together=True)), set[int]()
        while (step := ring.agree([s for s in held if s not in tried])) is not None:
            got, state, fatal = self._restore_step(load, step, held[step], skipped)
            worst = ring.worst(0 if got is not None else 2 if fatal is not None else 1)
            if fatal is not None:
                raise fatal
            if worst == 2:
                raise PeerError(ring.rank, step, "another rank's restore was refused (its state dict or arguments)")
            if worst == 0:
                assert got is not None
                self.last = Restored(step, got, state, time.monotonic() - start, skipped)
                return self.last
            tried.add(step)
        raise NoCheckpoint([str(t) for t in self.tiers], skipped)

    def _restore_step(
        self, load: Callable[[Tier, int], Any], step: int, holding: list[int], skipped: list[Skipped]
    ) -> tuple[int | None, Any, CheckpointError | None]:
        """One rank's try of `step`, tier by tier (a collective tier's fetch taken part in whatever happens): the
        tier it came from (None: none verified), the state, and the caller's error that ended it, if any."""
        got: int | None = None
        state: Any = None
        fatal: CheckpointError | None = None
        for i, tier in enumerate(self.tiers):
            wanted = got is None and fatal is None and i in holding
            refused = tier.fetch(step, wanted) if isinstance(tier, PeerTier) else []
            if refused:
                skipped.append(Skipped(i, step, "no copy that verifies came from the peers: " + "; ".join(refused)))
                continue
            if not wanted:
                continue
            try:
                state, got = load(tier, step), i
            except (StateDictMismatch, OptionError) as error:
                fatal = error  # the caller's state dict or arguments, not the copy
            except (CheckpointError, OSError) as error:
                skipped.append(Skipped(i, step, reason(error)))
                log.warning("tier %d (%s) step %d skipped: %s", i, tier, step, reason(error))
        return got, state, fatal

    def _ring(self) -> Ring:
        """The ring of the first collective tier, through which the ranks agree."""
        tier = self.tiers[self._collective[0]]
        assert isinstance(tier, PeerTier)
        return tier.ring

    def _holders(self, skipped: list[Skipped], together: bool = False) -> list[tuple[int, list[int]]]:
        """(step, the tiers holding it, nearest first) for every step, newest first; tiers that cannot be listed
        are recorded in `skipped`. `together`: a collective tier lists what the peers hold of this rank's (every
        rank calls this)."""
        held: dict[int, list[int]] = {}
        for i, tier in enumerate(self.tiers):
            try:
                steps = tier.listing() if together and isinstance(tier, PeerTier) else tier.steps()
            except (CheckpointError, OSError) as error:
                tier.forget()
                skipped.append(Skipped(i, None, f"cannot be listed: {reason(error)}"))
                continue
            for step in steps:
                held.setdefault(step, []).append(i)
        return sorted(held.items(), reverse=True)

    # -- lifetime ---------------------------------------------------------------------------------

    def _open(self) -> None:
        if self._saving is None:
            raise ValueError(f"{self!r} is closed")

    def _host_copy(self) -> HostCopy:
        """The host storages kept for saves written behind (torch.distributed imported on first use)."""
        if self._host is None:
            from .host_copy import HostCopy

            self._host = HostCopy()
        return self._host

    def _staging(self) -> StagingCache:
        self._open()
        assert self._saving is not None
        return self._saving

    def close(self) -> None:
        """Wait for the background work (retrying undrained steps once), then free the buffers (idempotent); with
        `require_durable`, NotDurable where the newest save did not reach the farthest tier."""
        if self._saving is None:
            return
        self.wait_drained()
        newest = self._saved
        self._writer.shutdown()
        self._drainer.shutdown()
        self._saving.close()
        self._saving = None
        self._loading.close()
        if self._host is not None:
            self._host.close()
        for tier in self.tiers:
            tier.forget()
        self._check_durable(newest)

    def _check_durable(self, newest: TierSave | None) -> None:
        """NotDurable where `require_durable` and the newest save is not in the farthest tier."""
        farthest = len(self.tiers) - 1
        if not self.require_durable or newest is None or farthest in newest.durable_seconds:
            return
        missing = {farthest: newest.errors.get(farthest, "not drained")}
        raise NotDurable(newest.step, missing, [str(t) for t in self.tiers])

    def __enter__(self) -> TieredCheckpointer:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        """Close; a block that is already raising keeps its own error (a NotDurable is then logged, not raised)."""
        try:
            self.close()
        except NotDurable as lost:
            if error is None:
                raise
            log.error("%s", lost)

    def __repr__(self) -> str:
        state = "closed" if self._saving is None else "open"
        return f"TieredCheckpointer([{', '.join(repr(str(t)) for t in self.tiers)}], keep={self.keep}, {state})"


def state_bytes(state_dict: Any) -> int:
    """The bytes of a state dict's tensors' storages, each storage once (what a save writes, less its index)."""
    from .tree import named_tensors

    seen: dict[int, int] = {}
    for _, tensor in named_tensors(state_dict):
        storage = tensor.untyped_storage()
        seen[storage._cdata] = storage.nbytes()  # a storage by identity, as plan and host_copy count them
    return sum(seen.values())


def _renamed(old: str, new: str) -> None:
    """Warn a caller of a renamed verb (one verb pair for both checkpointers)."""
    warnings.warn(
        f"TieredCheckpointer.{old}() is {new}() now, as a Checkpointer's: it returns the state; `last` is the Restored "
        "record",
        DeprecationWarning,
        stacklevel=3,
    )


def _left(deadline: float | None) -> float | None:
    """Seconds left until `deadline` (None: no limit)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
