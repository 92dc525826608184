"""Sizes and durations as fio and gdsio write them, and fio's num2str number formatting.

Bare suffixes (K, M, G, T, P) and IEC suffixes (KiB, MiB, ...) are powers of 2, as in fio and gdsio
(4K = 4096); SI suffixes with a B (KB, MB, GB, ...) are powers of 10. A bare number is bytes.
"""

from __future__ import annotations

import math
import re

GIB = 1 << 30  # one gibibyte: the unit of binary-unit tables (GiB/s, CPU-s per GiB)
_PREFIXES = "kmgtpe"
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpe]?)(i?)(b?)\s*$", re.IGNORECASE)
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|m|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_size(text: str | int) -> int:
    """Parse '4K', '1GiB', '512k', '1GB' or 4096 into bytes; raise ValueError on anything else."""
    if isinstance(text, bool):
        raise ValueError(f"not a size: {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"negative size: {text}")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r}")
    number, prefix, iec, byte = match.groups()
    if iec and not prefix:
        raise ValueError(f"not a size: {text!r}")
    power = _PREFIXES.index(prefix.lower()) + 1 if prefix else 0
    base = 1000 if (byte and not iec and prefix) else 1024
    value = float(number) * base**power
    if value != int(value):
        raise ValueError(f"size is not a whole number of bytes: {text!r}")
    return int(value)


def parse_duration(text: str | int | float) -> float:
    """Parse '5s', '500ms', '2m', '1h' or a bare number of seconds into seconds."""
    if isinstance(text, bool):
        raise ValueError(f"not a duration: {text!r}")
    if isinstance(text, (int, float)):
        if text < 0 or math.isnan(text):
            raise ValueError(f"negative duration: {text}")
        return float(text)
    match = _DURATION_RE.match(str(text))
    if not match:
        raise ValueError(f"not a duration: {text!r}")
    number, unit = match.groups()
    return float(number) * _DURATION_UNITS[unit.lower() if unit else None]


def size_label(num_bytes: int) -> str:
    """Short power-of-2 label for an IO size as people write it: 4096 -> '4K', 2**24 -> '16M'."""
    for power in range(len(_PREFIXES), 0, -1):
        unit = 1024**power
        if num_bytes >= unit and num_bytes % unit == 0:
            return f"{num_bytes // unit}{_PREFIXES[power - 1].upper()}"
    return str(num_bytes)


_SI = ("", "k", "M", "G", "T", "P")
_IEC = ("", "Ki", "Mi", "Gi", "Ti", "Pi")


def num2str(num: int, *, maxlen: int = 4, pow2: bool = True, unit: str = "") -> str:
    """Format a count exactly as fio's num2str() does (its run-status lines use maxlen = 4).

    fio divides by 1024 (or 1000) until the integer part fits in `maxlen` digits, then fills the
    remaining digits with the truncated fraction, e.g. 1977614336 B/s -> '1886MiB/s' / '1978MB/s'.
    """
    num = int(num)
    thousand = 1024 if pow2 else 1000
    prefixes = _IEC if pow2 else _SI
    post_index, modulo, carry = 0, None, False
    while post_index < len(_SI):
        if len(str(num)) <= maxlen:
            break
        modulo = num % thousand
        num //= thousand
        carry = modulo >= thousand // 2
        post_index += 1
    if post_index >= len(_SI):
        post_index = 0
    if modulo is None:
        return f"{num}{prefixes[post_index]}{unit}"
    room = maxlen - len(str(num))
    if room <= 1:
        num += 1 if carry else 0
        return f"{num}{prefixes[post_index]}{unit}"
    fraction = f"{modulo / thousand:.{room - 1}f}"
    if fraction.startswith("1"):  # the fraction rounded up to 1.0: fio carries it into the integer part
        num += 1
    return f"{num}.{fraction[2:]}{prefixes[post_index]}{unit}"


def bandwidth_pair(bytes_per_s: float) -> tuple[str, str]:
    """A bandwidth in fio's two spellings: ('1886MiB/s', '1978MB/s')."""
    value = int(bytes_per_s)
    return num2str(value, unit="B/s"), num2str(value, pow2=False, unit="B/s")


def format_bandwidth(bytes_per_s: float) -> str:
    """One bandwidth as fio prints it, power-of-2 with power-of-10 in brackets."""
    pow2, pow10 = bandwidth_pair(bytes_per_s)
    return f"{pow2} ({pow10})"


def latency_text(microseconds: float) -> str:
    """A latency in the unit fio would print it in (fio switches unit at 10,000): 850ns, 87.5us, 4021us,
    63.1ms, 12.4s; '-' when missing."""
    if microseconds is None or microseconds != microseconds:
        return "-"
    for limit, scale, unit in ((10, 1e-3, "ns"), (10_000, 1, "us"), (10_000_000, 1e3, "ms")):
        if microseconds < limit:
            value = microseconds / scale
            return f"{value:.0f}{unit}" if value >= 100 else f"{value:.1f}{unit}"
    return f"{microseconds / 1e6:.1f}s"
