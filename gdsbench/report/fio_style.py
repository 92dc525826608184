"""fio's run-status lines, rebuilt from result rows byte for byte as fio prints them.

fio: `  WRITE: bw=1886MiB/s (1977MB/s), 1886MiB/s-1886MiB/s (1977MB/s-1977MB/s), io=2048MiB (2147MB),
run=1086-1086msec`: the aggregate bandwidth, the slowest-fastest job, total io and the job runtimes,
each in power-of-2 units with the power-of-10 figure in brackets (fio's num2str with 4 digits).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gdsbench.units import num2str

#: fio's direction labels, right-aligned to 7 characters as fio prints them.
LABELS = {"read": "READ", "randread": "READ", "write": "WRITE", "randwrite": "WRITE", "save": "SAVE", "load": "LOAD"}


def label(pattern: str) -> str:
    """The direction label of a pattern, padded as fio pads it."""
    return f"{LABELS.get(pattern, pattern.upper()):>7}"


def _int(value: Any, default: float = 0) -> int:
    """A result cell as an integer (missing cells become `default`)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return int(default)
    return int(value)


def status_line(row: Mapping[str, Any]) -> str:
    """fio's run-status line for one result row."""
    bw = _int(row["bw_bytes"])
    low, high = _int(row.get("bw_min_bytes"), bw), _int(row.get("bw_max_bytes"), bw)
    io = _int(row["bytes"])
    run_max = round(float(row["seconds"]) * 1000) if _present(row.get("seconds")) else 0
    run_min = round(float(row["seconds_min"]) * 1000) if _present(row.get("seconds_min")) else run_max
    p2 = lambda n, unit: num2str(n, unit=unit)  # noqa: E731
    p10 = lambda n, unit: num2str(n, pow2=False, unit=unit)  # noqa: E731
    return (
        f"{label(str(row['pattern']))}: bw={p2(bw, 'B/s')} ({p10(bw, 'B/s')}), "
        f"{p2(low, 'B/s')}-{p2(high, 'B/s')} ({p10(low, 'B/s')}-{p10(high, 'B/s')}), "
        f"io={p2(io, 'B')} ({p10(io, 'B')}), run={run_min}-{run_max}msec"
    )


def _present(value: Any) -> bool:
    """True for a filled result cell."""
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def iops_text(iops: float) -> str:
    """IOPS as fio prints them (num2str, power of 10, no unit): 15.6k."""
    return num2str(int(iops), pow2=False)
