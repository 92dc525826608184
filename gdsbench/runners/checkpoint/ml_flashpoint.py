"""ml_flashpoint: Google's ML Flashpoint (pip `ml-flashpoint`), memory-first checkpoints in tmpfs replicated to a
peer host, a baseline of the memory ladder (issue 39). It cannot be installed here: 0.0.10 is a source
distribution whose CMake build clones abseil-cpp from github.com (FetchContent), and its pytorch extra pins
torch==2.8.0; on this machine pip's build stops at "Could not resolve host: github.com". Its cases are skipped
rows saying so (unmeasured.py)."""

from __future__ import annotations

from gdsbench.runners.checkpoint.base import Package
from gdsbench.runners.checkpoint.unmeasured import Unmeasured

BUILD = (
    "pip install ml-flashpoint (0.0.10 is a source build: CMake, a C++20 compiler, and abseil-cpp cloned from "
    "github.com during the build; its pytorch extra pins torch==2.8.0)"
)


class MlFlashpoint(Unmeasured):
    name = "ml_flashpoint"
    description = "ML Flashpoint's MemoryStorageWriter (DCP into tmpfs, pairwise replication to a peer host)"
    packages = (Package("ml_flashpoint", BUILD),)
    reason = (
        "ml_flashpoint imports, but gdsbench has no run path for it: it was never installable where gdsbench is "
        "built (its build clones abseil-cpp from github.com), so no row of it was ever measured to check one against"
    )


ENGINE = MlFlashpoint()
