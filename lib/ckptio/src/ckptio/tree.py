"""Key paths of the tensors in a nested state dict: how checkpoints name tensors in errors and how
load_into matches a destination's tensors with the saved ones."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch


def named_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(key path, tensor) for every tensor in nested dicts/lists/tuples; paths join keys with '.'.

    Example: {"layers": [{"w": t}]} yields ("layers.0.w", t).
    """
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from named_tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from named_tensors(v, f"{prefix}.{i}" if prefix else str(i))
