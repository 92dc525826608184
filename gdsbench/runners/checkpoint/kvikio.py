"""kvikio: GPUDirect Storage through kvikio's CuFile, from and to CUDA tensors.

Every tensor, already on the GPU (copied there once, unmeasured), is written at a 4 KiB-aligned
offset of `data.bin` with pwrite futures issued together, then `index.json` (the marker, written
last) records where each lies; loads pread into fresh CUDA tensors. kvikio's own thread pool runs
each call's 4 MiB tasks and defaults to ONE thread, so the engine sets it to the case's `threads`
(gdsbench.sysinfo.kvikio_api.set_threads). Every future's byte count is checked, and temporary
contiguous copies stay referenced until their write completes. Needs CUDA and an importable kvikio
(26.x dlopens libcufile at import and can raise anything): the case is skipped with the reason
otherwise. The row's `path` says how the bytes went: `posix` in kvikio's compat mode, else what
nvidia-fs's counters (gdsbench.runners.gds_path) prove: gds, compat or unknown.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gdsbench import workloads
from gdsbench.cases import Case, Pattern, Transfer
from gdsbench.runners import gds_path
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.base import InProcessRunner
from gdsbench.sysinfo import kvikio_api as kv

ALIGNMENT = 4096
DATA = "data.bin"
INDEX = "index.json"


def kvikio_reason() -> str | None:
    """Why kvikio cannot run here (no CUDA device first: it is the reason that matters), or None."""
    import torch

    if not torch.cuda.is_available():
        return "needs CUDA: no CUDA device visible to torch"
    problem = kv.import_problem()
    return f"{problem}; pip install kvikio-cu12 (or -cu13, matching torch's CUDA)" if problem else None


def checked(futures: list[tuple[Any, int]], path: Path, what: str) -> None:
    """Wait for every kvikio future; a short transfer is an error, never a smaller tensor."""
    for future, expected in futures:
        moved = int(future.get())
        if moved != expected:
            raise OSError(f"{path}: kvikio {what} moved {moved} of {expected} bytes")


class Kvikio(InProcessRunner):
    """GPUDirect Storage through kvikio's CuFile, from and to CUDA tensors."""

    name = "kvikio"
    description = "kvikio CuFile pwrite/pread of CUDA tensors (GPUDirect Storage), threads = kvikio's pool"
    calls = {Pattern.SAVE: "kvikio.CuFile.pwrite", Pattern.LOAD: "kvikio.CuFile.pread"}
    transfers = frozenset({Transfer.GDS})
    threaded = True
    suffix = ".kvikio"
    marker = INDEX

    def __init__(self) -> None:
        self._staged: tuple[int, dict[str, Any]] | None = None  # (id of the workload dict, its GPU copy)

    def release(self) -> None:
        """Drop the workload's GPU copy."""
        self._staged = None
        super().release()

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """CUDA first, then an importable kvikio."""
        return kvikio_reason()

    def prepare(self, case: Case, workload: workloads.Workload, path: Path, ctx: RunContext) -> Any:
        """Saves write the workload copied to the GPU once (one copy kept, for the current workload only)."""
        if case.pattern is Pattern.LOAD:
            return None
        super().prepare(case, workload, path, ctx)
        tensors = workload.tensors
        if self._staged is None or self._staged[0] != id(tensors):
            self._staged = None
            self._staged = (id(tensors), {name: t.cuda() for name, t in tensors.items()})
        return self._staged[1]

    def begin(self, case: Case) -> tuple[gds_path.Witness, str]:
        """Size kvikio's pool from the case and start watching nvidia-fs; say how kvikio will do its I/O."""
        threads, compat = kv.set_threads(case.get("threads")), kv.compat_preferred()
        return gds_path.Witness(
            case
        ).start(), f"kvikio {threads} threads, {'compat mode (POSIX)' if compat else 'cuFile'}"

    def end(self, witness: gds_path.Witness, how: str) -> str:
        """Record the path the bytes took (posix in kvikio's compat mode) for the row; return the note."""
        if kv.compat_preferred():
            self.last_path, why = "posix", "kvikio compat mode: POSIX I/O through host memory"
        else:
            self.last_path, why = witness.verdict()
        return f"{how}; {why}"

    def save(self, staged: Any, path: Path, case: Case) -> str | None:
        """pwrite every tensor at an aligned offset, all in flight together, then the index."""
        import kvikio
        import torch

        witness, how = self.begin(case)
        path.mkdir(exist_ok=True)
        index, offset, keep = {}, 0, []
        with kvikio.CuFile(path / DATA, "w") as f:
            futures = []
            for name, tensor in staged.items():
                data = tensor.reshape(-1).view(torch.uint8)  # a copy for non-contiguous tensors: kept below
                keep.append(data)
                index[name] = {
                    "offset": offset,
                    "nbytes": data.numel(),
                    "dtype": str(tensor.dtype).split(".")[-1],
                    "shape": list(tensor.shape),
                }
                futures.append((f.pwrite(data, data.numel(), offset), data.numel()))
                offset += -(-data.numel() // ALIGNMENT) * ALIGNMENT
            checked(futures, path / DATA, "pwrite")
        (path / INDEX).write_text(json.dumps(index))
        return self.end(witness, how)

    def load(self, path: Path, case: Case, staged: Any) -> Mapping[str, Any]:
        """pread every tensor into fresh CUDA memory, all in flight together."""
        import kvikio
        import torch

        witness, how = self.begin(case)
        index = json.loads((path / INDEX).read_text())
        buffers = {name: torch.empty(e["nbytes"], dtype=torch.uint8, device="cuda") for name, e in index.items()}
        with kvikio.CuFile(path / DATA, "r") as f:
            futures = [(f.pread(buffers[name], e["nbytes"], e["offset"]), e["nbytes"]) for name, e in index.items()]
            checked(futures, path / DATA, "pread")
        self.end(witness, how)
        return {name: buffers[name].view(getattr(torch, e["dtype"])).reshape(e["shape"]) for name, e in index.items()}


ENGINE = Kvikio()
