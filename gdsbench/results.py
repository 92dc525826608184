"""The results schema: one tidy row per case x repetition, a CSV written row by row, a JSON sidecar.

Sizes are bytes, bandwidths bytes/s, times seconds, latencies microseconds: units belong to reports.
`load(paths)` is the one way every reader (report, compare, notebooks) gets at results.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gdsbench import columns as declared_columns
from gdsbench.errors import UsageError
from gdsbench.files import replace_file

if TYPE_CHECKING:
    import pandas

#: The results schema this version writes (in the sidecar's `schema_version`). 1: files written before it was
#: recorded, read the same way (a column they lack is empty; a case parameter they lack matches its default).
#: Measured columns added since (cpu_seconds, machine_cpu_seconds, busy_cpus_before, staging_bytes, the train pattern's stall_seconds ... restore_seconds)
#: leave it as it is: older files read them empty; the trait columns (stores_on, ceiling), read the legacy way.
SCHEMA_VERSION = 2

TEXT, NUMBER = declared_columns.TEXT, declared_columns.NUMBER
#: The core columns a results file has, in this order, and what it holds (a reader parses numbers as numbers);
#: the columns its engines declare (runners' `columns`, recorded in the sidecar) and runner options follow them.
#: Engine figures that predate declarations (lat_first_us, the job spread, bw_sum_bytes, the checkpoints' and the
#: ranks' columns) are declared by their engines now, yet keep their place here: files carry them
#: undeclared, so old and new files have the same header and read them alike.
SCHEMA: tuple[tuple[str, str], ...] = (
    ("run_id", TEXT),
    ("host", TEXT),
    ("case", TEXT),
    ("engine", TEXT),
    ("transfer", TEXT),
    ("pattern", TEXT),
    ("io_size", NUMBER),
    ("threads", NUMBER),
    ("iodepth", NUMBER),
    ("repetition", NUMBER),
    ("status", TEXT),
    ("flags", TEXT),
    ("bytes", NUMBER),
    ("seconds", NUMBER),
    ("bw_bytes", NUMBER),
    ("iops", NUMBER),
    ("lat_mean_us", NUMBER),
    ("lat_stdev_us", NUMBER),
    ("lat_p50_us", NUMBER),
    ("lat_p90_us", NUMBER),
    ("lat_p99_us", NUMBER),
    ("lat_p999_us", NUMBER),
    ("lat_first_us", NUMBER),
    ("bw_min_bytes", NUMBER),
    ("bw_max_bytes", NUMBER),
    ("max_rank_seconds", NUMBER),
    ("min_rank_bw_bytes", NUMBER),
    ("seconds_min", NUMBER),
    ("spread_seconds", NUMBER),
    ("straggler", TEXT),
    ("bw_sum_bytes", NUMBER),
    ("peak_rss_bytes", NUMBER),
    ("staging_bytes", NUMBER),
    ("cpu_seconds", NUMBER),
    ("machine_cpu_seconds", NUMBER),
    ("busy_cpus_before", NUMBER),
    ("stall_seconds", NUMBER),
    ("slowdown", NUMBER),
    ("checkpoint_cost_seconds", NUMBER),
    ("restore_seconds", NUMBER),
    ("bytes_on_disk", NUMBER),
    ("blocking_seconds", NUMBER),
    ("compression_ratio", NUMBER),
    ("cache", TEXT),
    ("path", TEXT),
    ("stores_on", TEXT),
    ("ceiling", TEXT),
    ("started_at", TEXT),
    ("error", TEXT),
    ("note", TEXT),
    ("command", TEXT),
    ("raw_output", TEXT),
)
COLUMNS = tuple(name for name, _ in SCHEMA)
#: The columns of the first schema, which every results file has: `load` adds one a file lacks, empty (columns
#: added since are read where a file has them).
FIRST_COLUMNS = (
    *("run_id", "host", "case", "engine", "transfer", "pattern", "io_size", "threads", "iodepth", "repetition"),
    *("status", "bytes", "seconds", "bw_bytes", "iops", "lat_mean_us", "lat_stdev_us", "lat_p50_us", "lat_p90_us"),
    *("lat_p99_us", "lat_p999_us", "bw_min_bytes", "bw_max_bytes", "seconds_min", "peak_rss_bytes"),
    *("bytes_on_disk", "cache", "started_at", "error", "note", "command", "raw_output"),
)
#: Columns older files carry that no writer fills now: the train pattern's model (Daly's interval and the goodput
#: at the case's mtbf), evaluated by the report since (report.goodput). Read as numbers, never as parameters.
RETIRED: tuple[tuple[str, str], ...] = (("optimal_interval_seconds", NUMBER), ("goodput", NUMBER))
NUMERIC = tuple(name for name, kind in (*SCHEMA, *RETIRED) if kind == NUMBER)
#: Columns that say what was measured (the case); runner option columns are parameters too.
PARAMETERS = ("engine", "transfer", "pattern", "io_size", "threads", "iodepth")
#: The time-series table beside a results CSV: one row per job and log window (fio's bw/lat logs).
SERIES_COLUMNS = ("run_id", "case", "host", "repetition", "job", "time_s", "bw_bytes", "lat_us")


def parameters(columns: Iterable[str], figures: Iterable[str] = ()) -> list[str]:
    """The parameter columns of a results table: the core ones, then runner options (extra columns that are not
    `figures`, the engines' declared columns: see `figures_of`)."""
    columns = list(columns)
    known = {*COLUMNS, *(name for name, _ in RETIRED), "source", *figures}
    extra = [c for c in columns if c not in known]
    return [c for c in PARAMETERS if c in columns] + extra


def sidecar_path(csv_path: Path) -> Path:
    """The metadata file beside a results CSV: results/x.csv -> results/x.meta.json."""
    return csv_path.with_suffix(".meta.json")


def raw_dir(csv_path: Path) -> Path:
    """The folder beside a results CSV that keeps each run's raw tool output."""
    return csv_path.with_suffix(".raw")


def series_path(csv_path: Path) -> Path:
    """The time-series table beside a results CSV: results/x.csv -> results/x.series.tsv (tab-separated,
    so `results/*.csv` globs never take it for a results file)."""
    return csv_path.with_suffix(".series.tsv")


@dataclass
class ResultWriter:
    """Appends rows to a CSV, flushed and fsynced after each so an interrupted sweep (or a power loss) keeps
    every finished row."""

    path: Path
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        if not fresh:
            self.columns = tuple(read_header(self.path))  # resuming: keep the file's own columns
        self._file = self.path.open("a", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
        if fresh:
            self._csv.writeheader()
            self._file.flush()

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one row and push it to disk."""
        self._csv.writerow({name: _cell(row.get(name)) for name in self.columns})
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def cut_torn_line(path: Path) -> int:
    """Cut a last line that does not end in a newline (a row torn by a crash mid-write) off a results CSV
    gdsbench wrote; the number of bytes cut (0 when the file ends cleanly)."""
    data = path.read_bytes()
    if not data or data.endswith(b"\n"):
        return 0
    keep = data.rfind(b"\n") + 1
    with path.open("r+b") as f:
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return len(data) - keep


def _cell(value: Any) -> Any:
    """None as an empty cell; everything else as csv writes it."""
    return "" if value is None else value


def read_header(path: Path) -> list[str]:
    """The column names of a results CSV."""
    with path.open(newline="") as handle:
        return next(csv.reader(handle), [])


def write_sidecar(csv_path: Path, metadata: Mapping[str, Any]) -> Path:
    """Write the run's metadata (machine, tools, resolved config) beside the CSV, whole or not at all."""
    path = sidecar_path(csv_path)
    replace_file(path, lambda out: out.write(json.dumps(metadata, indent=2, default=str) + "\n"))
    return path


def read_sidecar(csv_path: Path) -> dict[str, Any]:
    """The metadata written beside a results CSV, or {} when there is none."""
    path = sidecar_path(Path(csv_path))
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def schema_version(metadata: Mapping[str, Any]) -> int:
    """The results schema a run was written with (its sidecar's `schema_version`); 1 for files written before
    gdsbench recorded it, or without a sidecar."""
    version = metadata.get("schema_version")
    return version if isinstance(version, int) and not isinstance(version, bool) else 1


#: What --resume tracks per row: (case, repetition, host); a host of "*" stands for any host.
Key = tuple[str, int, str]
ANY_HOST = "*"


def _key(row: Mapping[str, str]) -> Key | None:
    """A row's (case, repetition, host), or None for a row without a whole-number repetition."""
    repetition = row.get("repetition") or ""
    return (row.get("case") or "", int(repetition), row.get("host") or "") if repetition.isdigit() else None


def read_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A results CSV's header and rows, as text."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


def done_keys(path: Path, skip_failed: bool = False) -> frozenset[Key]:
    """(case, repetition, host) of the rows a results file has finished, for --resume: ok and skipped
    rows, and failed rows too with `skip_failed` (else a failed one is run again)."""
    finished = ("ok", "skipped", "failed") if skip_failed else ("ok", "skipped")
    _, rows = read_rows(path)
    return frozenset(k for row in rows if row.get("status") in finished and (k := _key(row)) is not None)


def drop_failed(path: Path, keys: Iterable[Key]) -> int:
    """Remove the failed rows of `keys` (about to be run again, or finished by another row), keeping
    every other row as it is, so a file keeps one row per (case, repetition, host); return how many went."""
    keys = set(keys)
    with path.open(newline="") as handle:
        header, *rows = list(csv.reader(handle)) or [[]]
    kept = [row for row in rows if not _failed_of(dict(zip(header, row)), keys)]
    if len(kept) < len(rows):
        rewrite(path, [header, *kept])
    return len(rows) - len(kept)


def _failed_of(row: Mapping[str, str], keys: set[Key]) -> bool:
    """True for a failed row whose (case, repetition, host) is one of `keys` (host "*": any host)."""
    key = _key(row)
    return row.get("status") == "failed" and key is not None and (key in keys or (*key[:2], ANY_HOST) in keys)


def rewrite(path: Path, rows: list[list[str]]) -> None:
    """Replace a CSV atomically (see `replace_file`)."""
    replace_file(path, lambda handle: csv.writer(handle).writerows(rows))


def load(paths: Iterable[str | Path]) -> pandas.DataFrame:
    """Load one or more results CSVs into one DataFrame (numeric columns typed, a `source` column added).

    Args:
        paths: results CSV files, from one or several runs or hosts.
    Returns:
        A DataFrame with the COLUMNS schema plus each file's extra option columns; `host` and `run_id`
        tell runs apart.
    Raises:
        UsageError: a path is missing or is not a gdsbench results file (see `check_table`).
    """
    import pandas as pd

    frames = [_frame(Path(path)) for path in paths]
    if not frames:
        raise UsageError("no results files given")
    frame = pd.concat(frames, ignore_index=True)
    figures = {name: column for part in frames for name, column in part.attrs.get("figures", {}).items()}
    numeric = [*NUMERIC, *(name for name, column in figures.items() if column.kind == NUMBER)]
    for column in numeric:
        if column in frame:
            numbers = pd.to_numeric(frame[column], errors="coerce")
            frame[column] = numbers.where(numbers.abs() != float("inf"))  # no writer makes an infinity
    frame = _with_every_column(frame)
    frame.attrs["figures"] = figures
    return frame


def figures_of(frame: pandas.DataFrame) -> dict[str, declared_columns.Column]:
    """The engine columns the files of a loaded frame declare, by name (their sidecars' `columns`)."""
    return dict(frame.attrs.get("figures", {}))


def _with_every_column(frame: pandas.DataFrame) -> pandas.DataFrame:
    """The frame with each FIRST_COLUMNS column its files lack added empty (text columns as text), after the others."""
    import pandas as pd

    missing = {
        name: pd.Series(None, index=frame.index, dtype=float if kind == NUMBER else object)
        for name, kind in SCHEMA
        if name in FIRST_COLUMNS and name not in frame
    }
    return pd.concat([frame, pd.DataFrame(missing)], axis=1) if missing else frame


#: Columns every results file has, and those every one of its rows fills in.
REQUIRED_COLUMNS = ("case", "engine", "status", "bw_bytes")
REQUIRED_CELLS = ("case", "engine", "status")


def _frame(path: Path) -> pandas.DataFrame:
    """One results CSV as a DataFrame of its text, checked first (`check_table`); text columns stay text."""
    import pandas as pd

    if not path.is_file():
        raise UsageError(f"{path}: no such results file")
    text = read_text(path)
    header, count = check_table(path, text)
    text_columns = {name: str for name, kind in SCHEMA if kind == TEXT and name in header}
    try:
        frame = pd.read_csv(io.StringIO(text), keep_default_na=False, na_values=[""], dtype=text_columns)
    except (ValueError, pd.errors.ParserError) as exc:  # what the csv module accepted and pandas does not
        raise UsageError(f"{path}: not a results file pandas can read ({exc})") from None
    if len(frame) != count or list(frame.columns) != header:
        raise UsageError(
            f"{path}: pandas reads it as {len(frame)} rows of {len(frame.columns)} columns, not "
            f"{count} of {len(header)}; not a results file gdsbench wrote"
        )
    frame = with_traits(frame).assign(source=str(path))
    frame.attrs["figures"] = declared_columns.declared(read_sidecar(path))
    return frame


def with_traits(frame: pandas.DataFrame) -> pandas.DataFrame:
    """Rows with their trait columns (`columns.TRAIT_COLUMNS`, written by the sweep from the runners' declared
    traits); a row without them (a file written before rows carried them) gets the legacy reading
    (`columns.legacy_traits`), the one place where traits are read from engine names."""
    import pandas as pd

    no_traits = frame["stores_on"].isna() if "stores_on" in frame else pd.Series(True, index=frame.index)
    ioengine = frame["ioengine"] if "ioengine" in frame else pd.Series(None, index=frame.index)
    pattern = frame["pattern"] if "pattern" in frame else pd.Series("", index=frame.index)
    legacy: list[tuple[str, ...]] | None = None
    for position, name in enumerate(declared_columns.TRAIT_COLUMNS):
        # a row without traits, or a file written before this trait existed: read from the engine's name
        missing = no_traits if name in frame else pd.Series(True, index=frame.index)
        if not missing.any():
            continue
        if legacy is None:
            rows = zip(frame["engine"], pattern, ioengine)
            legacy = [declared_columns.legacy_traits(str(e), str(p), i) for e, p, i in rows]
            frame = frame.copy()
        column = frame[name].astype(object) if name in frame else pd.Series(None, index=frame.index, dtype=object)
        column[missing] = [values[position] for values, gone in zip(legacy, missing) if gone]
        frame[name] = column
    return frame


def read_text(path: Path) -> str:
    """A results file's text; UsageError naming the line of a byte that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x}); not a results file") from None


def check_table(path: Path, text: str) -> tuple[list[str], int]:
    """The header and number of rows of a results CSV's text; UsageError naming the file and line of what no
    gdsbench writer makes: broken quoting, a missing or duplicated column, a row whose fields are more or
    fewer than the header's (torn or hand-edited), a row without a case, engine or status."""
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    line, count = 1, 0
    try:
        header = next(reader, [])
        _check_header(path, header)
        for row in reader:
            if row:
                _check_row(path, line + 1, header, row)
                count += 1
            line = reader.line_num
    except csv.Error as exc:
        raise UsageError(f"{path}:{line + 1}: not a CSV row ({exc}; a torn or hand-edited row)") from None
    return header, count


def _check_header(path: Path, header: list[str]) -> None:
    """UsageError for a header without gdsbench's core columns or with a column twice."""
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise UsageError(f"{path}: not a gdsbench results file (missing columns: {', '.join(missing)})")
    if "" in header:
        raise UsageError(f"{path}:1: column {header.index('') + 1} has no name; not a results file gdsbench wrote")
    twice = sorted({name for name in header if header.count(name) > 1})
    if twice:
        raise UsageError(f"{path}:1: column {twice[0]!r} appears more than once; not a results file gdsbench wrote")


def _check_row(path: Path, line: int, header: list[str], row: list[str]) -> None:
    """UsageError for a row with a field count other than the header's, or an empty case, engine or status."""
    if len(row) != len(header):
        raise UsageError(
            f"{path}:{line}: {len(row)} fields where the header has {len(header)} (a torn or hand-edited row)"
        )
    empty = [name for name in REQUIRED_CELLS if not row[header.index(name)]]
    if empty:
        raise UsageError(f"{path}:{line}: no {empty[0]} in this row; not a row gdsbench wrote")


@dataclass
class SeriesWriter:
    """Appends time-series rows (SERIES_COLUMNS) to the table beside a results CSV, flushed per run."""

    path: Path

    def __post_init__(self) -> None:
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        self._file = self.path.open("a", newline="")
        self._csv = csv.writer(self._file, delimiter="\t")
        if fresh:
            self._csv.writerow(SERIES_COLUMNS)

    def write(self, identity: Mapping[str, Any], samples: Iterable[Iterable[Any]]) -> None:
        """One run's samples (job, time_s, bw_bytes, lat_us) under its run_id, case, host and repetition."""
        ids = [identity.get(c) for c in SERIES_COLUMNS[:4]]
        self._csv.writerows([*ids, *(_cell(v) for v in sample)] for sample in samples)
        self._file.flush()

    def close(self) -> None:
        """Close the file."""
        self._file.close()


def load_series(paths: Iterable[str | Path]) -> pandas.DataFrame:
    """The time series of one or more results CSVs (their `.series.tsv` tables), with a `source` column
    naming the results CSV; an empty frame of SERIES_COLUMNS when none has one."""
    import pandas as pd

    frames = []
    for path in map(Path, paths):
        table = series_path(path)
        if table.is_file() and table.stat().st_size:
            text = {"host": str, "case": str, "run_id": str}
            frames.append(pd.read_csv(table, sep="\t", dtype=text).assign(source=str(path)))
    if not frames:
        return pd.DataFrame(columns=[*SERIES_COLUMNS, "source"])
    return pd.concat(frames, ignore_index=True)
