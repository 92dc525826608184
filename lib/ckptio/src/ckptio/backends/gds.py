"""GPUDirect Storage through kvikio's CuFile: file -> CUDA memory without a host bounce (loads only).

kvikio splits each pread into `task_size` tasks on its own thread pool, which defaults to ONE thread
(KVIKIO_NTHREADS); the reader sets it to IOOptions.threads before its first call. Every future's
byte count is checked (a short transfer is an error, not a smaller tensor), and destination tensors
stay referenced by their pieces until the futures complete. Whether cuFile really used GDS or fell
back to its POSIX compat path is kvikio's and cuFile's business: `path_taken()` reports what kvikio
says, so a caller can record it. `unavailable()` says why this backend cannot run here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BackendUnavailable
from ..memory import Staging, StagingBuffers, view
from ..options import IOOptions
from .base import ReadPiece


def unavailable() -> str | None:
    """None when gds can run here, else the reason (no CUDA device, kvikio missing or broken)."""
    try:
        import torch
    except ImportError:
        return "torch not installed"
    if not torch.cuda.is_available():
        return "no CUDA device"
    return import_problem()


def import_problem() -> str | None:
    """Why kvikio cannot be imported, or None: 26.x dlopens libcufile at import and may raise anything
    (an OSError for a missing libcufile), which must become a reason, never a traceback."""
    try:
        import kvikio  # noqa: F401
    except Exception as e:
        return f"kvikio not importable: {type(e).__name__}: {e}"
    return None


def set_threads(threads: int) -> int:
    """Size kvikio's thread pool, which defaults to ONE thread (26.x: defaults.set; older releases:
    num_threads_reset); return the size kvikio reports back."""
    import kvikio.defaults as kd

    setter = getattr(kd, "set", None)
    if setter is not None:
        setter("num_threads", threads)
        return int(kd.get("num_threads"))
    kd.num_threads_reset(threads)
    return int(kd.get_num_threads())


def compat_preferred() -> bool:
    """Whether kvikio does its I/O in its own compat mode (POSIX through host memory, no cuFile)."""
    import kvikio.defaults as kd

    return bool(kd.is_compat_mode_preferred() if hasattr(kd, "is_compat_mode_preferred") else kd.compat_mode())


def path_taken() -> str:
    """What kvikio says about how its I/O runs here: compat (POSIX) mode or cuFile (GDS or cuFile's own
    fallback, which only nvidia-fs counters can tell apart)."""
    return "kvikio compat mode (POSIX)" if compat_preferred() else "kvikio cuFile"


@dataclass(frozen=True)
class GdsBackend:
    """kvikio CuFile reads into CUDA tensors."""

    name: str = "gds"

    def create(self, path: str, options: IOOptions, staging: StagingBuffers, existing: bool = False) -> Any:
        """Saves write from host memory: refused with the reason."""
        raise BackendUnavailable("gds", "saves write from host memory: use backend 'direct' or 'buffered'")

    def open(self, path: str, options: IOOptions, staging: StagingBuffers | None) -> GdsReader:
        """Open `path` with CuFile (raising BackendUnavailable with the reason where gds cannot run)."""
        reason = unavailable()
        if reason:
            raise BackendUnavailable("gds", reason)
        return GdsReader(path, options, staging)


class GdsReader:
    """The reads of one load into CUDA memory."""

    alignment = 4096
    memory_alignment = 4096  # its pieces name device memory, never a host address

    def __init__(self, path: str, options: IOOptions, staging: StagingBuffers | None) -> None:
        import kvikio

        set_threads(options.threads)
        self.path = path
        self.staging = staging
        self.file = kvikio.CuFile(path, "r")

    def read(self, pieces: Sequence[ReadPiece]) -> None:
        """Issue every pread, then wait for each and check its byte count; pieces with a `done` see their
        bytes through a device-to-host copy into a staging buffer (the bytes that landed on the GPU)."""
        futures = [(p, self.file.pread(p.device, p.nbytes, p.offset)) for p in pieces if p.nbytes]
        for piece, future in futures:
            got = int(future.get())
            if piece.done is None:
                if got < piece.need:
                    raise OSError(f"{self.path}: kvikio read {got} of {piece.need} bytes at offset {piece.offset}")
                continue
            assert self.staging is not None, "verifying gds reads needs staging buffers"
            with self.staging.lend() as buf:
                piece.done(_to_host(piece.device, got, buf))

    def close(self) -> None:
        """Close the CuFile."""
        self.file.close()


def _to_host(device: Any, nbytes: int, buf: Staging) -> memoryview:
    """The first `nbytes` of a CUDA uint8 tensor, copied into a staging buffer."""
    import torch

    torch.frombuffer(buf.mm, dtype=torch.uint8, count=nbytes).copy_(device[:nbytes])
    return view(buf.address, nbytes)


BACKEND = GdsBackend()
