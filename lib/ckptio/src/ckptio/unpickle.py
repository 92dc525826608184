"""Rebuild a saved object from its data.pkl with torch's weights_only unpickler (never arbitrary
unpickling), resolving each persistent storage id to the bytes a read strategy placed in memory."""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import threading
from collections.abc import Iterator
from typing import Any

import torch

from . import format as fmt
from . import integrity
from .errors import CorruptCheckpoint, InvalidCheckpoint, TruncatedCheckpoint, UnsafeObject

_ONE_AT_A_TIME = threading.Lock()


@contextlib.contextmanager
def allowlist_once() -> Iterator[None]:
    """torch's weights-only unpickler rebuilds its allowlist of user globals (a dict, in Python) for every object
    it creates and every call it makes: O(objects x allowlist), most of a DCP load's time at 8 ranks of small
    tensors (docs/benchmarks.md). For the length of one unpickling, that same list computed once: the same
    classes allowed, the same checks. Enter it inside the `safe_globals` context the unpickling uses; one
    unpickling at a time holds it (it swaps torch's module attribute and puts it back)."""
    from torch import _weights_only_unpickler as restricted

    with _ONE_AT_A_TIME:
        original = restricted._get_user_allowed_globals
        allowed = original()
        restricted._get_user_allowed_globals = lambda: allowed
        try:
            yield
        finally:
            restricted._get_user_allowed_globals = original


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
        with allowlist_once():
            return unpickler.load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, RuntimeError) as e:
        raise InvalidCheckpoint(index.path, f"weights_only unpickling refused the object: {e}") from None


def check_loadable(data: bytes, storages: dict[str, tuple[Any, torch.dtype]], state_dict: Any) -> None:
    """Refuse, at save time, a data.pkl the weights-only unpickler of every load would refuse (UnsafeObject
    naming the first value of that type), so save() never writes a file no load accepts."""
    from torch import _weights_only_unpickler as restricted

    def persistent_load(saved_id: Any) -> torch.storage.TypedStorage:
        storage, dtype = storages[saved_id[2]]
        return torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)

    unpickler = restricted.Unpickler(io.BytesIO(data), encoding="utf-8")
    unpickler.persistent_load = persistent_load  # type: ignore[method-assign]
    try:
        with allowlist_once():
            unpickler.load()
    except pickle.UnpicklingError as e:
        raise UnsafeObject(_culprit(state_dict, str(e)), str(e).splitlines()[0][:300]) from None


def _culprit(obj: Any, message: str) -> str:
    """The key path of the value the unpickler refused: the first whose type its message names, else the
    first that is not a tensor or a plain value ("<state dict>" if none is found)."""
    leaves = list(_leaves(obj, ""))
    named = [path for path, value in leaves if _type_name(value) in message]
    odd = [path for path, value in leaves if not isinstance(value, PLAIN)]
    return (named or odd or ["<state dict>"])[0] or "<state dict>"


PLAIN = (torch.Tensor, int, float, complex, str, bytes, bool, type(None), torch.dtype, torch.device, torch.Size)


def _leaves(obj: Any, path: str) -> Any:
    """(key path, value) of every leaf of nested dicts, lists and tuples."""
    if isinstance(obj, dict):
        children: Any = obj.items()
    elif isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        children = enumerate(obj)
    else:
        yield path, obj
        return
    for key, value in children:
        yield from _leaves(value, f"{path}.{key}" if path else str(key))


def _type_name(value: Any) -> str:
    """module.qualname of a value's type."""
    return f"{type(value).__module__}.{type(value).__qualname__}"
