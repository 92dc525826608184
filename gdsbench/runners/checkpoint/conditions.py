"""The conditions every checkpoint engine is measured under, the same for all of them: the page cache
before a load, the state of free memory before a save or load, and the check that a load returned exactly
the saved tensors (the CPU and memory a call cost: gdsbench.runners.resources)."""

from __future__ import annotations

import ctypes
import gc
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench.errors import ToolError
from gdsbench.runners import cache

CACHE_STATES = ("cold", "cold-machine", "warm")
MEMORY_STATES = ("recent", "idle", "as-is")
IDLE_SECONDS = 10.0  # free page reporting returns memory free for ~2 s; 10 s lets it finish for GiBs
READ_CHUNK = 16 << 20


def fsync_path(path: Path) -> None:
    """fsync one file or directory (a read-only descriptor is enough on Linux)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_through(path: Path) -> None:
    """Read a file once through the page cache (to make it warm), reusing one buffer."""
    buffer = bytearray(READ_CHUNK)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def set_cache(files: list[Path], state: str) -> str:
    """Make the checkpoint's files cold or warm in the page cache; say how, for the row's note. `cold` evicts
    only these files (fsync, then posix_fadvise DONTNEED); `cold-machine` drops the whole machine's page cache
    (root only: an explicit choice, it slows everything else running here)."""
    if state == "warm":
        for path in files:
            read_through(path)
        return "warm: files read once before the load"
    if state == "cold-machine":
        if cache.is_root() and cache.drop_caches():
            return "cold: the whole machine's page cache dropped (drop_caches)"
        raise ToolError("cache: cold-machine drops the machine's page cache and needs root; use cache: cold")
    for path in files:
        cache.evict(path)
    return "cold: posix_fadvise(DONTNEED) on each of the checkpoint's files"


def level_memory(state: str, nbytes: int) -> str:
    """Put free memory in the same state before every engine's save or load; say which, for the note.

    New memory is the cost of most loads (and of page-cache saves), and in a VM its price depends on
    history: memory the guest freed a moment ago is still backed by the host, memory free for a while
    may have been handed back (virtio-balloon free page reporting) and must be backed again at first
    touch (benchmarks/first_touch.py). Without this, an engine's number depends on what the case
    before it freed.
    """
    if state == "as-is":
        return "memory: as left by the previous case"
    trimmed = return_free_heap()
    if state == "recent":
        import torch

        touched = torch.ones(nbytes, dtype=torch.uint8)  # filled by torch's threads: every page touched
        del touched
        note = f"memory: {mib(nbytes)} touched and freed just before"
    else:
        time.sleep(IDLE_SECONDS)
        note = f"memory: {IDLE_SECONDS:.0f} s idle before"
    return note + (", C heap trimmed" if trimmed else "")


def return_free_heap() -> bool:
    """Collect garbage and hand the C heap's free pages back to the kernel (glibc malloc_trim).

    Without it, an engine that frees GiBs of small-ish tensors (glibc serves allocations up to 32 MiB
    from its heap once a large free has raised its mmap threshold) leaves them touched in the heap,
    and the next engine's malloc reuses them with no page faults: torch.load ran 2.7x faster right
    after DCP's load than before it. False where libc has no malloc_trim (not glibc).
    """
    gc.collect()
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim(0)
    return True


def verify(expected: Mapping[str, Any], loaded: Any, path: Path) -> None:
    """Raise ToolError unless `loaded` holds exactly the expected tensors (names, dtypes, shapes, values)."""
    import torch

    if not isinstance(loaded, Mapping):
        raise ToolError(f"{path}: load returned {type(loaded).__name__}, not a state dict")
    missing = [name for name in expected if name not in loaded]
    if missing or len(loaded) != len(expected):
        raise ToolError(f"{path}: loaded {len(loaded)} tensors, expected {len(expected)} (missing: {missing[:3]})")
    for name, tensor in expected.items():
        got = loaded[name]
        same = (
            isinstance(got, torch.Tensor)
            and got.dtype == tensor.dtype
            and got.shape == tensor.shape
            and torch.equal(got.cpu(), tensor)
        )
        if not same:
            raise ToolError(f"{path}: loaded tensor {name!r} differs from the saved one")


def initialised_like(tensors: Mapping[str, Any]) -> dict[str, Any]:
    """Zero-filled tensors shaped like `tensors`: memory already touched, as a constructed model's is."""
    import torch

    return {name: torch.zeros_like(tensor) for name, tensor in tensors.items()}


def touch_pages(tensors: Any) -> None:
    """Read one byte of every page of each tensor, so mmap-backed tensors are really in memory."""
    import torch

    for tensor in tensors:
        flat = tensor.reshape(-1).view(torch.uint8)
        if flat.numel():
            flat[::4096].sum()
            flat[-1].item()


def mib(num_bytes: int) -> str:
    """A byte count in MiB for notes."""
    return f"{num_bytes / 2**20:.0f} MiB"
