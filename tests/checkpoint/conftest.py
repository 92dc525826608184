"""Shared helpers for the checkpoint tests: bit-exact comparison and random state dicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torch", reason="torch is not installed: pip install 'gdsbench[checkpoint]'")
import torch


def _storage_bytes(t: torch.Tensor) -> bytes:
    """The whole untyped storage of a tensor, as bytes (bit-exact comparisons, NaNs included)."""
    flat = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage())
    return flat.numpy().tobytes()


def assert_same(a: Any, b: Any, path: str = "") -> None:
    """Recursively assert two saved objects are identical: dtypes, shapes, strides, bytes, values."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), path
        assert (a.dtype, a.shape, a.stride(), a.storage_offset()) == (
            b.dtype,
            b.shape,
            b.stride(),
            b.storage_offset(),
        ), path
        assert _storage_bytes(a) == _storage_bytes(b), path
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b), path
        for k in a:
            assert_same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}.{i}")
    else:
        assert type(a) is type(b) and (a == b or (a != a and b != b)), path


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """A tensor of random bits (never zeros) of any dtype; bools stay 0/1."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for d in shape:
        n *= d
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    size = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    return raw.view(dtype).reshape(shape)


@pytest.fixture
def same() -> Callable[[Any, Any], None]:
    """The bit-exact recursive comparison."""
    return assert_same


@pytest.fixture
def rand() -> Callable[..., torch.Tensor]:
    """random_tensor(shape, dtype, seed)."""
    return random_tensor
