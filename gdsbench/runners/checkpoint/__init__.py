"""Checkpoint engines as sweep runners: one module per engine over the templates in base.py and distributed.py.

Adding an engine is adding a module here that defines `ENGINE`: the registry (gdsbench.runners) finds it.
"""

from gdsbench.runners.checkpoint.base import OPTIONS, CheckpointRunner

__all__ = ["OPTIONS", "CheckpointRunner"]
