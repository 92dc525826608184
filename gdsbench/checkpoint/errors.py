"""Typed errors raised by the checkpoint library; each names the file and what is wrong."""

from __future__ import annotations

import os


class CheckpointError(Exception):
    """Base class of every expected checkpoint failure (bad file, unavailable backend)."""


class InvalidCheckpoint(CheckpointError):
    """The file is not a gdsbench checkpoint, or its header/index/zip directory is malformed."""

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: not a valid gdsbench checkpoint: {problem}")


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


class BackendUnavailable(CheckpointError):
    """A requested I/O backend or device cannot be used here; `reason` says why."""

    def __init__(self, backend: str, reason: str) -> None:
        self.backend = backend
        self.reason = reason
        super().__init__(f"backend {backend!r} unavailable: {reason}")


class OptionError(CheckpointError, ValueError):
    """An IOOptions value, or a combination of arguments, that cannot be honoured."""


class StateDictMismatch(CheckpointError, ValueError):
    """load_into: a tensor of the destination differs from the saved one (missing, dtype, shape, device)."""

    def __init__(self, path: str | os.PathLike[str], tensor: str, problem: str) -> None:
        self.path = os.fspath(path)
        self.tensor = tensor
        self.problem = problem
        super().__init__(f"{self.path}: cannot load into {tensor!r}: {problem}")


class DirectIOFallbackWarning(UserWarning):
    """O_DIRECT was refused (EINVAL, e.g. tmpfs) and buffered I/O was used instead."""
