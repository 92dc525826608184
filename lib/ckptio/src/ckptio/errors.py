"""Typed errors raised by the checkpoint library; each names the file and what is wrong."""

from __future__ import annotations

import os
from typing import Any


def _rebuilt(kind: type[BaseException], args: tuple[object, ...], state: dict[str, object]) -> BaseException:
    """An error unpickled without calling its __init__ (whose arguments are not its message)."""
    error = kind.__new__(kind, *args)
    if isinstance(error, OSError):
        OSError.__init__(error, *args)  # errno and strerror, as the original's __init__ set them
    error.args = args
    error.__dict__.update(state)
    return error


class CheckpointError(Exception):
    """Base class of every expected checkpoint failure (bad file, unavailable backend, bad option).

    Picklable whatever its subclass's __init__ takes: DCP sends a rank's exception to the others pickled
    (broadcast_object), and an error that cannot be rebuilt there turns into a TypeError on every other
    rank, or leaves one waiting in a collective."""

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuilt, (type(self), self.args, dict(self.__dict__))


class InvalidCheckpoint(CheckpointError):
    """The file is not a ckptio checkpoint, or its header/index/zip directory is malformed."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: not a valid ckptio checkpoint: {problem}")


class TruncatedCheckpoint(CheckpointError):
    """The file is shorter than its header says (an interrupted copy or a torn write)."""

    def __init__(self, path: str | os.PathLike[str], expected: int, actual: int) -> None:
        self.path = os.fspath(path)
        self.expected = expected
        self.actual = actual
        super().__init__(f"{self.path}: truncated checkpoint: expected {expected} bytes, found {actual}")


class CorruptCheckpoint(CheckpointError):
    """Bytes on disk do not match the checksum recorded at save time."""

    def __init__(self, path: str | os.PathLike[str], tensor: str, detail: str = "") -> None:
        self.path = os.fspath(path)
        self.tensor = tensor
        self.detail = detail
        extra = f" ({detail})" if detail else ""
        super().__init__(f"{self.path}: checksum mismatch in {tensor!r}{extra}")


class UnsupportedLocation(CheckpointError, ValueError):
    """A URL of a scheme ckptio does not take (`gs://bucket/ck`), or one a call cannot use (`load_mmap` of `s3://`)."""

    def __init__(self, location: str, scheme: str, needs: str = "") -> None:
        self.path = location
        self.scheme = scheme
        said = (
            needs
            if needs
            else f"{scheme}:// locations are not supported here: ckptio reads and writes local paths, memory:// "
            "folders, peer:// tiers and (with ckptio[s3]) s3:// locations, and will not take a URL for a folder"
        )
        super().__init__(f"{location}: {said}")


class InvalidLocation(CheckpointError, ValueError):
    """An `s3://` location (or its endpoint) that is malformed: a bad bucket name, credentials or a port in it, or a
    prefix with empty, '.' or '..' segments."""

    def __init__(self, location: str, problem: str) -> None:
        self.path = location
        self.problem = problem
        super().__init__(f"{location}: not a usable object-store location: {problem}")


class ObjectStoreError(CheckpointError):
    """An object-store request failed: the operation, the key, the HTTP status where the store answered (`status`,
    None for a connection failure) and what it said."""

    def __init__(self, location: str, operation: str, status: int | None, detail: str) -> None:
        self.path = location
        self.operation = operation
        self.status = status
        self.detail = detail
        answer = f"HTTP {status}" if status else "no answer"
        super().__init__(f"{location}: {operation} failed ({answer}): {detail}")


class UnsupportedMetadata(CheckpointError, ValueError):
    """A DCP save to an object store whose metadata format 3 cannot express (object stores take format 3 only:
    no pickle); `problem` says what."""

    def __init__(self, location: str, problem: str) -> None:
        self.path = location
        self.problem = problem
        super().__init__(
            f"{location}: this save's metadata needs a pickle ({problem}), which ckptio never writes to an object "
            "store: save to a local directory, or keep the planner's data to JSON types, tuples and dicts"
        )


class BackendUnavailable(CheckpointError):
    """A requested I/O backend or device cannot be used here; `reason` says why."""

    def __init__(self, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason
        super().__init__(f"backend {backend!r} unavailable: {reason}")


class OptionError(CheckpointError, ValueError):
    """An IOOptions value, or a combination of arguments, that cannot be honoured."""


class StateDictMismatch(CheckpointError, ValueError):
    """load_into: a tensor of the destination differs from the saved one (missing, dtype, shape, device), or
    (strict) key paths only one side has; `tensor` names the first."""

    def __init__(self, path: str | os.PathLike[str], tensor: str, problem: str) -> None:
        self.path = os.fspath(path)
        self.tensor = tensor
        self.problem = problem
        super().__init__(f"{self.path}: cannot load into {tensor!r}: {problem}")


class UnsafeObject(CheckpointError, TypeError):
    """A value torch's weights-only unpickler refuses: saving it would write a checkpoint no load accepts."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(
            f"{key!r} cannot be checkpointed: torch's weights-only unpickler refuses it ({problem}); allow a type "
            "of your own with torch.serialization.add_safe_globals([YourType]) before saving and loading"
        )


class CheckpointBusy(CheckpointError):
    """Another save to the same checkpoint directory holds its lock (a second job, or an old one still alive)."""

    def __init__(self, directory: str | os.PathLike[str], holder: str, waited: float) -> None:
        self.path = os.fspath(directory)
        self.holder = holder
        super().__init__(
            f"{self.path}: another save is committing here ({holder or 'holder unknown'}); gave up after "
            f"{waited:.0f} s: save to another directory, or stop the other job"
        )


class StorageFull(CheckpointError, OSError):
    """The file system ran out of space (ENOSPC/EDQUOT) during a save; this save's own files were removed."""

    def __init__(self, directory: str | os.PathLike[str], errno_: int, detail: str) -> None:
        self.path = os.fspath(directory)
        super().__init__(errno_, f"no space left in {self.path}: {detail}")


class AsyncSaveFailed(CheckpointError, RuntimeError):
    """The previous async save of this Writer failed; raised by the next save so no failure goes unseen."""


class DirectIOFallbackWarning(UserWarning):
    """O_DIRECT was refused (EINVAL, e.g. tmpfs) and buffered I/O was used instead."""


def unwrap(error: BaseException) -> BaseException:
    """The library's own error inside torch's CheckpointException (the lowest failing rank's), else `error`.

    try:
        dcp.load(state_dict, storage_reader=Reader(path))
    except CheckpointException as e:     # a BaseException: `except Exception` misses it
        raise unwrap(e) from e
    """
    failures = getattr(error, "failures", None)
    if not isinstance(failures, dict) or not failures:
        return error
    ranked = sorted(failures.items(), key=lambda item: item[0])
    causes = [pair[0] for _, pair in ranked if isinstance(pair, tuple) and pair]
    ours = [c for c in causes if isinstance(c, CheckpointError)]
    return ours[0] if ours else (causes[0] if causes else error)


class NoCheckpoint(CheckpointError):
    """A TieredCheckpointer's restore found no copy that verifies in any tier; `skipped` lists every copy (and tier
    listing) it refused, with why."""

    def __init__(self, tiers: list[str], skipped: list[Any]) -> None:
        self.tiers = tiers
        self.skipped = skipped
        tried = "; ".join(
            f"tier {s.tier}" + (f" step {s.step}" if s.step is not None else "") + f": {s.reason}" for s in skipped
        )
        super().__init__(f"no checkpoint that verifies in {', '.join(tiers)}: " + (tried or "no tier holds one"))


class NotDurable(CheckpointError):
    """A TieredCheckpointer closed while its newest save was not durable in its farthest tier (its copies in nearer
    tiers, such as memory, go with the node): `step`, and `missing`, each such tier with why it lacks the step."""

    def __init__(self, step: int, missing: dict[int, str], tiers: list[str]) -> None:
        self.step, self.missing = step, missing
        said = "; ".join(f"tier {i} ({tiers[i]}): {why}" for i, why in sorted(missing.items()))
        super().__init__(
            f"step {step}, the newest save, is not durable in the farthest tier: {said}; it lives only in nearer "
            "tiers (TieredCheckpointer(require_durable=False) allows such an exit)"
        )


class PeerError(CheckpointError):
    """A peer tier's exchange over torch.distributed failed: a rank gone or timed out, or a copy the peer did not
    keep (it did not verify, or did not fit in its memory); `rank` the peer, `step` the checkpoint."""

    def __init__(self, rank: int, step: int | None, detail: str) -> None:
        self.rank, self.step, self.detail = rank, step, detail
        of = f"step {step}" if step is not None else "an exchange"
        super().__init__(f"peer rank {rank}, {of}: {detail}")


class UnsafeLocation(CheckpointError, PermissionError):
    """A folder a save or a tier would write in that another user controls (owns it or an ancestor, can write it,
    planted a link on the way or a file at the name): refused before a byte is written."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        Exception.__init__(self, f"{self.path}: refused: {problem}")
