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
from .errors import CheckpointError, CorruptCheckpoint, InvalidCheckpoint, TruncatedCheckpoint, UnsafeObject
from .tree import named_tensors

_ONE_AT_A_TIME = threading.Lock()


@contextlib.contextmanager
def allowlist_once() -> Iterator[None]:
    """torch's weights-only unpickler rebuilds its allowlist of user globals (a dict, in Python) for every object
    it creates and every call it makes: O(objects x allowlist), most of a DCP load's time at 8 ranks of small
    tensors (docs/benchmarks.md). For the length of one unpickling, that same list computed once, and torch's
    own allowlist with `bytearray` refusing a bare size (`bounded_bytearray`): otherwise the same checks. Enter
    it inside the `safe_globals` context the unpickling uses; one unpickling at a time holds it (it swaps
    torch's module attributes and puts them back)."""
    from torch import _weights_only_unpickler as restricted

    names = ("_get_allowed_globals", "_get_user_allowed_globals")
    with _ONE_AT_A_TIME:
        originals = [getattr(restricted, name) for name in names]
        builtin = {**originals[0](), "builtins.bytearray": bounded_bytearray}  # a copy: torch caches its dict
        user = originals[1]()
        for name, swapped in zip(names, (builtin, user)):
            setattr(restricted, name, lambda swapped=swapped: swapped)
        try:
            yield
        finally:
            for name, original in zip(names, originals):
                setattr(restricted, name, original)


def bounded_bytearray(*args: Any) -> bytearray:
    """bytearray, but never of a bare size: a pickled bytearray carries its bytes (as torch's pickles do); a
    size would let a few bytes of a pickle allocate and zero any amount of memory."""
    if args and isinstance(args[0], int):
        raise pickle.UnpicklingError(f"bytearray({args[0]}) refused: a pickled bytearray carries its bytes")
    return bytearray(*args)


def read_pickle(index: fmt.Index, verify: bool, read_at: fmt.ReadAt | None = None) -> bytes:
    """The data.pkl bytes (a small read of index.data_path, or through `read_at`: an object's), checked against
    the index digest."""
    if read_at is not None:
        data = read_at(index.pickle_offset, index.pickle_nbytes)
    else:
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
            obj = unpickler.load()
    except CheckpointError:
        raise
    except Exception as e:  # hostile opcodes raise many types (a memo get of an empty memo: KeyError; a pop
        # of an empty stack: IndexError): every one means "refused"
        problem = f"{type(e).__name__}: {str(e)[:300]}"
        raise InvalidCheckpoint(index.path, f"weights_only unpickling refused the object: {problem}") from None
    _check_backed(index, obj, storages)
    return obj


def _check_backed(index: fmt.Index, obj: Any, storages: dict[str, torch.UntypedStorage]) -> None:
    """Every tensor of a rebuilt object views a storage of the file, or is on the meta device (no memory): a
    pickle calling a tensor class (`torch.FloatTensor(1 << 32)`) gets memory the file does not store."""
    ours = {s._cdata for s in storages.values()}
    try:
        for name, t in named_tensors(obj):
            if t.device.type != "meta" and t.untyped_storage()._cdata not in ours:
                raise InvalidCheckpoint(index.path, f"tensor {name!r} does not view a storage of the file")
    except RecursionError:
        raise InvalidCheckpoint(index.path, "the saved object is nested too deeply to walk") from None
    except (NotImplementedError, RuntimeError) as e:  # a tensor without a storage (sparse): never saved here
        raise InvalidCheckpoint(index.path, f"a tensor without a storage of the file: {e}") from None


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
