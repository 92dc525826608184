"""fio's bandwidth and latency logs: where fio writes them and their samples (fio_job gives the options).

`write_bw_log=P write_lat_log=P log_avg_msec=N` make fio write, per job j (from 1), `P_bw.j.log`
(KiB/s) and `P_lat.j.log`, `P_clat.j.log`, `P_slat.j.log` (ns), one line per window of N ms:
`time_ms, value, direction, block size, offset` (fio 3.33; a run shorter than a window leaves the
bandwidth log empty and one latency sample). gdsbench reads the bandwidth and completion latency
(clat, as the lat_* columns) into Samples and removes the log files it made.

In client mode the servers send their logs to the client, which writes `P_bw.j.log.<server>` in its
own working directory, `<server>` being the address as given to --client: for a unix socket, its
path, slashes and all (`P_bw.1.log./run/s0.sock`), which fio 3.33 cannot open. So the client runs in
the run's series folder with a relative P, and the folders such a name implies are made first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from pathlib import Path

from gdsbench.hosts import Host
from gdsbench.runners.base import RunContext, Sample

#: Every log fio writes for write_bw_log + write_lat_log, and the two gdsbench reads.
KINDS = ("bw", "lat", "clat", "slat")
SERIES_FOLDER = "series"
KIB = 1024


def client_folder(ctx: RunContext) -> Path | None:
    """The folder fio's client runs in, so the logs it receives land there."""
    return (ctx.raw_dir / SERIES_FOLDER).resolve() if ctx.series_ms and ctx.raw_dir is not None else None


def parse_log(text: str) -> list[tuple[int, float]]:
    """(time in ms, value) of each line of a fio log; lines that are not numbers are skipped."""
    points = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        with contextlib.suppress(ValueError, IndexError):
            points.append((int(fields[0]), float(fields[1])))
    return points


def samples(bw: Iterable[tuple[int, float]], clat: Iterable[tuple[int, float]], job: int) -> list[Sample]:
    """One job's samples: bandwidth (KiB/s -> bytes/s) and completion latency (ns -> us) joined on time."""
    merged: dict[int, list[float | None]] = {}
    for ms, value in bw:
        merged.setdefault(ms, [None, None])[0] = value * KIB
    for ms, value in clat:
        merged.setdefault(ms, [None, None])[1] = value / 1000
    return [Sample(job, ms / 1000, bw_bytes, lat_us) for ms, (bw_bytes, lat_us) in sorted(merged.items())]


def log_path(prefix: Path, kind: str, job: int, server: str | None = None) -> Path:
    """The file fio writes one log to: `<prefix>_<kind>.<job>.log`, `.<server>` added in client mode."""
    name = f"{prefix.name}_{kind}.{job}.log" + (f".{server}" if server is not None else "")
    return prefix.parent / name


def collect(prefix: Path, jobs: int, server: str | None = None) -> tuple[Sample, ...]:
    """Every job's samples from the logs at `prefix`; the log files (and folders made for them) removed."""
    found: list[Sample] = []
    for job in range(1, jobs + 1):
        paths = {kind: log_path(prefix, kind, job, server) for kind in KINDS}
        texts = {kind: _read(path) for kind, path in paths.items()}
        found += samples(parse_log(texts["bw"]), parse_log(texts["clat"]), job)
        for path in paths.values():
            path.unlink(missing_ok=True)
            _remove_made_folders(path.parent, prefix.parent)
    return tuple(found)


def _read(path: Path) -> str:
    """A log's text, or '' when fio wrote none."""
    try:
        return path.read_text()
    except OSError:
        return ""


def prepare_client(folder: Path, prefix: str, jobs: int, host: Host) -> None:
    """Make the folders a client-mode log name implies (a socket path's slashes), so fio can write it."""
    folder.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        for job in range(1, jobs + 1):
            log_path(folder / prefix, kind, job, host.address).parent.mkdir(parents=True, exist_ok=True)


def _remove_made_folders(folder: Path, top: Path) -> None:
    """rmdir the empty folders from `folder` up to (not including) `top`: the ones prepare_client made."""
    while folder != top and top in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
