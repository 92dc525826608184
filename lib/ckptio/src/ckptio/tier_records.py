"""What a TieredCheckpointer reports: a save's way through the tiers (TierSave), a restore (Restored) and the
copies it skipped (Skipped)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .errors import CheckpointError


@dataclass(frozen=True)
class Skipped:
    """A copy a restore did not load: its tier, its step (None: the tier could not be listed) and why."""

    tier: int
    step: int | None
    reason: str


@dataclass
class Restored:
    """What a restore loaded: the step, the tier it came from, the state, the seconds the call took (every
    copy tried included) and the copies skipped on the way."""

    step: int
    tier: int
    state: Any
    seconds: float
    skipped: list[Skipped] = field(default_factory=list)


class TierSave:
    """One save's way through the tiers, filled as it happens: `durable_seconds[tier]` (seconds from the save's
    start until durable there) or `errors[tier]` (why it is not there); a drain retried later may turn an error
    into a durable time."""

    def __init__(self, step: int, tiers: int, start: float) -> None:
        self.step = step
        self.stall_seconds = 0.0
        self.durable_seconds: dict[int, float] = {}
        self.errors: dict[int, str] = {}
        self._tiers, self._start = tiers, start
        self._changed = threading.Condition()

    def done(self, tier: int | None = None) -> bool:
        """Whether `tier` (None: every tier) is durable or failed."""
        tiers = range(self._tiers) if tier is None else (tier,)
        return all(i in self.durable_seconds or i in self.errors for i in tiers)

    def wait(self, timeout: float | None = None, tier: int | None = None) -> bool:
        """Wait until `tier` (None: every tier) is durable or failed; whether it is."""
        with self._changed:
            return self._changed.wait_for(lambda: self.done(tier), timeout)

    def _durable(self, tier: int) -> None:
        with self._changed:
            self.durable_seconds[tier] = time.monotonic() - self._start
            self.errors.pop(tier, None)
            self._changed.notify_all()

    def _failed(self, tier: int, reason: str) -> None:
        with self._changed:
            self.errors[tier] = reason
            self._changed.notify_all()

    def __repr__(self) -> str:
        durable = {i: round(s, 3) for i, s in self.durable_seconds.items()}
        return f"TierSave(step={self.step}, stall_seconds={self.stall_seconds:.3f}, durable_seconds={durable}, errors={self.errors})"


def reason(error: BaseException) -> str:
    """Why a copy failed, as recorded: the library's own errors and OSErrors say it; others with their type."""
    if isinstance(error, (CheckpointError, OSError)):
        return str(error)
    return f"{type(error).__name__}: {error}"
