"""The runner registry: every engine a sweep config may name, by its YAML name.

An engine is a module of gdsbench.runners or gdsbench.runners.checkpoint that defines `ENGINE` (a Runner): adding
one is adding its module, never a name here. Subpackages (the ranks' own code) are not engines and stay unimported.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator, Mapping
from typing import Any

from gdsbench.columns import Column
from gdsbench.errors import UsageError
from gdsbench.keys import Key
from gdsbench.runners.base import Measurement, RunContext, Runner

#: The packages whose modules may define an engine.
ENGINE_PACKAGES = ("gdsbench.runners", "gdsbench.runners.checkpoint")


def _engines() -> Iterator[Runner]:
    """Every module-level ENGINE of the engine packages, in the order of their module names."""
    for package in ENGINE_PACKAGES:
        path = importlib.import_module(package).__path__
        for module in sorted(m.name for m in pkgutil.iter_modules(path) if not m.ispkg):
            engine = getattr(importlib.import_module(f"{package}.{module}"), "ENGINE", None)
            if engine is not None:
                yield engine


RUNNERS: dict[str, Runner] = {runner.name: runner for runner in _engines()}


def get(name: str) -> Runner:
    """The runner registered as `name`."""
    try:
        return RUNNERS[name]
    except KeyError:
        raise UsageError(f"unknown engine {name!r}; known: {', '.join(RUNNERS)}") from None


def option_keys() -> dict[str, Key]:
    """Every runner option key by name (a name shared by runners must mean the same thing)."""
    keys: dict[str, Key] = {}
    for runner in RUNNERS.values():
        for key in runner.options:
            keys.setdefault(key.name, key)
    return keys


def declared_columns() -> dict[str, Column]:
    """Every runner's declared result column by name (a name shared by runners must mean the same thing)."""
    columns: dict[str, Column] = {}
    for runner in RUNNERS.values():
        for column in runner.columns:
            columns.setdefault(column.name, column)
    return columns


def unused_options(engine: str, params: Mapping[str, Any]) -> list[str]:
    """The options a case (or row: its values by name) carries that its engine does not use there, as the runner
    declares (Key.used_with): a read's end_fsync, the pool of fio on a local disk. Rows leave them blank."""
    runner = RUNNERS.get(str(engine))
    return [key.name for key in (runner.options if runner else ()) if key.used_with and not key.used(params)]


__all__ = ["RUNNERS", "Measurement", "RunContext", "Runner", "declared_columns", "get", "option_keys", "unused_options"]
