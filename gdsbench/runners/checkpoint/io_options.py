"""ckptio's IOOptions as the engines built on ckptio (fastpersist, dcp_fast) declare and record them.

A case that leaves `threads` out runs at the library's own default, as a user gets it: IOOptions() without
threads, so CKPTIO_THREADS applies (the case holds None; Runner.library_defaults). A row records every field the
engine ran with, a column per field (`io_<field>`), declared from the dataclass's own fields: a field added to
IOOptions is recorded without an edit here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from gdsbench.columns import SETTING, Column

PREFIX = "io_"
#: Axes a config may leave to ckptio: None in the case, the library's default at run time, the value on the row.
LIBRARY_DEFAULTS = frozenset({"threads"})
#: Environment variables that set IOOptions fields (CKPTIO_<FIELD>, gdsbench 0.1's GDSBENCH_IO_<FIELD>): rows record them.
ENVIRONMENT = ("CKPTIO_", "GDSBENCH_IO_")


@functools.cache
def columns() -> tuple[Column, ...]:
    """A column per IOOptions field; none where ckptio is not installed (its engines' cases are skipped there)."""
    try:
        from ckptio import IOOptions
    except ImportError:
        return ()
    return tuple(_column(f) for f in dataclasses.fields(IOOptions))


def _column(field: dataclasses.Field[Any]) -> Column:
    """The column of one IOOptions field: a setting (recorded, never a figure), in bytes, a count or text."""
    number = field.type in ("int", "float", int, float)
    unit = "bytes" if field.name.endswith("_bytes") else "count" if field.name.endswith("threads") else ""
    meaning = f"ckptio IOOptions.{field.name} the engine ran with (its default, the environment's or the case's)"
    return Column(PREFIX + field.name, unit if number else "", meaning, SETTING)


def build(threads: int | None, **fields: Any) -> Any:
    """IOOptions with the case's `threads`, or, where it leaves them to the library (None), ckptio's default."""
    from ckptio import IOOptions

    given: dict[str, Any] = {**fields, **({} if threads is None else {"threads": threads})}
    return IOOptions(**given)


def used(options: Any) -> dict[str, Any]:
    """The fields of the IOOptions an engine ran with, by name (as a rank reports them)."""
    return dataclasses.asdict(options)


def figures(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The row's columns of the options an engine ran with (`used`)."""
    return {PREFIX + name: value for name, value in fields.items()}


def resolved(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The case parameters the library chose where a config leaves them out: their values, for the row."""
    return {name: fields[name] for name in LIBRARY_DEFAULTS}
