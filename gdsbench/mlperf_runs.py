"""What surrounds a DLIO summary.json in an MLPerf Storage run folder: the summaries under a submission folder, the
per-rank stats beside each, and the rules edition its folder names (gdsbench import reads them all).

- A submission (v3.0: `<closed|open>/<org>/results/<system>/checkpointing/<model>/<datetime>/`, one or two
  timestamp folders per model, a write and a read invocation) or any folder: every `summary.json` under it,
  links never followed, at most MAX_SUMMARIES, at most MAX_DEPTH folders down.
- DLIO writes `<rank>_per_epoch_stats.json` on every rank (dlio_benchmark/utils/statscounter.py): per epoch,
  `save_ckpt<N>` / `load_ckpt<N>` with the rank's own `duration`. From them: the checkpoints the phase took
  (summary.json does not record it) and the rules' duration, the longest rank's per checkpoint (mean over them).
- The edition: v3.0 where the folder is a v3.0 submission's (`.mlps-code-image` beside it, naming a code image
  whose `.code-hash.json` records `mlpstorage_version` 3.0.x, or the `<mode>/<org>/results/<system>/` path), v2.0
  where mlpstorage's v2.0 path (`checkpointing/<model>/<datetime>` without the submission levels) and a v2.0
  metadata file say so; None (unknown) otherwise, never a guess.
Everything read is untrusted: bounded in size, regular files only, and a bad value is a SummaryError naming it.
"""

from __future__ import annotations

import json
import os
import re
import stat
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdsbench.errors import SummaryError

SUMMARY = "summary.json"
MAX_SUMMARIES = 4096
MAX_DEPTH = 12
MAX_STATS_BYTES = 1 << 20
RANK_STATS = re.compile(r"(\d{1,6})_per_epoch_stats\.json")
CHECKPOINT_KEY = re.compile(r"(save|load)_ckpt(\d{1,6})")
PATTERNS = ("save", "load")  # DLIO's save_ckpt<N> and load_ckpt<N>
#: A v3.0 submission's run folder: <mode>/<org>/results/<system>/checkpointing/<model>/<datetime>.
SUBMISSION = re.compile(r"(?:^|/)(closed|open)/[^/]+/results/[^/]+/checkpointing/[^/]+/\d{8}_\d{6}$")
#: mlpstorage v2.0's: <results>/checkpointing/<model>/<datetime>, nothing of a submission above it.
V2_RUN = re.compile(r"(?:^|/)checkpointing/[^/]+/\d{8}_\d{6}$")
CODE_IMAGE = ".mlps-code-image"


def summaries_under(path: Path) -> list[Path]:
    """`path` itself if a file, else every summary.json under the folder (sorted; links not followed)."""
    if not path.is_dir() or path.is_symlink():
        return [path]
    found: list[Path] = []
    base = len(path.parts)
    for folder, subfolders, files in os.walk(path, followlinks=False):
        if len(Path(folder).parts) - base >= MAX_DEPTH:
            subfolders.clear()
        if SUMMARY in files:
            candidate = Path(folder) / SUMMARY
            if candidate.is_symlink():
                raise SummaryError(f"{candidate}: a link, not followed inside a folder (name the file it points to)")
            found.append(candidate)
            if len(found) > MAX_SUMMARIES:
                raise SummaryError(f"{path}: more than {MAX_SUMMARIES} summary.json files under it; import a part")
    if not found:
        raise SummaryError(f"{path}: no summary.json under it (an MLPerf Storage run or submission folder has one)")
    return sorted(found)


@dataclass(frozen=True)
class RankPhase:
    """One phase as the ranks timed it: how many ranks said, the checkpoints, the rules' longest-rank duration."""

    ranks: int
    checkpoints: int
    max_rank_seconds: float


def rank_phases(summary: Path, ranks: int) -> dict[str, RankPhase]:
    """The per-rank stats beside a summary, by pattern (save, load); {} where there are none. Every rank's file must
    be there and agree on the checkpoints, else SummaryError naming what is missing."""
    folder = summary.parent
    files = {int(m.group(1)): folder / m.group(0) for p in _listing(folder) if (m := RANK_STATS.fullmatch(p))}
    if not files:
        return {}
    missing = sorted(set(range(ranks)) - set(files))
    if missing or len(files) != ranks:
        raise SummaryError(
            f"{folder}: per-rank stats for {len(files)} of the summary's {ranks} ranks (missing rank {missing[0] if missing else '?'}): "
            "import the whole run folder"
        )
    durations = {rank: _durations(path) for rank, path in sorted(files.items())}
    phases: dict[str, RankPhase] = {}
    for pattern in PATTERNS:
        timed = [durations[rank].get(pattern, []) for rank in sorted(durations)]
        counts = {len(t) for t in timed}
        if counts == {0}:
            continue
        if len(counts) != 1:
            raise SummaryError(f"{folder}: ranks' {pattern} checkpoints differ in number ({sorted(counts)})")
        longest = statistics.fmean(max(per) for per in zip(*timed))
        phases[pattern] = RankPhase(len(timed), counts.pop(), longest)
    return phases


def _listing(folder: Path) -> list[str]:
    """The names in a folder (bounded: a run folder holds a file per rank)."""
    names = os.listdir(folder)
    if len(names) > 4 * (1 << 16):
        raise SummaryError(f"{folder}: {len(names)} entries, more than a run folder holds")
    return names


def _durations(path: Path) -> dict[str, list[float]]:
    """One rank's checkpoint durations by pattern, in checkpoint order (every epoch's)."""
    doc = _json(path, MAX_STATS_BYTES)
    if not isinstance(doc, dict):
        raise SummaryError(f"{path}: expected an object of epochs")
    found: dict[str, dict[tuple[int, int], float]] = {}
    for epoch, entries in doc.items():
        if not isinstance(entries, dict):
            continue
        for key, entry in entries.items():
            m = CHECKPOINT_KEY.fullmatch(str(key))
            if m is None:
                continue
            seconds = entry.get("duration") if isinstance(entry, dict) else None
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds < 1e7:
                raise SummaryError(f"{path}: {epoch}.{key}.duration: expected seconds above 0 (got {seconds!r})")
            found.setdefault(m.group(1), {})[(_epoch(epoch), int(m.group(2)))] = float(seconds)
    return {pattern: [by[k] for k in sorted(by)] for pattern, by in found.items()}


def _epoch(text: str) -> int:
    """An epoch key as a number (DLIO's are "1", "2", ...)."""
    return int(text) if str(text).isdigit() else 0


def edition(summary: Path) -> str | None:
    """The rules edition the summary's run folder names ('v3.0', 'v2.0'), None where it names none."""
    folder = summary.parent.absolute()
    version = _code_image_version(folder)
    if version is not None:
        major = version.split(".")[:2]
        return f"v{'.'.join(major)}" if len(major) == 2 and all(p.isdigit() for p in major) else None
    text = folder.as_posix()
    if SUBMISSION.search(text):
        return "v3.0"
    if V2_RUN.search(text) and _v2_metadata(folder):
        return "v2.0"
    return None


def _code_image_version(folder: Path) -> str | None:
    """mlpstorage's version as a v3.0 run's code image records it: `.mlps-code-image` names `<algorithm>:<hash>`,
    whose `code-<hash8>/.code-hash.json` sits in the organisation's folder (the one holding `results/`); nothing
    else above the run is read."""
    pointer = folder / CODE_IMAGE
    parts = folder.parts
    if not pointer.is_file() or pointer.is_symlink() or "results" not in parts:
        return None
    digest = _small_text(pointer).strip().rpartition(":")[2]
    if not re.fullmatch(r"[0-9a-f]{8,64}", digest):
        return None
    organisation = Path(*parts[: len(parts) - 1 - parts[::-1].index("results")])
    record = organisation / f"code-{digest[:8]}" / ".code-hash.json"
    if not record.is_file() or record.is_symlink():
        return None
    found = _json(record, 1 << 16)
    version = found.get("mlpstorage_version") if isinstance(found, dict) else None
    return str(version) if isinstance(version, str) else None


def _v2_metadata(folder: Path) -> bool:
    """Whether the run folder's `checkpointing_<datetime>_metadata.json` has v2.0's shape (`args.closed`, a boolean;
    v3.0 writes `args.mode`)."""
    for name in _listing(folder):
        if re.fullmatch(r"checkpointing_\d{8}_\d{6}_metadata\.json", name):
            doc = _json(folder / name, 16 << 20)
            args = doc.get("args") if isinstance(doc, Mapping) else None
            return isinstance(args, Mapping) and isinstance(args.get("closed"), bool) and "mode" not in args
    return False


def _small_text(path: Path) -> str:
    """A small regular file's text."""
    return read_file(path, 4096).decode("utf-8", "replace")


def _json(path: Path, limit: int) -> Any:
    """A regular file's JSON, at most `limit` bytes; SummaryError naming it otherwise."""
    try:
        return json.loads(read_file(path, limit))
    except (ValueError, RecursionError) as exc:
        raise SummaryError(f"{path}: not JSON ({str(exc)[:100]})") from None


def read_file(path: Path, limit: int, kind: str = "a file DLIO or mlpstorage writes", follow: bool = False) -> bytes:
    """A regular file's bytes, at most `limit`: never blocking on a FIFO or a device, a link followed only where
    `follow` (a path the user named); SummaryError naming the file and what `kind` of file it should be."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SummaryError(f"{path}: cannot open: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SummaryError(f"{path}: not a regular file ({kind} is one)")
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise SummaryError(f"{path}: over {limit} bytes; too large for {kind}")
    return data
