"""Peers (`peer://<name>`, `peer:///path` on a RAM file system; `?replicas=K`, default 1): a tier of a
TieredCheckpointer whose copy of each rank's checkpoint is held in the memory of the same local rank on each of the
next K nodes (peers.py moves it, over torch.distributed), so the state of a lost node survives on its neighbours,
as ML Flashpoint's and nvidia-resiliency-ext's replicas do. Each rank keeps what it holds for others in its own
folder of that RAM place (`rank-<r>/of-rank-<source>/`, ours alone: memory.py's folder), verified before it takes
the checkpoint's name; the tier is collective: every rank makes, saves to and restores from it together. A peer is
a tier only: a single-file save, load or DCP checkpoint there is refused (UnsupportedLocation)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from .. import durable
from ..errors import InvalidLocation, UnsupportedLocation
from ..options import IOOptions
from ..tier_names import named, pinned
from .base import Place, Traits
from .memory import SCHEME as MEMORY_SCHEME
from .memory import MemoryTier
from .memory import parse as memory_folder

if TYPE_CHECKING:
    from ..peers import Incoming

SCHEME = "peer"
TIMEOUT_SECONDS = 600.0  # an exchange or collective of the tier's group that takes longer fails (PeerError)
QUERY = re.compile(r"replicas=([1-9][0-9]?)")
ONLY_A_TIER = "a peer:// location is a tier of a TieredCheckpointer only (its copies live in other ranks' memory)"


def parse(location: str) -> tuple[str, int]:
    """The RAM folder a peer location names, and its replica count."""
    body, _, query = location.partition("?")
    found = QUERY.fullmatch(query) if query else None
    if query and found is None:
        raise InvalidLocation(location, "the one query a peer location takes is replicas=K (K from 1 to 99)")
    replicas = int(found.group(1)) if found else 1
    folder = memory_folder(MEMORY_SCHEME + body[len(SCHEME) :])
    return folder, replicas


class Peer(Place):
    scheme = SCHEME
    traits = Traits(atomic="rename", listable=True, collective=True, survives="node", from_memory=False)

    def __init__(self, location: str) -> None:
        self.path, self.replicas = parse(location)
        self.name = location

    def single_writer(self, options: IOOptions, staging: Any, recycle: bool) -> NoReturn:
        raise UnsupportedLocation(self.name, SCHEME, ONLY_A_TIER)

    def opened(self, options: IOOptions) -> NoReturn:
        raise UnsupportedLocation(self.name, SCHEME, ONLY_A_TIER)

    def local_file(self, needs: str) -> str:
        raise UnsupportedLocation(self.name, SCHEME, ONLY_A_TIER)

    def owned_name(self, recycle: bool) -> str:
        raise UnsupportedLocation(self.name, SCHEME, ONLY_A_TIER)

    def dcp_store(self, options: IOOptions) -> NoReturn:
        raise UnsupportedLocation(self.name, SCHEME, ONLY_A_TIER)

    def holds_dcp(self) -> bool:
        return False

    def tier(self, options: IOOptions, keep: int) -> Any:
        return PeerTier(self.path, self.replicas, keep)


class PeerTier:
    """This rank's side of a peer tier: its copies sent to its holders, the copies it holds for its sources (each
    source's `keep` newest), and the copies it fetches back when restoring."""

    collective = True

    def __init__(self, root: str, replicas: int, keep: int) -> None:
        from ..peers import Ring

        self.root, self.keep = root, keep
        self.ring = Ring(replicas, TIMEOUT_SECONDS)
        self.mine = os.path.join(root, f"rank-{self.ring.rank}")
        self._kept: list[int] = []  # this process's saves its holders acknowledged, newest last
        self._fetched = MemoryTier(os.path.join(self.mine, "fetched"))

    def __str__(self) -> str:
        holders = ", ".join(str(self.ring.holder(j)) for j in range(1, self.ring.replicas + 1))
        return f"peer:{self.root} (rank {self.ring.rank}'s copies held by rank {holders})"

    def held(self, source: int) -> MemoryTier:
        """The folder of the copies this rank holds for `source`."""
        return MemoryTier(os.path.join(self.mine, f"of-rank-{source}"))

    # -- saves ------------------------------------------------------------------------------------

    def put(self, source: str | None, step: int) -> None:
        """Send this rank's verified copy (`source`; None: this rank has none, it still takes part) to each of its
        holders while keeping what its sources send; PeerError where a holder did not keep it."""
        for j in range(1, self.ring.replicas + 1):
            self.ring.replicate(j, source, step, self._incoming)
        self._kept = [*(s for s in self._kept if s != step), step][-self.keep :]

    def _incoming(self, source: int, step: int) -> Incoming:
        """Where a copy of `step` from `source` goes: its held folder, trimmed to `keep` once it is in place."""
        held = self.held(source)
        return _into(held, step, lambda: _trim(held, self.keep))

    def steps(self) -> list[int]:
        """This process's saves that its holders acknowledged (the holders trim their own copies to `keep`)."""
        return list(self._kept)

    def remove(self, step: int) -> None:
        """Nothing here: each holder removes its older copies itself when a newer one is in place."""

    def forget(self) -> None:
        """Nothing held between requests."""

    # -- restores ---------------------------------------------------------------------------------

    def listing(self) -> list[int]:
        """The steps this rank's holders hold of its copies: a collective call."""
        return self.ring.listing(lambda source: _steps(self.held(source)))

    def fetch(self, step: int, wanted: bool) -> list[str]:
        """Ask the holders, in replica order, for this rank's copy of `step` until one verifies (`wanted`), while
        sending the copies this rank holds to the sources asking: a collective call. Why each holder asked gave
        none (empty once one came, or where none was wanted: then readable(step) reads it)."""
        why: list[str] = []
        got = not wanted
        for j in range(1, self.ring.replicas + 1):
            held = self.held(self.ring.source(j)).file(step)
            into = _into(self._fetched, step, lambda: None)
            said = self.ring.fetch(j, step, not got, held if os.path.isfile(held) else None, into)
            if not got:
                got = said is None
                why += [f"rank {self.ring.holder(j)}: {said}"] if said is not None else []
        return [] if got and wanted else why

    @contextlib.contextmanager
    def readable(self, step: int) -> Iterator[str]:
        """The fetched copy of `step`, pinned; removed after the block (a restore reads it once)."""
        path = self._fetched.file(step)
        try:
            with pinned(path) as held, named(held, path):
                yield held
        finally:
            self._fetched.remove(step)


def _into(tier: MemoryTier, step: int, then: Callable[[], None]) -> Incoming:
    """An Incoming writing a copy of `step` into `tier`'s folder: room checked, verified, renamed, then `then()`."""
    from ..peers import Incoming
    from ..verify import verify_file

    def open_temp(nbytes: int) -> str:
        tier.prepare()
        tier.room_for(nbytes)
        temp = durable.temp_path(tier.file(step))  # it names its writer: removed once provably dead (prepare)
        os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        return temp

    def keep(temp: str) -> None:
        verify_file(temp, tier.file(step))
        os.replace(temp, tier.file(step))
        then()

    return Incoming(open_temp, keep)


def _steps(tier: MemoryTier) -> list[int]:
    """The steps a held folder has (none where it is missing)."""
    try:
        return tier.steps()
    except FileNotFoundError:
        return []


def _trim(tier: MemoryTier, keep: int) -> None:
    """Remove a held folder's older copies beyond its `keep` newest."""
    for step in sorted(tier.steps())[:-keep]:
        tier.remove(step)


PLACE = Peer
