"""Shared test helpers: small real sweep configs written to temporary folders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def write_config(folder: Path, **overrides: Any) -> Path:
    """A tiny real fio sweep config (16 MiB files, size-bound) in `folder`, with overrides."""
    document = {
        "name": "tiny",
        "directory": str(folder / "target"),
        "file_size": "16M",
        "repetitions": 2,
        "matrix": {"engine": ["fio"], "pattern": ["write", "read"], "io_size": ["1M"], "iodepth": [4]},
    }
    document.update(overrides)
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def data_rows(csv_path: Path) -> list[dict[str, str]]:
    """The rows of a results CSV as dictionaries."""
    import csv

    with csv_path.open(newline="") as handle:
        return list(csv.DictReader(handle))
