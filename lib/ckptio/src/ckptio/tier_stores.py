"""The places a TieredCheckpointer keeps its checkpoints: each tier the tier of the place its location names
(places/files.py: a local directory ours alone; places/objects.py: an `s3://bucket/prefix`), its copies named
`step-<step:012d>.ckpt` (tier_names.py). A tier's contents are untrusted: only names of that pattern are listed,
read or removed (regular files of this user's in a directory; no link is followed), so nothing outside the tier is
ever read or removed; every copy is verified when loaded. A drain to an object store aborts, once its upload
completed, the incomplete uploads of checkpoint names listed before it began (s3/stale.py): a failed or killed
drain leaves no upload behind past the next one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import OptionError
from .loading import load_existing, load_new
from .memory import StagingCache
from .options import IOOptions
from .places import place
from .places.files import LocalTier
from .places.objects import ObjectTier
from .places.peer import PeerTier

if TYPE_CHECKING:
    import torch

DEFAULT_KEEP = 2

Tier = LocalTier | ObjectTier | PeerTier


def places(tiers: Sequence[str | os.PathLike[str]], options: IOOptions, keep: list[int]) -> list[Tier]:
    """The tier objects, each the tier of the place its location names (places/) keeping its `keep` count: tier 0
    one that a save writes from training memory and the drains read back (a local or memory:// folder), the later
    ones any place, all distinct. A collective tier (peer://) is made by every rank together."""
    made = [place(t) for t in tiers]
    if not made[0].traits.from_memory:
        raise OptionError(
            f"tier 0 must be a place a save writes from training memory and its drains read back (a local "
            f"directory or a memory:// folder), not {os.fspath(tiers[0])!r}"
        )
    names = [where.name for where in made]
    if len(set(names)) != len(names):
        raise OptionError(f"tiers must be distinct locations: {names}")
    return [where.tier(options, count) for where, count in zip(made, keep)]


def listed(tiers: Sequence[str | os.PathLike[str]]) -> list[str | os.PathLike[str]]:
    """The tiers as a non-empty list (a lone location is refused: it would be read as a list of characters)."""
    if isinstance(tiers, (str, bytes, os.PathLike)):
        raise OptionError(f"tiers must be a list of locations, nearest first, not {tiers!r}")
    if not tiers:
        raise OptionError("tiers must name at least one location (tier 0: a local directory)")
    return list(tiers)


def keep_counts(keep: int | Sequence[int] | None, n: int) -> list[int]:
    """`keep` as one count per tier, each at least 1."""
    counts = [DEFAULT_KEEP] * n if keep is None else [keep] * n if isinstance(keep, int) else list(keep)
    if len(counts) != n or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in counts):
        raise OptionError(f"keep must be a count of at least 1, or one per tier ({n}), not {keep!r}")
    return counts


def load(tier: Tier, step: int, device: torch.device, options: IOOptions, cache: StagingCache) -> Any:
    """Load and verify a tier's copy of a step into new memory on `device`."""
    with tier.readable(step) as name:
        return load_new(name, device, options, True, cache).obj


def load_into(tier: Tier, step: int, state_dict: Any, options: IOOptions, cache: StagingCache) -> Any:
    """Fill `state_dict` (strict) from a tier's copy of a step, verified; returns it."""
    with tier.readable(step) as name:
        return load_existing(name, state_dict, options, True, cache).obj
