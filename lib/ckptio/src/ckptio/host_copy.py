"""A state dict copied into host storages kept between saves: what a TieredCheckpointer's `save(blocking=False)`
writes from once the call has returned.

One host storage per storage of the state dict (shared ones once), each tensor a view of its copy with the
same dtype, offset, shape and strides: the file written from the copy is the one a blocking save writes (tied
weights stay tied, views stay views). The storages are reused while the storages' sizes stay the same (pinned
where CUDA exists); the bytes move on dcp/stage.py's Copier (host bytes by a few threads, device ones by copy_).
Containers are new (of the same type), other values kept where immutable, deep-copied otherwise: nothing the
caller changes after the copy reaches the file.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

from .dcp.stage import IMMUTABLE, Copier
from .errors import OptionError
from .tree import named_tensors

PLAIN = (torch.Tensor, torch.nn.Parameter)


class HostCopy:
    """Host storages mirroring a state dict's storages, refilled by every save of the same storage sizes."""

    def __init__(self) -> None:
        self._sizes: tuple[int, ...] = ()
        self._storages: list[torch.UntypedStorage] = []
        self._copier: Copier | None = None

    def stage(self, state_dict: Any) -> Any:
        """Copy `state_dict`'s storages into the kept host storages; the state dict to save, made of them."""
        sources = _storages(state_dict)
        sizes = tuple(s.nbytes() for s in sources.values())
        if sizes != self._sizes:  # another structure: new storages
            pin = torch.cuda.is_available()
            self._storages = [torch.empty(n, dtype=torch.uint8, pin_memory=pin).untyped_storage() for n in sizes]
            self._sizes = sizes
        hosts = dict(zip(sources, self._storages))
        if self._copier is None:
            self._copier = Copier()
        self._copier.copy([(_flat(hosts[key]), _flat(source)) for key, source in sources.items()])
        return _snapshot(state_dict, hosts)

    def close(self) -> None:
        """Free the storages and let the copying threads go."""
        self._storages, self._sizes = [], ()
        if self._copier is not None:
            self._copier.close()
            self._copier = None


def _storages(state_dict: Any) -> dict[int, torch.UntypedStorage]:
    """Every storage the state dict's tensors view, once each (by identity), after refusing what a raw copy of
    storage bytes cannot reproduce."""
    found: dict[int, torch.UntypedStorage] = {}
    for name, t in named_tensors(state_dict):
        if type(t) not in PLAIN or t.layout != torch.strided or t.is_conj() or t.is_neg() or t.is_quantized:
            raise OptionError(f"{name!r}: save(blocking=False) copies plain dense tensors only; save it blocking")
        storage = t.untyped_storage()
        found.setdefault(storage._cdata, storage)
    return found


def _flat(storage: torch.UntypedStorage) -> torch.Tensor:
    """A storage's bytes as a 1-d uint8 tensor on its device."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _view(t: torch.Tensor, host: torch.UntypedStorage) -> torch.Tensor:
    """`t` as a view of its storage's host copy (a Parameter stays one, requires_grad kept)."""
    view = torch.empty(0, dtype=t.dtype).set_(host, t.storage_offset(), t.shape, t.stride())
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(view, requires_grad=t.requires_grad)
    return view.requires_grad_(t.requires_grad) if t.requires_grad else view


def _snapshot(obj: Any, hosts: dict[int, torch.UntypedStorage]) -> Any:
    """`obj` with every tensor a view of its host copy, containers new of the same type (a dict's attributes,
    such as a state_dict's `_metadata`, copied too), other values kept when immutable, else deep-copied."""
    if isinstance(obj, torch.Tensor):
        return _view(obj, hosts[obj.untyped_storage()._cdata])
    if isinstance(obj, dict):
        new = copy.copy(obj)  # same type, attributes and key order; the values replaced below
        if hasattr(obj, "__dict__"):
            new.__dict__.update(copy.deepcopy(obj.__dict__))
        for key, value in obj.items():
            new[key] = _snapshot(value, hosts)
        return new
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_snapshot(value, hosts) for value in obj)
    if isinstance(obj, (Mapping, list, tuple)):
        raise OptionError(f"save(blocking=False) copies dicts, lists and tuples only, not {type(obj).__name__}")
    return obj if isinstance(obj, IMMUTABLE) else copy.deepcopy(obj)
