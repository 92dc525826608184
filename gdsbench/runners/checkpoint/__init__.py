"""Checkpoint engines as sweep runners: one module per engine over the template in base.py.

Adding an engine is adding a module that defines `ENGINE` and one line here.
"""

from gdsbench.runners.checkpoint import (
    dcp,
    dcp_fast,
    dcp_upload,
    deepspeed,
    fastpersist,
    kvikio,
    s3torch_dcp,
    s3torch_save,
    safetensors,
    tiered,
    torch_mmap,
    torch_save,
    torch_save_ranks,
)
from gdsbench.runners.checkpoint.base import OPTIONS, CheckpointRunner

ENGINES: tuple[CheckpointRunner, ...] = tuple(
    module.ENGINE
    for module in (
        torch_save,
        torch_mmap,
        fastpersist,
        safetensors,
        dcp,
        dcp_fast,
        torch_save_ranks,
        kvikio,
        deepspeed,
        s3torch_save,
        s3torch_dcp,
        tiered,
        dcp_upload,
    )
)

__all__ = ["ENGINES", "OPTIONS", "CheckpointRunner"]
