"""The tiered engine's faults (`fault:`) and the expectations its rows are held to (issue 33, part 3).

- none: the local copies removed before the object tier's restore (restore_object_seconds);
- corrupt_local: one byte in the middle of the newest local copy's largest tensor flipped (a byte its checksums
  cover): the restore must skip it, saying why, and read the same step from S3, exactly;
- lose_local: the local folder removed: the restore must read the newest step from S3, exactly;
- store_down: the loop's drains sent to a closed port on 127.0.0.1 (AWS_ENDPOINT_URL_S3 pointed there while the
  TieredCheckpointer lives in it): training must go on, every drain fail with a named error, the local copy restore
  exactly; once the store is back, wait_drained() retries the newest step and the row says whether it reached S3;
- kill_upload: a rank killed during its upload, `kills:` times (kill_upload.py);
- exit_unpersisted: the job's exit right after a save S3 never got (the store down, as store_down): close() must
  refuse it (ckptio's NotDurable, naming the step and S3's error), never return as if it were durable; the store
  back, the restarted job finds that step in the near tier, persists it, and it restores from S3, exactly (issue 39:
  a memory-only save is never the silent exit save).
A fault whose expectation fails fails the row (ToolError naming what happened), never a silent pass.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gdsbench.errors import ToolError
from gdsbench.runners import s3
from gdsbench.runners.checkpoint import ladder, train
from gdsbench.runners.resources import Usage

FAULTS = ("none", "corrupt_local", "lose_local", "store_down", "kill_upload", "exit_unpersisted")
#: The ladders a fault is a fault of (any other fault: [local, s3] only).
FAULT_LADDERS = {"exit_unpersisted": (("local", "s3"), ("memory", "s3"))}
DEFAULT_LADDERS = (("local", "s3"),)
#: What each fault must do, as its row says it (`fault_expected`) and the report's fault table shows it.
EXPECTED = {
    "corrupt_local": "the restore skips the corrupted local copy naming why (checksum mismatch) and reads the same "
    "step from S3, exactly",
    "lose_local": "the restore finds no local copy and reads the newest step from S3, exactly",
    "store_down": "training goes on; every drain fails naming the refused connection; the local copy restores "
    "exactly; the newest step drains once the store is back",
    "kill_upload": "no restore after a kill finds a torn checkpoint in S3; the next save drains whole",
    "exit_unpersisted": "close() refuses an exit whose newest save S3 never got (NotDurable naming the step); the "
    "restarted job persists that step from the near tier and it restores from S3, exactly",
}


@contextlib.contextmanager
def ckptio_warnings() -> Iterator[list[str]]:
    """The warnings ckptio logs while a case runs (a skipped copy, a failed drain), kept for the row instead of
    printed over the sweep's display: a fault's are what it should cause, any other is news."""
    import logging

    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger, handler = logging.getLogger("ckptio"), Keep(logging.WARNING)
    logger.addHandler(handler)
    propagated, logger.propagate = logger.propagate, False
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagated


def warnings_note(fault: str, said: Sequence[str]) -> str | None:
    """The row's words on ckptio's warnings: expected for a fault (counted, the first quoted), else unexpected."""
    if not said:
        return None
    kind = f"expected for fault {fault}" if fault != "none" else "unexpected"
    return f"ckptio warned {len(said)} time(s), {kind}: {said[0][:300]}"


@dataclass
class Loop:
    """What a tiered training loop left: its times and cost, every save (TierSave), the work at risk sampled at
    each checkpoint, the ladder's figures once its drains were waited for (checked_saves), notes for the row."""

    times: train.LoopTimes = field(default_factory=train.LoopTimes)
    usage: Usage | None = None
    saves: list[Any] = field(default_factory=list)
    risk: list[int] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Restore:
    """What a timed restore read: the tier and step, the copies it skipped (ckptio's Skipped), its seconds."""

    tier: int
    step: int
    skipped: tuple[Any, ...]
    seconds: float


def checked_saves(fault: str, loop: Loop, objects: int | None) -> tuple[dict[str, Any], list[str]]:
    """The loop's ladder figures from its TierSaves, every save held to its expectation: durable locally; in the
    object tier (the newest at least), unless the store was down, when every drain must have failed, named."""
    saves = loop.saves
    if not saves:
        raise ToolError("tiered: the loop took no checkpoint (steps below interval)")
    for saved in saves:
        if 0 not in saved.durable_seconds:
            raise ToolError(f"tiered: step {saved.step} never became durable locally: {saved.errors.get(0)}")
    figures: dict[str, Any] = {"durable_local_seconds": ladder.median(s.durable_seconds[0] for s in saves)}
    if objects is None:
        return figures, []
    reached = [s for s in saves if objects in s.durable_seconds]
    failed = [s for s in saves if objects in s.errors]
    if fault == "store_down":
        if reached or not failed:
            raise ToolError(
                f"tiered: store_down: {len(reached)} of {len(saves)} drains reached the object tier and "
                f"{len(failed)} failed: the drains did not go to the closed port"
            )
        figures["drain_error"] = failed[0].errors[objects]
    elif objects not in saves[-1].durable_seconds:
        raise ToolError(f"tiered: step {saves[-1].step} never reached the object tier: {saves[-1].errors.get(objects)}")
    figures["durable_object_seconds"] = ladder.median(s.durable_seconds[objects] for s in reached)
    figures["work_at_risk_steps"] = ladder.median(loop.risk)
    drained = f"{len(reached)} of {len(saves)} checkpoints drained to the object tier"
    return figures, [drained] + ([f"{len(failed)} drains failed"] if failed else [])


def apply(fault: str, local: Path, newest: Path) -> str:
    """Do the fault to the local tier before the object tier's restore; say what was done, for the note."""
    if fault == "corrupt_local":
        return f"corrupt_local: byte {flip_byte(newest)} of {newest.name} flipped"
    if fault == "lose_local":
        ladder.remove_private(local)
        return "lose_local: the local folder removed"
    for path in sorted(p for p in local.iterdir() if p.is_file()):
        path.unlink()
    return "object restore with the local copies removed"


def flip_byte(path: Path) -> int:
    """Flip one byte in the middle of the largest tensor's data of a ckptio checkpoint (its checksums cover it);
    its offset."""
    from ckptio.inspect import read_index

    entry = max(read_index(path).storages, key=lambda e: e.nbytes)
    offset = entry.offset + entry.nbytes // 2
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
    try:
        byte = os.pread(fd, 1, offset)
        os.pwrite(fd, bytes([byte[0] ^ 0xFF]), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    return offset


def restored(fault: str, found: Restore, tier: int) -> dict[str, Any]:
    """A fault case's figures of the restore that read `tier` (verified exact by then): the object tier's seconds,
    and, for a fault, where it read from and what it skipped; corrupt_local must have skipped the newest local copy,
    saying why."""
    skipped = skipped_text(found.skipped)
    if fault == "corrupt_local" and not any(s.tier == 0 and s.step == found.step for s in found.skipped):
        raise ToolError(
            f"tiered: corrupt_local: the restore did not say it skipped the corrupted local copy ({skipped})"
        )
    figures: dict[str, Any] = {"restore_object_seconds": found.seconds} if tier else {}
    if fault == "none":
        return figures
    said = {"restored_tier": "s3" if tier else "local", "skipped_reason": skipped or None, "state_exact": "yes"}
    return {**figures, **said}


def skipped_text(skipped: Sequence[Any]) -> str:
    """The copies a restore skipped, and why, on one line."""
    return "; ".join(f"tier {s.tier} step {s.step}: {s.reason}" for s in skipped)


class Store:
    """The object store as the loop finds it: up (nothing done)."""

    def resume(self, ckpt: Any, tiers: Any, saves: Sequence[Any]) -> list[str]:
        """What happened to the drains once the store is back (nothing to say while it never went down)."""
        return []


class DownStore(Store):
    """The object store down for the loop: AWS_ENDPOINT_URL_S3 at a closed port until `back()`."""

    def __init__(self, saved: dict[str, str | None]) -> None:
        self.saved = saved

    def back(self) -> None:
        """The environment's endpoint as it was."""
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def resume(self, ckpt: Any, tiers: Any, saves: Sequence[Any]) -> list[str]:
        """The store back: wait_drained() retries the newest undrained step; say whether it reached S3."""
        self.back()
        newest = saves[-1].step if saves else None
        try:
            ckpt.wait_drained()
        except Exception as exc:
            return [f"store back: wait_drained() failed: {type(exc).__name__}: {exc}"]
        key = tiers.locations[-1].split("/", 3)[3] + f"/step-{newest:012d}.ckpt"
        there = bool(tiers.bucket.sizes(key))
        return [f"store back: step {newest} {'drained to' if there else 'not in'} the object tier after wait_drained()"]


@contextlib.contextmanager
def store(fault: str) -> Iterator[Store]:
    """The object store for the loop: for store_down (and exit_unpersisted's last save), the endpoint ckptio reads
    (AWS_ENDPOINT_URL_S3, read before AWS_ENDPOINT_URL) at a port of 127.0.0.1 bound and never listened on (connections refused) until resume()."""
    if fault != "store_down":
        yield Store()
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as closed:
        closed.bind(("127.0.0.1", 0))
        down = DownStore({name: os.environ.get(name) for name in s3.ENDPOINT_ENV})
        os.environ[s3.ENDPOINT_ENV[0]] = f"http://127.0.0.1:{closed.getsockname()[1]}"
        try:
            yield down
        finally:
            down.back()
