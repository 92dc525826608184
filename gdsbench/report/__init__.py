"""Reports read results (never runners): report.summary builds one Report value from a results frame;
renderers registered per format turn it into text.

A format is one module in gdsbench/report/formats/ named as the format, that registers its renderer
with `@register("<name>")`; `format_names()` lists them (the CLI's --format choices), so adding a format is
adding a module. This package imports no pandas itself, so the CLI can list formats cheaply.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gdsbench.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

    from gdsbench.report.sections import Report

Renderer = Callable[["Report"], str]
_RENDERERS: dict[str, Renderer] = {}
FORMATS_PACKAGE = "gdsbench.report.formats"


def register(name: str) -> Callable[[Renderer], Renderer]:
    """Register a renderer as format `name` (a decorator; used once per module of report/formats)."""

    def add(renderer: Renderer) -> Renderer:
        _RENDERERS[name] = renderer
        return renderer

    return add


def format_names() -> tuple[str, ...]:
    """Every format's name: the modules of report/formats, each imported once so it registers itself."""
    package = importlib.import_module(FORMATS_PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{FORMATS_PACKAGE}.{module.name}")
    return tuple(_RENDERERS)


def renderer(fmt: str) -> Renderer:
    """The renderer registered as `fmt`."""
    if fmt not in format_names():
        raise UsageError(f"--format: expected one of {', '.join(format_names())} (got {fmt!r})")
    return _RENDERERS[fmt]


def render(frame: pd.DataFrame, groups: list[str] | None, fmt: str, settings: Mapping[str, Any] | None = None) -> str:
    """The whole report of a results frame in one format, its derived tables at the report `settings` they declare."""
    from gdsbench.report import summary

    draw = renderer(fmt)
    return draw(summary.build(frame, groups, settings))
