"""DCP's byte items (every non-tensor value of a state dict: step counters, param_groups, objects).

DCP's planners torch.save such a value on save and torch.load it with weights_only=False on load, which
runs whatever the pickle says. Here a byte item is rebuilt by torch's weights-only unpickler first and
the planner receives that object pickled again by torch itself: it never sees a byte of the file. A
value the weights-only unpickler refuses is refused on save too (UnsafeObject), so no save writes a
checkpoint that no load accepts; `torch.serialization.add_safe_globals` allows a type of one's own.
"""

from __future__ import annotations

import io
import os
from typing import Any

import torch

from ..errors import InvalidCheckpoint, UnsafeObject
from ..unpickle import allowlist_once


def loadable_bytes(data: bytes, key: str, path: str | os.PathLike[str]) -> bytes:
    """A byte item as the weights-only unpickler rebuilds it, pickled anew; InvalidCheckpoint if refused."""
    try:
        value = _weights_only(data)
    except Exception as e:  # hostile bytes raise many types: all mean "refused"
        raise InvalidCheckpoint(path, f"{key!r}: refused by the weights-only unpickler: {_first_line(e)}") from None
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


def check_saveable(data: io.BytesIO, key: str) -> None:
    """Refuse, before anything is written, a byte item the weights-only unpickler of every load would refuse."""
    try:
        _weights_only(data.getvalue())
    except Exception as e:
        raise UnsafeObject(key, _first_line(e)) from None


def _weights_only(data: bytes) -> Any:
    """torch.load(weights_only=True) of a byte item (the caller's add_safe_globals apply), with the single-file
    loads' allowlist: a `bytearray` of a bare size is refused, never allocated."""
    with allowlist_once():
        return torch.load(io.BytesIO(data), weights_only=True)


def _first_line(error: BaseException) -> str:
    """The gist of torch's long weights-only refusal: the line naming what it refused, else the first."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    named = [line for line in lines if "GLOBAL" in line or line.startswith("WeightsUnpickler error")]
    return (named or lines)[0][:300]
