"""Staging for async saves: a state dict copied into host buffers kept between saves.

The buffers (torch's `_create_cpu_state_dict`, pinned where CUDA exists) are made once per layout (every
tensor's key path, shape, dtype and local shapes) and filled on every save: contiguous host tensors by a few threads moving
16 MiB slices with memmove (the GIL released), anything else (GPU tensors, strided views, tensor subclasses) by
torch's copy_ on the caller's thread (and its current stream). Not torch's copy_ for the host bytes: it runs on
torch's intra-op threads, one under torchrun with several ranks per node, and stalls whenever another process
holds one of their cores. The staged state dict is new containers around the buffers; other values are kept as
they are where immutable, deep-copied otherwise, so nothing the caller changes after staging reaches the save.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed.tensor import DTensor

from .. import memory
from ..options import default_prefault_threads

SLICE_BYTES = 16 << 20  # what one copy job moves: large enough to keep per-job Python negligible
IMMUTABLE = (int, float, complex, str, bytes, type(None))  # staged as they are (bool is an int)
PLAIN = (torch.Tensor, torch.nn.Parameter)  # tensor types whose bytes are their data

Layout = tuple[tuple[tuple[Any, ...], tuple[int, ...], torch.dtype, tuple[tuple[int, ...], ...]], ...]
Pair = tuple[torch.Tensor, torch.Tensor]  # (host buffer, source)


def tensors_by_path(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], torch.Tensor]]:
    """(key path as a tuple of keys and indices, tensor) for every tensor in nested dicts, lists and tuples."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from tensors_by_path(value, (*path, key))
    elif isinstance(obj, (list, tuple)):
        for index, value in enumerate(obj):
            yield from tensors_by_path(value, (*path, index))


def layout_of(tensors: dict[tuple[Any, ...], torch.Tensor]) -> Layout:
    """What staging buffers depend on: every tensor's key path, shape, dtype and the shapes of its local tensors
    (a DTensor's or ShardedTensor's share on this rank)."""
    return tuple(
        (path, tuple(t.shape), t.dtype, tuple(tuple(x.shape) for x in local_tensors(t))) for path, t in tensors.items()
    )


def local_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The tensors holding t's values on this rank: a DTensor's local tensor, a ShardedTensor's local shards, or t."""
    if isinstance(t, DTensor):
        return [t._local_tensor]
    if isinstance(t, ShardedTensor):
        return [shard.tensor for shard in t.local_shards()]
    return [t]


class HostBuffers(dict[str, Any]):
    """The host copy of a state dict's structure DCP's stager makes (a dict: its top level), with the layout it
    fits and its tensors by key path, refilled by every save of that layout."""

    def __init__(self, state_dict: dict[str, Any], layout: Layout) -> None:
        from torch.distributed._state_dict_utils import _create_cpu_state_dict

        super().__init__(_create_cpu_state_dict(state_dict, pin_memory=torch.cuda.is_available()))
        self.layout = layout
        self.by_path = dict(tensors_by_path(dict(self)))

    def fill(
        self, state_dict: dict[str, Any], tensors: dict[tuple[Any, ...], torch.Tensor], copier: Copier
    ) -> dict[str, Any]:
        """Copy `tensors` (state_dict's, by key path) into the buffers; the state dict to save, made of them."""
        staged = _rebuild(state_dict, self.by_path, ())
        copier.copy([pair for path, t in tensors.items() for pair in _pairs(self.by_path[path], t)])
        return staged


class Copier:
    """Threads kept between saves that move host bytes: as many as first touch gets (memory work, the cores of
    one NUMA node shared among the host's ranks). Kept, not made per save: on a busy host a thread woken from
    sleep is scheduled ahead of the others, a new one behind them."""

    def __init__(self) -> None:
        self.threads = default_prefault_threads()
        self._pool = ThreadPoolExecutor(self.threads, "ckptio-stage") if self.threads > 1 else None

    def copy(self, pairs: list[Pair]) -> None:
        """Each source into its buffer: what is not plain host bytes on this thread with copy_, then the host
        bytes in 16 MiB slices on the threads."""
        movable: list[Pair] = []
        for dst, src in pairs:
            if _movable(dst, src):
                movable.append((dst, src))
            else:
                dst.copy_(src)
        jobs = _slices(movable, SLICE_BYTES)
        list((self._pool.map if self._pool is not None else map)(_move, jobs))  # all done (or raised) on return

    def close(self) -> None:
        """Let the threads go."""
        if self._pool is not None:
            self._pool.shutdown()


def _rebuild(obj: Any, by_path: dict[tuple[Any, ...], torch.Tensor], path: tuple[Any, ...]) -> Any:
    """`obj` with every tensor replaced by its buffer, containers new, other values snapshotted."""
    if isinstance(obj, torch.Tensor):
        return by_path[path]
    if isinstance(obj, dict):
        return {key: _rebuild(value, by_path, (*path, key)) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        items = [_rebuild(value, by_path, (*path, index)) for index, value in enumerate(obj)]
        return tuple(items) if isinstance(obj, tuple) else items
    return obj if isinstance(obj, IMMUTABLE) else copy.deepcopy(obj)


def _pairs(buffer: torch.Tensor, source: torch.Tensor) -> list[Pair]:
    """The (host tensor, source tensor) pairs behind one staged value; none where the buffer is the source (what
    torch stages as it is: a 0-d DTensor, a ShardedTensor without local shards)."""
    return [] if buffer is source else list(zip(local_tensors(buffer), local_tensors(source)))


def _movable(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether src's bytes are its values, laid out as dst's, both in host memory: a raw copy is exact."""
    return (
        type(src) in PLAIN
        and type(dst) in PLAIN
        and src.device.type == dst.device.type == "cpu"
        and src.layout == dst.layout == torch.strided
        and src.dtype == dst.dtype
        and src.shape == dst.shape
        and src.is_contiguous()
        and dst.is_contiguous()
        and not (src.is_conj() or src.is_neg() or src.is_quantized)
    )


def _slices(pairs: list[Pair], size: int) -> list[list[tuple[int, int, int]]]:
    """The pairs' bytes as jobs of at most `size` bytes each: lists of (dst address, src address, bytes)."""
    jobs: list[list[tuple[int, int, int]]] = []
    job: list[tuple[int, int, int]] = []
    filled = 0
    for dst, src in pairs:
        to, frm, nbytes = dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size()
        done = 0
        while done < nbytes:
            take = min(nbytes - done, size - filled)
            job.append((to + done, frm + done, take))
            done, filled = done + take, filled + take
            if filled == size:
                jobs.append(job)
                job, filled = [], 0
    return [*jobs, job] if job else jobs


def _move(ranges: list[tuple[int, int, int]]) -> None:
    """One copy job: memmove each range (the GIL released)."""
    for dst, src, nbytes in ranges:
        memory.copy(dst, src, nbytes)
