"""Expected failures as typed exceptions; the CLI turns each into one line and an exit code."""

from __future__ import annotations


class GdsbenchError(Exception):
    """An expected failure: the CLI prints its message without a traceback."""

    exit_code = 1


class ConfigError(GdsbenchError):
    """A sweep config is invalid: names the file, the key and what was expected."""

    exit_code = 2

    def __init__(self, file: str, key: str, expected: str, got: object = None) -> None:
        self.file, self.key, self.expected, self.got = file, key, expected, got
        detail = f" (got {got!r})" if got is not None else ""
        super().__init__(f"{file}: {key}: expected {expected}{detail}")


class UsageError(GdsbenchError):
    """A command was called with arguments that cannot work (bad path, bad column)."""

    exit_code = 2


class ToolError(GdsbenchError):
    """An external tool (fio, gdsio) failed or printed output we cannot parse."""


class TargetError(GdsbenchError):
    """The target directory cannot be used (not a directory, not writable)."""

    exit_code = 2


class SummaryError(UsageError):
    """A file given to `gdsbench import` is not a DLIO checkpointing summary.json it can read: names the file, the
    key and what was expected."""
