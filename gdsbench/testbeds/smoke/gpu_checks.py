"""The smoke run's GPU checks, each run in its own process: `python -m gdsbench.testbeds.smoke.gpu_checks WHAT DIR`.

- `kvikio DIR`: kvikio's own view (compat mode, GDS availability) and a 512 MiB CuFile write and cold read
  at 1 and 8 kvikio threads, byte counts and contents checked (GPU-NOTES S3).
- `gds-load DIR`: ckptio.load(map_location="cuda", options=IOOptions(backend="gds")) round
  trip, then one flipped byte, which must be refused (CorruptCheckpoint); the direct backend likewise.
Exit status 0 only when every check held.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def kvikio_check(directory: Path) -> bool:
    """kvikio's mode and a write + cold read at 1 and 8 threads, each verified."""
    import kvikio
    import kvikio.defaults as kd
    import torch

    from gdsbench.sysinfo.kvikio_api import probe

    print("kvikio", kvikio.__version__, "probe:", probe())
    path, ok = directory / "gdsbench-smoke-kvikio.bin", True
    src = torch.randint(0, 256, (512 << 20,), dtype=torch.uint8, device="cuda")
    try:
        for threads in (1, 8):
            kd.set("num_threads", threads)
            with kvikio.CuFile(path, "w") as f:
                started = time.perf_counter()
                wrote = f.pwrite(src, src.numel(), 0).get()
                os.fsync(f.fileno())
                write_s = time.perf_counter() - started
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
            dst = torch.empty_like(src)
            with kvikio.CuFile(path, "r") as f:
                started = time.perf_counter()
                read = f.pread(dst, dst.numel(), 0).get()
                read_s = time.perf_counter() - started
            equal = bool(torch.equal(src, dst))
            ok = ok and equal and wrote == read == src.numel()
            print(
                f"threads={threads} wrote={wrote} read={read} equal={equal} "
                f"write={wrote / write_s / 2**30:.2f}GiB/s read={read / read_s / 2**30:.2f}GiB/s"
            )
    finally:
        path.unlink(missing_ok=True)
    return ok


def gds_load_check(directory: Path) -> bool:
    """The gds backend's round trip on the GPU, then a flipped byte refused by gds and by direct."""
    import torch
    from ckptio import IOOptions, load, save
    from ckptio.errors import CorruptCheckpoint
    from ckptio.inspect import read_index

    path = directory / "gdsbench-smoke-gds.pt"
    state = {"w": torch.randn(2048, 2048), "b": torch.arange(17.0)}
    try:
        save(state, path)
        out = load(path, map_location="cuda", options=IOOptions(backend="gds", threads=8))
        same = all(out[k].is_cuda and torch.equal(out[k].cpu(), state[k]) for k in state)
        print("round trip on the GPU, bit-exact:", same)
        entry = max(read_index(path).storages, key=lambda s: s.nbytes)
        with open(path, "r+b") as f:
            f.seek(entry.offset + 100)
            byte = f.read(1)
            f.seek(entry.offset + 100)
            f.write(bytes([byte[0] ^ 0xFF]))
        refused = []
        for backend in ("gds", "direct"):
            try:
                load(path, map_location="cuda", options=IOOptions(backend=backend))
                print(backend, "-> loaded: corruption NOT detected")
                refused.append(False)
            except CorruptCheckpoint as exc:
                print(backend, "-> refused:", str(exc)[:200])
                refused.append(True)
        return same and all(refused)
    finally:
        path.unlink(missing_ok=True)


CHECKS = {"kvikio": kvikio_check, "gds-load": gds_load_check}

if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    sys.exit(0 if CHECKS[sys.argv[1]](Path(sys.argv[2])) else 1)
