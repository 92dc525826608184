"""GPUDirect Storage through kvikio's CuFile: file -> CUDA tensors without a host bounce.

Used only for load(map_location=<cuda device>) when a CUDA device is present and kvikio imports;
`unavailable()` says why not otherwise, so callers report it instead of pretending.
"""

from __future__ import annotations

from typing import Any


def unavailable() -> str | None:
    """None when gds can run here, else the reason ('no CUDA device', 'kvikio not installed')."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA device"
    try:
        import kvikio  # noqa: F401
    except ImportError:
        return "kvikio not installed"
    return None


def read_storages(path: str, extents: list[tuple[str, int, int]], device: Any) -> dict[str, Any]:
    """Read (key, offset, nbytes) extents into new uint8 CUDA tensors with CuFile.pread."""
    import kvikio
    import torch

    out: dict[str, Any] = {}
    with kvikio.CuFile(path, "r") as f:
        futures = []
        for key, offset, nbytes in extents:
            t = torch.empty(nbytes, dtype=torch.uint8, device=device)
            out[key] = t
            if nbytes:
                futures.append(f.pread(t, nbytes, offset))
        for fut in futures:
            fut.get()
    return out
