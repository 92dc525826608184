"""nvrx_local: nvidia-resiliency-ext's local checkpoints (LocalCheckpointManager with a CliqueReplicationStrategy:
each rank's state in host memory, replicas on other nodes), a baseline of the memory ladder (issue 39). It needs
CUDA: 0.4.1's own state dict (BasicTensorAwareStateDict) asserts every tensor is a CUDA tensor (its other one is
Megatron-Core's), and its replication sends each tensor with `.cuda()` (replication/group_utils.py,
isend_state_dict). On a CPU host its cases are skipped rows saying so (unmeasured.py)."""

from __future__ import annotations

import importlib.util

from gdsbench.cases import Case
from gdsbench.runners.base import RunContext
from gdsbench.runners.checkpoint.base import TORCH
from gdsbench.runners.checkpoint.unmeasured import Unmeasured

NEEDS_CUDA = (
    "needs CUDA: nvidia-resiliency-ext's local checkpoint state (BasicTensorAwareStateDict) asserts CUDA tensors and "
    "its replication sends each tensor with .cuda(); no CUDA device visible to torch"
)


class NvrxLocal(Unmeasured):
    name = "nvrx_local"
    description = "nvidia-resiliency-ext LocalCheckpointManager + CliqueReplicationStrategy (host RAM, replicas)"
    packages = (TORCH,)  # nvidia-resiliency-ext checked after CUDA: installing it on a CPU host would not help
    reason = (
        "gdsbench has no run path for nvidia-resiliency-ext yet: it needs CUDA tensors, and no GPU host has measured "
        "one to check it against"
    )

    def cannot_run(self, case: Case, ctx: RunContext) -> str | None:
        """No CUDA first (the reason that matters on a CPU host), then the package, then the missing run path."""
        import torch

        if not torch.cuda.is_available():
            return NEEDS_CUDA
        if importlib.util.find_spec("nvidia_resiliency_ext") is None:
            return "nvidia_resiliency_ext not installed: pip install nvidia-resiliency-ext numpy"
        return self.reason


ENGINE = NvrxLocal()
