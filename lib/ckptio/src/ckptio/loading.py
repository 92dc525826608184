"""The load engines behind load(), load_into() and load_mmap(): validate the index, choose the read
strategy and backend, read and verify, then rebuild the object with torch's weights_only unpickler.

Modes that exclude each other are separate functions: `load` reads into new memory (CPU, or a
CUDA device through gds or a host read and a copy), `load_into` fills a caller's existing tensors,
`load_mmap` maps the file. A combination that cannot be honoured raises; none is ignored silently.
The path a load took is logged on the `ckptio` logger and returned as `Loaded`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping, MutableSequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from . import format as fmt
from .backends import gds
from .errors import BackendUnavailable, OptionError, StateDictMismatch
from .memory import StagingBuffers, StagingCache
from .options import IOOptions
from .places import Source, place
from .read import map_storages, read_device, read_host
from .tree import key_paths, named_tensors
from .unpickle import read_pickle, rebuild

log = logging.getLogger("ckptio")


@dataclass(frozen=True)
class Loaded:
    """What a load returned and how: the object, and the I/O path taken (for logs and benchmarks)."""

    obj: Any
    path_taken: str


def device_of(map_location: Any) -> torch.device:
    """Resolve map_location (None, str, torch.device) to a CPU or CUDA device, checking CUDA exists."""
    device = torch.device("cpu" if map_location is None else map_location)
    if device.type not in ("cpu", "cuda"):
        raise OptionError(f"map_location must be 'cpu' or a CUDA device, not {map_location!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendUnavailable("cuda", f"map_location={map_location!r} but no CUDA device is available")
    return device


@contextlib.contextmanager
def opened(path: str | os.PathLike[str], options: IOOptions) -> Iterator[Source]:
    """A checkpoint's validated index and its readers for the block, as the place it is in gives them (a file
    pinned by its descriptor, an `s3://` object pinned by its ETag)."""
    with place(path).opened(options) as source:
        yield source


def _staging(cache: StagingCache, options: IOOptions, index: fmt.Index) -> StagingBuffers:
    """Staging buffers sized for the file's own chunks."""
    return cache.within(options.buffer_bytes, index.chunk_bytes)


def _host_backend(options: IOOptions, source: Source | None = None) -> str:
    """The backend reading into host memory ('gds' cannot); an object's is its S3 client ('s3')."""
    if options.backend == "gds" and source and source.on_objects:
        raise BackendUnavailable("gds", "gds reads files: an s3:// object is read by ranged GETs into host memory")
    if options.backend == "gds":
        raise BackendUnavailable("gds", "gds reads into CUDA memory only: load with map_location='cuda'")
    if source and source.on_objects:
        return "s3"
    return "direct" if options.backend == "auto" else options.backend


def _read_path(source: Source, device: torch.device, options: IOOptions) -> tuple[str, str]:
    """The backend a load into new memory on `device` uses, and how it goes (for the log)."""
    if source.on_objects:
        where = "new host memory" if device.type == "cpu" else "host memory, then copied to the device"
        return _host_backend(options, source), f"{options.object_connections} ranged GETs in flight into {where}"
    if device.type == "cuda":
        return _device_backend(options)
    return _host_backend(options), f"{_host_backend(options)} read into new host memory"


def _device_backend(options: IOOptions) -> tuple[str, str]:
    """For a CUDA destination: 'gds' when asked (or 'auto' and usable), else a host backend; and why."""
    reason = gds.unavailable()
    if options.backend == "gds" and reason:
        raise BackendUnavailable("gds", reason)
    if options.backend in ("gds", "auto") and reason is None:
        return "gds", f"gds: {gds.path_taken()}, {options.threads} kvikio threads"
    name = _host_backend(options)
    why = f" (gds unavailable: {reason})" if options.backend == "auto" else ""
    return name, f"{name} read to host memory, then copied to the device{why}"


def load_new(
    path: str | os.PathLike[str], device: torch.device, options: IOOptions, verify: bool, cache: StagingCache
) -> Loaded:
    """Read a checkpoint into new memory on `device` and rebuild its object."""
    with opened(path, options) as source:
        index = source.index
        backend, how = _read_path(source, device, options)
        reader = source.reader(options, _staging(cache, options, index), backend)
        try:
            if backend == "gds":
                storages = read_device(index, reader, device, verify)
            else:
                storages = read_host(index, reader, options, verify, placed={})
                storages = {k: v.to(device=device) for k, v in storages.items()} if device.type != "cpu" else storages
        finally:
            reader.close()
        obj = rebuild(index, read_pickle(index, verify, source.read_at), storages)
    log.info("load %s: %s", index.path, how)
    return Loaded(obj, how)


def load_mapped(path: str | os.PathLike[str], options: IOOptions, verify: bool) -> Loaded:
    """Map a checkpoint copy-on-write, fault it in with parallel readahead, rebuild its object."""
    path = place(path).local_file("load_mmap maps a local file, not a URL: use load or load_into for an object")
    if options.backend not in ("auto", "buffered"):
        raise OptionError(f"load_mmap reads through the page cache: it cannot use backend {options.backend!r}")
    how = f"mmap of the file, faulted in by {options.threads} readahead threads"
    with fmt.pinned_index(path) as index:
        obj = rebuild(index, read_pickle(index, verify), map_storages(index, options, verify))
    log.info("load %s: %s", index.path, how)
    return Loaded(obj, how)


def load_existing(
    path: str | os.PathLike[str],
    state_dict: Any,
    options: IOOptions,
    verify: bool,
    cache: StagingCache,
    strict: bool = True,
) -> Loaded:
    """Fill the tensors of `state_dict` with the saved ones of the same key path, in place; plain
    values (step counters) are replaced where the containers allow. Returns `state_dict` itself.
    With `strict`, both must have the same key paths (checked before anything is read).

    Only the storages the destination asks for are read. A storage read whole into a CPU destination
    that covers it contiguously goes in place (through staging buffers); any other is read into new
    memory and copied (CUDA destinations, views, non-contiguous tensors)."""
    with opened(path, options) as source:
        index = source.index
        pickled = read_pickle(index, verify, source.read_at)
        layout = _Layout(index, pickled)
        targets = layout.match(state_dict)
        if strict:
            layout.check_keys(state_dict)
        placed = layout.placed(targets)
        wanted = {layout.key_of(name) for name in targets}
        backend = _host_backend(options, source)
        subset = replace(index, storages=tuple(s for s in index.storages if s.key in wanted))
        reader = source.reader(options, _staging(cache, options, index), backend)
        try:
            addresses = {key: t.data_ptr() for key, t in placed.items()}
            storages = read_host(subset, reader, options, verify, addresses)
        finally:
            reader.close()
    storages.update({key: t.untyped_storage() for key, t in placed.items()})
    saved = rebuild(index, pickled, {**layout.meta, **storages})
    _copy_unplaced(saved, targets)
    _merge_plain(saved, state_dict)
    how = f"{backend} read into {len(placed)} existing tensors in place, {len(targets) - len(placed)} by copy"
    log.info("load_into %s: %s", index.path, how)
    return Loaded(state_dict, how)


class _Layout:
    """The saved object without its data: tensors on the meta device, and which storage each views."""

    def __init__(self, index: fmt.Index, pickled: bytes) -> None:
        self.index = index
        self.meta = {s.key: torch.UntypedStorage(s.nbytes, device="meta") for s in index.storages}
        self._keys = {st._cdata: key for key, st in self.meta.items()}
        self.tree = rebuild(index, pickled, self.meta)
        self.saved = dict(named_tensors(self.tree))
        self._nbytes = {s.key: s.nbytes for s in index.storages}

    def key_of(self, name: str) -> str:
        """The index key of the storage the saved tensor `name` views."""
        return self._keys[self.saved[name].untyped_storage()._cdata]

    def match(self, state_dict: Any) -> dict[str, torch.Tensor]:
        """The destination's tensors by key path, each checked against the saved tensor of that path."""
        targets: dict[str, torch.Tensor] = {}
        for name, t in named_tensors(state_dict):
            s = self.saved.get(name)
            if s is None:
                raise StateDictMismatch(self.index.path, name, "the checkpoint has no tensor with this key path")
            if (s.dtype, s.shape) != (t.dtype, t.shape):
                problem = f"saved {s.dtype} {tuple(s.shape)}, destination {t.dtype} {tuple(t.shape)}"
                raise StateDictMismatch(self.index.path, name, problem)
            if t.device.type not in ("cpu", "cuda"):
                problem = f"destination on {t.device}: only cpu and cuda tensors can be filled"
                raise StateDictMismatch(self.index.path, name, problem)
            targets.setdefault(name, t)
        return targets

    def check_keys(self, state_dict: Any) -> None:
        """The saved object and `state_dict` have the same key paths (an empty dict or list is a leaf, so
        a fresh optimizer's empty `state` against a saved one names the moments it lacks); else
        StateDictMismatch naming the paths only one side has."""
        saved_nodes, saved_leaves = key_paths(self.tree)
        dest_nodes, dest_leaves = key_paths(state_dict)
        unexpected, missing = sorted(saved_leaves - dest_nodes), sorted(dest_leaves - saved_nodes)
        if unexpected or missing:
            problem = "; ".join(
                f"{what}: {_listed(paths)}"
                for what, paths in (("saved, not in the destination", unexpected), ("not saved", missing))
                if paths
            )
            raise StateDictMismatch(self.index.path, (unexpected or missing)[0], f"{problem} (strict=False skips them)")

    def placed(self, targets: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Storages a destination can receive whole, in place (key -> destination tensor): the saved
        tensor and the CPU destination both cover their whole storage contiguously."""
        out: dict[str, torch.Tensor] = {}
        for name, t in targets.items():
            key = self.key_of(name)
            whole = all(
                x.is_contiguous() and x.storage_offset() == 0 and x.untyped_storage().nbytes() == self._nbytes[key]
                for x in (self.saved[name], t)
            )
            if whole and t.device.type == "cpu" and key not in out:
                out[key] = t
        return out


def _listed(paths: list[str], most: int = 8) -> str:
    """Up to `most` key paths, then how many more."""
    more = f" and {len(paths) - most} more" if len(paths) > most else ""
    return ", ".join(paths[:most]) + more


def _copy_unplaced(saved: Any, targets: Mapping[str, torch.Tensor]) -> None:
    """Copy the saved tensors that were not read in place into their destinations (any device, any layout)."""
    by_name = dict(named_tensors(saved))
    for name, t in targets.items():
        source = by_name[name]
        if source.device.type != "meta" and source.data_ptr() != t.data_ptr():
            t.copy_(source)


def _merge_plain(saved: Any, target: Any) -> None:
    """Set the saved plain values (not tensors) into the destination where both have the same key path
    and the destination container is mutable: dict entries and list items; tuples are walked, not set."""
    if isinstance(saved, Mapping) and isinstance(target, Mapping):
        pairs = [(k, saved[k]) for k in saved if k in target]
    elif isinstance(saved, (list, tuple)) and isinstance(target, (list, tuple)):
        pairs = list(enumerate(saved[: len(target)]))
    else:
        return
    for key, value in pairs:
        current = target[key]
        if isinstance(value, torch.Tensor) or isinstance(current, torch.Tensor):
            continue
        if isinstance(value, (Mapping, list, tuple)):
            _merge_plain(value, current)
        elif isinstance(target, (MutableMapping, MutableSequence)):
            target[key] = value
