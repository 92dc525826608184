"""Key paths of the tensors in a nested state dict: how checkpoints name tensors in errors and how
load_into matches a destination's tensors (and, when strict, its keys) with the saved ones."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch


def _children(obj: Any) -> list[tuple[str, Any]]:
    """The (key, value) pairs of a dict, list or tuple; none for anything else (a leaf)."""
    if isinstance(obj, Mapping):
        return [(str(k), v) for k, v in obj.items()]
    if isinstance(obj, (list, tuple)):
        return [(str(i), v) for i, v in enumerate(obj)]
    return []


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def named_tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """(key path, tensor) for every tensor in nested dicts/lists/tuples; paths join keys with '.'.

    Example: {"layers": [{"w": t}]} yields ("layers.0.w", t).
    """
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
        return
    for key, value in _children(obj):
        yield from named_tensors(value, _join(prefix, key))


def key_paths(obj: Any) -> tuple[set[str], set[str]]:
    """(every key path in nested dicts/lists/tuples, the paths of its leaves): values that are not
    containers, and empty containers. Example: {"a": {"b": 1}, "c": []} gives ({"a", "a.b", "c"}, {"a.b", "c"})."""
    nodes: set[str] = set()
    leaves: set[str] = set()
    pending: list[tuple[str, Any]] = [("", obj)]
    while pending:
        prefix, value = pending.pop()
        children = [] if isinstance(value, torch.Tensor) else _children(value)
        if prefix:
            nodes.add(prefix)
            if not children:
                leaves.add(prefix)
        pending.extend((_join(prefix, key), child) for key, child in children)
    return nodes, leaves
