"""Config keys as data: a Key names its parser, default and help, shared by config and runners."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gdsbench.units import parse_duration, parse_size

Parser = Callable[[Any], Any]


@dataclass(frozen=True)
class Key:
    """One YAML key: `parse` turns a raw value into a typed one or raises ValueError(expected)."""

    name: str
    parse: Parser
    expected: str
    default: Any = None
    help: str = ""
    axis: bool = True  # False: a setting of the whole sweep (a tool's path), never a matrix axis or case parameter
    patterns: tuple[str, ...] | None = None  # only cases of these patterns carry it (None: every pattern)
    #: (parameter, values): the engine uses this key only where those parameters have one of those values (pool
    #: only with ioengine rados or rbd); elsewhere its cases carry the default, and reports leave it blank.
    used_with: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def applies(self, pattern: Any) -> bool:
        """Whether a case of `pattern` carries this key as a parameter."""
        return self.patterns is None or str(getattr(pattern, "value", pattern)) in self.patterns

    def used(self, params: Any) -> bool:
        """Whether a case (or row) with these parameter values uses this key (`used_with`)."""
        return all(
            str(getattr(params.get(name), "value", params.get(name))) in values for name, values in self.used_with
        )


def size(value: Any) -> int:
    """A size such as 4K, 1M, 1GiB or a number of bytes, greater than zero."""
    parsed = parse_size(value)
    if parsed <= 0:
        raise ValueError("must be greater than zero")
    return parsed


def duration(value: Any) -> float:
    """A duration such as 5s, 500ms, 2m or a number of seconds, greater than zero."""
    parsed = parse_duration(value)
    if parsed <= 0:
        raise ValueError("must be greater than zero")
    return parsed


def duration_or_off(value: Any) -> float:
    """A duration such as 1s or 200ms, or `false` (0.0: turned off)."""
    if value is False:
        return 0.0
    return duration(value)


def positive_int(value: Any) -> int:
    """An integer >= 1 (YAML bools are refused: `true` is not a thread count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("not a positive integer")
    return value


def at_most(limit: int) -> Callable[[Any], int]:
    """A positive integer up to `limit` (fio runs at most 4096 jobs; a deeper queue than 65536 is a typo)."""

    def parse(value: Any) -> int:
        number = positive_int(value)
        if number > limit:
            raise ValueError(f"more than {limit}")
        return number

    return parse


def non_negative_int(value: Any) -> int:
    """An integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a non-negative integer")
    return value


def boolean(value: Any) -> bool:
    """A YAML boolean."""
    if not isinstance(value, bool):
        raise ValueError("not true or false")
    return value


def text(value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("not a non-empty string")
    return value


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def file_name(value: Any) -> str:
    """A name for files inside the results folder: letters, digits, '.', '_', '-', no path."""
    if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
        raise ValueError("a file name of letters, digits, '.', '_' or '-' (no '/', at most 128 characters)")
    return value


def string(value: Any) -> str:
    """Any string, empty included (free text such as a description)."""
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def gpu_ids(value: Any) -> str:
    """A GPU index (0) or a colon-separated list of them (0:1, fio's gpu_dev_ids), as text."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if not isinstance(value, str) or not re.fullmatch(r"\d+(:\d+)*", value.strip()):
        raise ValueError("not a GPU index")
    return value.strip()


def one_of(*choices: str) -> Parser:
    """A parser accepting exactly one of `choices`."""

    def parse(value: Any) -> str:
        if value not in choices:
            raise ValueError("not one of the choices")
        return value

    return parse


def member_of(kind: type[enum.Enum]) -> Parser:
    """A parser turning a name (as written in YAML, case-insensitive) into a member of `kind`."""
    by_name = {member.value.upper(): member for member in kind}

    def parse(value: Any) -> enum.Enum:
        if not isinstance(value, str) or value.upper() not in by_name:
            raise ValueError("not a known name")
        return by_name[value.upper()]

    return parse


def choices_text(kind: type[enum.Enum]) -> str:
    """The members of an enum as a readable list for error messages."""
    return "one of " + ", ".join(member.value for member in kind)
