"""Checkpoint engines as sweep runners (torch_save, fastpersist, safetensors, dcp, kvikio, deepspeed).

base.py holds what they share (options, durable timed save, cold/warm verified load, peak RSS);
engines.py one class per library. torch and the libraries are imported only inside methods.
"""

from gdsbench.runners.checkpoint.base import OPTIONS, CheckpointRunner
from gdsbench.runners.checkpoint.engines import ENGINES

__all__ = ["ENGINES", "OPTIONS", "CheckpointRunner"]
