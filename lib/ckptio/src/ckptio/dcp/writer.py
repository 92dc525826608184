"""Writer: a torch.distributed.checkpoint StorageWriter on ckptio's fast engine.

    import torch.distributed.checkpoint as dcp
    from ckptio import Writer
    dcp.save(state_dict, storage_writer=Writer("ckpt/"))                 # DCP's planners, our storage
    future = dcp.async_save(state_dict, storage_writer=Writer("ckpt/"))  # staged into reused buffers
    dcp.save(state_dict, storage_writer=Writer("s3://bucket/ckpt"))      # objects (ckptio[s3])

Each rank writes its share into one new file (parallel O_DIRECT, aligned, every chunk checksummed,
optionally compressed per chunk) and makes it durable before its results reach the coordinator; the
coordinator commits `.metadata` last (metadata.py has the protocol). On an object store (store.py chooses,
once per location) the file is an object uploaded whole and the commit a PUT (object_commit.py). DCP's dedup spreads replicated
tensors over the ranks; `stats` reports what this rank wrote and how many plans came from DCP's plan
cache. As an AsyncStager it copies the state dict into host buffers it keeps between saves (pinned
where CUDA exists) and allows one save in flight: staging the next one waits for the previous one's
data to be written, and re-raises its failure.
"""

from __future__ import annotations

import io
import os
import threading
import uuid
import weakref
from dataclasses import dataclass, field
from typing import Any

from torch.distributed.checkpoint.metadata import Metadata, StorageMeta
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future

from .. import codec as codecs
from .. import integrity
from ..errors import AsyncSaveFailed
from ..memory import StagingCache
from ..options import IOOptions, resolve_host
from . import groups
from .encode import prepare, staging_bytes
from .located import store_at, store_for
from .objects import check_saveable
from .records import data_file
from .stage import Copier, HostBuffers, layout_of, tensors_by_path
from .store import Store

DCP_VERSION = "1.0.0"


@dataclass
class WriteStats:
    """What the last save did: bytes this rank wrote (stored, raw), the most staging memory it held at once,
    the coordinator's view of every rank's share, and how many of the gathered plans DCP's plan cache
    marked unchanged."""

    stored_bytes: int = 0
    raw_bytes: int = 0
    staging_bytes: int = 0
    rank_bytes: list[int] = field(default_factory=list)
    cached_plans: int = 0
    plans: int = 0


class _InFlight:
    """At most one save in flight: set when a state dict is staged, cleared when its data is written (or
    the save is gone without writing); keeps the failure of the last one."""

    def __init__(self) -> None:
        self._idle = threading.Event()
        self._idle.set()
        self.error: BaseException | None = None
        self._wrote = False
        self.elsewhere = False  # the save was handed to another process (DCP's process executor)
        self._current = 0  # which save is in flight (a dropped earlier save must not end a later one)

    def wait(self) -> None:
        """Block until no save is in flight; raise (once) the previous save's failure."""
        self._idle.wait()
        error, self.error = self.error, None
        if error is not None:
            raise AsyncSaveFailed(f"the previous async save failed: {type(error).__name__}: {error}") from error

    def start(self, staged: Any) -> None:
        """A save of `staged` begins: in flight until write_data ends or the save drops it."""
        self._idle.clear()
        self._wrote = False
        self.elsewhere = False
        self._current += 1
        weakref.finalize(staged, self._dropped, self._current)

    def wrote(self, error: BaseException | None) -> None:
        """This rank's data is written (or failed)."""
        self._wrote = True
        self.error = error
        self._idle.set()

    def _dropped(self, save: int) -> None:
        """Save number `save` ended here; if it is the one in flight and never reached write_data in this
        process nor was handed to another, it failed before writing (planning). A save another process writes
        reports through DCP's future; an earlier save ending changes nothing."""
        if save != self._current:
            return
        if not self._idle.is_set() and not self._wrote and not self.elsewhere:
            self.error = RuntimeError("it ended before writing any data (see the future DCP returned)")
        self._idle.set()


class _Staged(dict[str, Any]):
    """The staged state dict handed to DCP: a plain dict that can be watched (weakref) for the save's end."""

    __slots__ = ("__weakref__",)


class Writer(StorageWriter, AsyncStager):
    """DCP StorageWriter: per-rank files written by ckptio's parallel O_DIRECT engine, committed atomically.

    Args:
        path: the checkpoint directory (created if missing), or `s3://bucket/prefix` (endpoint and credentials
            from the environment; BackendUnavailable without ckptio[s3]); `checkpoint_id` of dcp.save overrides it.
        options: how to move the bytes (threads, chunk size, backend...); host defaults if None.
        compression: a codec name ("none", "zstd", "blosc", ...: ckptio.codec.names()),
            applied per chunk to tensor items, lossless.
        checksum: "xxh3" (default) or "crc32c", over every stored chunk.
    """

    _synchronize_after_execute = False

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        options: IOOptions | None = None,
        compression: str = "none",
        checksum: str = "xxh3",
    ) -> None:
        super().__init__()
        self.options = resolve_host(options, "Writer writes")
        self.store: Store = store_for(path, self.options)
        self.compression = compression
        self.checksum = integrity.normalize(checksum)
        codecs.get(compression)  # refuse an unknown codec now, not in the middle of a save
        self.save_id = uuid.uuid4().hex
        self.rank = 0
        self.is_coordinator = False
        self.stats = WriteStats()
        self._local: dict[str, Any] = {}  # not pickled: staging buffers, the staged state dict, in-flight state

    def __getstate__(self) -> dict[str, Any]:
        """Picklable for DCP's process executor: buffers and locks stay behind. Being pickled means the staged
        save goes to another process, which writes from the staged buffers when this one cannot tell: the next
        stage() copies into new buffers instead of reusing them."""
        if "in_flight" in self._local:
            self._local["in_flight"].elsewhere = True
        return {k: v for k, v in self.__dict__.items() if k != "_local"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = {}

    @property
    def path(self) -> Any:
        """Where the checkpoint goes: a Path, or an ObjectLocation (str() gives its s3:// URL)."""
        return self.store.path

    def _state(self, name: str, make: Any) -> Any:
        """A process-local object made on first use (survives saves, not pickling)."""
        if name not in self._local:
            self._local[name] = make()
        return self._local[name]

    @property
    def process_group(self) -> Any:
        """The gloo group this Writer's background saves use (made by the first async save; None before it
        and without a multi-rank process group)."""
        return self._local.get("group")

    # -- StorageWriter ---------------------------------------------------------------------------

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """A new checkpoint begins; `checkpoint_id`, when given, is its location."""
        if checkpoint_id is not None:
            self.store = store_at(self.store, checkpoint_id, self.options)
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Learn this rank's role; every save writes files named by a new save id. A save DCP runs in the
        background waits for the previous one to end and takes its collectives off the caller's group."""
        groups.after_previous(self._local)
        if groups.off_main_thread() and self._local.get("group") is not None:
            groups.redirect(self._local["group"])
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank", _rank())
        self.save_id = uuid.uuid4().hex
        self.stats = WriteStats()
        self.store.begin(is_coordinator)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """Make the checkpoint directory; the plan itself is DCP's planner's."""
        self.store.prepare()
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """Count the plans DCP's plan cache found unchanged (usable=False); keep DCP's dedup as it is."""
        self.stats.plans = len(plans)
        self.stats.cached_plans = sum(not p.usable for p in plans)
        return plans

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Write this rank's items into its new file, durably (file and directory fsynced; an object uploaded)."""
        future: Future[list[WriteResult]] = Future()
        try:
            future.set_result(self._write(plan, planner))
            self._state("in_flight", _InFlight).wrote(None)
        except BaseException as e:
            self._state("in_flight", _InFlight).wrote(e)
            future.set_exception(e)  # type: ignore[arg-type]  # torch's stub types it as the result
        return future

    def _write(self, plan: SavePlan, planner: SavePlanner) -> list[WriteResult]:
        """The items resolved (lazily, one by one), written, and described by their records."""
        if not plan.items:
            return []
        items = [prepare(wi, _saveable(wi, planner.resolve_data(wi))) for wi in plan.items]
        codec = codecs.get(self.compression, threads=1)
        slot = self.options.chunk_bytes if codec.name == "none" else staging_bytes(self.options.chunk_bytes)
        staging = self._state("staging", StagingCache).within(self.options.buffer_bytes, slot)
        name = data_file(self.save_id, self.rank)
        records = self.store.write(name, items, self.options, codec, self.checksum, staging, self.rank)
        self.stats.stored_bytes = sum(r.stored_bytes for r in records)
        self.stats.staging_bytes = staging.peak_bytes
        self.stats.raw_bytes = sum(r.nbytes for r in records)
        return [WriteResult(wi.index, r.stored_bytes, r) for wi, r in zip(plan.items, records)]

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Commit: .metadata written last (every rank's data is durable by now), then earlier saves' files removed."""
        metadata.version = DCP_VERSION
        metadata.storage_data = {wr.index: wr.storage_data for rank in results for wr in rank}
        metadata.storage_meta = self.storage_meta()
        self.store.commit(metadata, self.save_id)
        self.stats.rank_bytes = [sum(wr.size_in_bytes for wr in rank) for rank in results]

    def storage_meta(self) -> StorageMeta | None:
        """The checkpoint's location and this save's id, for the planner and the metadata."""
        return StorageMeta(checkpoint_id=str(self.path), save_id=self.save_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Any local path, or an `s3://bucket/prefix`, can hold a checkpoint."""
        return isinstance(checkpoint_id, (str, os.PathLike))

    # -- AsyncStager -----------------------------------------------------------------------------

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """Copy the state dict into host buffers kept between saves (stage.py: pinned where CUDA exists, host
        bytes moved by a few threads), after the previous save's data is written; the caller blocks for the copy."""
        in_flight = self._state("in_flight", _InFlight)
        in_flight.wait()
        groups.own_group(self._local)  # every rank, here, in the same order: the background save's group
        if in_flight.elsewhere:  # the last staged copy may still be read by the process writing it
            self._local.pop("staged", None)
        tensors = dict(tensors_by_path(state_dict))
        layout = layout_of(tensors)
        buffers = self._local.get("staged")
        if buffers is None or buffers.layout != layout:  # a new structure: new buffers
            buffers = self._local["staged"] = HostBuffers(state_dict, layout)
        staged = _Staged(buffers.fill(state_dict, tensors, self._state("copier", Copier)))
        in_flight.start(staged)
        return staged

    def synchronize_staging(self) -> None:
        """Staging is synchronous: nothing to wait for."""

    def close(self) -> None:
        """Wait for a save in flight, then free the staged copy, the staging buffers and the copying threads."""
        if "in_flight" in self._local:
            self._local["in_flight"]._idle.wait()
        self._local.pop("staged", None)
        self.store.close()
        for name in ("staging", "copier"):
            held = self._local.pop(name, None)
            if held is not None:
                held.close()


def _saveable(write_item: Any, data: Any) -> Any:
    """A write item's data, after refusing a byte item no load could accept (UnsafeObject)."""
    if isinstance(data, io.BytesIO):
        check_saveable(data, write_item.index.fqn)
    return data


def _rank() -> int:
    """This process's rank where DCP did not say (older releases), 0 without a process group."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
