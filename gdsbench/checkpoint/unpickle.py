"""Rebuild a saved object from its data.pkl with torch's weights_only unpickler (never arbitrary
unpickling), resolving each persistent storage id to the bytes a read strategy placed in memory."""

from __future__ import annotations

import io
import os
import pickle
from typing import Any

import torch

from . import format as fmt
from . import integrity
from .errors import CorruptCheckpoint, InvalidCheckpoint, TruncatedCheckpoint


def read_pickle(index: fmt.Index, verify: bool) -> bytes:
    """The data.pkl bytes (a small buffered read), checked against the index digest."""
    with open(index.data_path, "rb", buffering=0) as f:
        data = os.pread(f.fileno(), index.pickle_nbytes, index.pickle_offset)
    if len(data) != index.pickle_nbytes:
        raise TruncatedCheckpoint(
            index.path, index.pickle_offset + index.pickle_nbytes, index.pickle_offset + len(data)
        )
    digest = integrity.digest_fn(index.checksum)
    if verify and digest and digest(memoryview(data)) != index.pickle_digest:
        raise CorruptCheckpoint(index.path, "<pickle data.pkl>", "object structure record")
    return data


def rebuild(index: fmt.Index, data: bytes, storages: dict[str, torch.UntypedStorage]) -> Any:
    """The saved object, its tensors viewing `storages` (by key), through the weights_only unpickler."""
    from torch import _weights_only_unpickler as restricted

    entries = {s.key: s for s in index.storages}
    typed: dict[str, torch.storage.TypedStorage] = {}

    def persistent_load(saved_id: Any) -> torch.storage.TypedStorage:
        if not (isinstance(saved_id, tuple) and len(saved_id) == 5 and saved_id[0] == "storage"):
            raise InvalidCheckpoint(index.path, f"unexpected persistent id {saved_id!r:.80}")
        storage_type, key, _location, numel = saved_id[1:]
        dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
        entry = entries.get(key)
        if (
            entry is None
            or entry.dtype != str(dtype).removeprefix("torch.")
            or entry.nbytes != numel * torch._utils._element_size(dtype)
        ):
            raise InvalidCheckpoint(index.path, f"pickle refers to storage {key!r} unlike the index")
        if key not in typed:
            typed[key] = torch.storage.TypedStorage(wrap_storage=storages[key], dtype=dtype, _internal=True)
        return typed[key]

    unpickler = restricted.Unpickler(io.BytesIO(data), encoding="utf-8")
    unpickler.persistent_load = persistent_load  # type: ignore[method-assign]
    try:
        return unpickler.load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, RuntimeError) as e:
        raise InvalidCheckpoint(index.path, f"weights_only unpickling refused the object: {e}") from None
