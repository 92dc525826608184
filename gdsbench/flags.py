"""Guard rails: rules that flag result rows whose figures cannot be taken at face value, each with its remedy.

The rules are data (RULES: name, what it means, the remedy). Each is judged where its information is:
- when a row is written (`row_flags`, by the sweep): `too_short` (the row) and `throttled` (the run's
  time series, which the sweep has in hand then and stores apart);
- when results are read (`annotate`, by report, compare and qualify): `page_cache` and `unstable` need
  the other rows of the sweep, `above_link` the device and link facts of the sidecar, `busy_machine` only
  the row (so files from before it get it too). `annotate`
  merges them with the flags stored in the rows, so a CSV from an older gdsbench gets them too.
A row's `flags` cell lists the names, comma-separated, in RULES order; empty means clean.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gdsbench import results
from gdsbench.ceilings import CEILINGS, bounded, ceiling
from gdsbench.columns import FILES

if TYPE_CHECKING:
    import pandas as pd

#: A run shorter than this is mostly start-up (file open, first I/Os) and fio's millisecond clock.
TOO_SHORT_S = 0.5
#: Repetitions whose median absolute deviation exceeds this share of their median are unstable.
UNSTABLE_MAD = 0.20
#: The first repetition is "much slower" below this share of the median of the others (3+ repetitions).
FIRST_SLOW = 0.70
#: A buffered read this much faster than the sweep's best O_DIRECT read came from memory.
PAGE_CACHE_MARGIN = 1.10
#: Bandwidth this much above the physical limit (the limits' own rounding allowed for).
LINK_MARGIN = 1.02
#: A checkpoint case's median this much above its run's ceiling (fio's medians move a little between cases).
CEILING_MARGIN = 1.02
#: Throttled: the last third of a job's windows averages below this share of the first third.
THROTTLE_DROP = 0.75
#: Windows a job's series needs (beyond the first and the last, partial ones) to judge throttling.
THROTTLE_WINDOWS = 6
#: Throttling (heat, an SSD's write cache running out) shows over sustained load: shorter runs are not judged.
THROTTLE_MIN_S = 5.0
#: busy_machine: CPUs busy on average in the window before the run (another process's work) ...
BUSY_BEFORE_CPUS = 0.5
#: ... while the machine's CPU beyond the run's own processes', per second of the run, is above this and above
#: the run's own CPU (kernel work done for the run, a buffered writer's writeback or a loop device's worker, can
#: be that large too: hence the load before the run, or in older files a saturated machine, must say others ran).
BUSY_EXCESS_CPUS = 0.5
#: Files without busy_cpus_before: the machine counts as busy when its CPU per second reached this share of the
#: run's usable cores.
BUSY_SATURATED = 0.9
BUFFERED = ("CPU_CACHED", "CPU_CACHED_GPU")
READS = ("read", "randread")
WRITES = ("write", "randwrite")


@dataclass(frozen=True)
class Rule:
    """One guard rail: its flag name, what it means, and what to do about it."""

    name: str
    meaning: str
    remedy: str


RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        Rule(
            "page_cache",
            "a buffered read faster than the sweep's O_DIRECT read, or a buffered read of a file written "
            "just before without a cache drop: it measured memory, not the device",
            "drop caches (echo 3 > /proc/sys/vm/drop_caches), read with direct=1 (transfer CPU_ONLY), "
            "or use files larger than memory",
        ),
        Rule(
            "above_link",
            "bandwidth above the physical limit of the device or its PCIe link (sidecar fingerprint)",
            "the data came from a cache, or the limit is wrong: check the device and link in the sidecar "
            "and the limits table (docs/guard-rails.md)",
        ),
        Rule(
            "above_ceiling",
            "a checkpoint save or load faster than its run's own ceiling (fio's best durable direct write for "
            "saves, its best direct read for loads, the s3 engine's best PUT or GET for objects): the engine read "
            "through the page cache (a buffered engine, cache: warm), or the run's ceiling case is not the device's "
            "best (smaller or fewer requests than the engine's); the report names which",
            "add a fio case shaped like the engine's I/O (its request size and threads, direct) so the ceiling "
            "bounds it, and load with cache: cold",
        ),
        Rule(
            "unstable",
            f"repetitions spread more than {UNSTABLE_MAD:.0%} (median absolute deviation / median), or the "
            f"first repetition below {FIRST_SLOW:.0%} of the others",
            "add warmup runs, a longer runtime, precondition the SSD (write it full once), stop neighbours",
        ),
        Rule(
            "throttled",
            f"bandwidth falling through the run: the last third below {THROTTLE_DROP:.0%} of the first "
            "(fio's bandwidth log)",
            "look at the series (report --series): thermal throttling, an SLC cache filling, or garbage "
            "collection; precondition the SSD and run longer to measure the steady state",
        ),
        Rule(
            "remote_fs",
            "direct I/O on a network or FUSE file system (the sidecar's target: nfs, lustre, fuse.ceph-fuse, ...): "
            "O_DIRECT skips this host's page cache, not the server's or the FUSE daemon's (ceph-fuse's object "
            "cache, an NFS server's memory), so a read may have come from memory elsewhere",
            "defeat the servers' caches too (Ceph: ceph tell osd.* cache drop; files larger than the servers' "
            "memory), and compare with the same run through the storage's native client",
        ),
        Rule(
            "busy_machine",
            f"the machine's CPU (every process's, /proc/stat) far above the run's own processes' (over "
            f"{BUSY_EXCESS_CPUS:g} CPUs more per second of the run, and more than the run's own) while the machine "
            f"was busy: {BUSY_BEFORE_CPUS:g}+ CPUs busy just before the run (busy_cpus_before; in older files: "
            f"every usable core busy during it): others' work is in the machine CPU figures (machine "
            "CPU-s/GiB, CPU-bound at) and may have slowed the run",
            "stop the neighbours and run again; meanwhile read the process CPU-s/GiB column",
        ),
        Rule(
            "too_short",
            f"runtime under {TOO_SHORT_S:g} s: start-up and fio's millisecond clock weigh in the figure",
            "set a runtime (time-based fio and gdsio runs), or a larger file_size or checkpoint_size",
        ),
    )
}


#: Every guard rail says its row's figures cannot be taken at face value: a compare verdict or a qualify check on a
#: row that carries one (and that the caller did not allow) is `inconclusive`, never a regression, a pass or a fail.
INCONCLUSIVE = "inconclusive"


def distrusted(cell: Any, allowed: Iterable[str] = ()) -> list[str]:
    """The flags of a `flags` cell that make a verdict on its row inconclusive: all of them but those `allowed`."""
    spared = set(allowed)
    return [name for name in parse(cell) if name not in spared]


def parse_allowed(text: str) -> frozenset[str]:
    """A comma-separated list of flag names (--allow-flags); ValueError naming an unknown one."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - set(RULES))
    if unknown:
        raise ValueError(f"unknown flag {unknown[0]!r}: one of {', '.join(RULES)}")
    return names


def text(names: Iterable[str]) -> str:
    """Flag names as a row's cell: RULES order, comma-separated, each once; '' when clean."""
    chosen = set(names)
    return ",".join(name for name in RULES if name in chosen)


def parse(cell: Any) -> list[str]:
    """A `flags` cell as names (empty, missing or NaN: none)."""
    if not isinstance(cell, str):
        return []
    return [name.strip() for name in cell.split(",") if name.strip()]


def row_flags(row: Mapping[str, Any], series: Sequence[Sequence[Any]] = ()) -> list[str]:
    """The flags a row earns on its own: too short, or throttled by its time series."""
    if row.get("status") != "ok":
        return []
    found = []
    seconds = row.get("seconds")
    # a train row's figures are medians over a whole loop of perf_counter-timed checkpoints and steps: its
    # `seconds` (one checkpoint until durable) is no measuring window, however short
    if isinstance(seconds, (int, float)) and seconds < TOO_SHORT_S and str(row.get("pattern")) != "train":
        found.append("too_short")
    if isinstance(seconds, (int, float)) and seconds >= THROTTLE_MIN_S and throttled(series):
        found.append("throttled")
    return found


def throttled(series: Sequence[Sequence[Any]]) -> bool:
    """True when most jobs' bandwidth falls through the run (first and last, partial windows left out)."""
    by_job: dict[Any, list[float]] = {}
    for job, _time, bw, *_ in series:
        if bw is not None and bw == bw:  # NaN: a window without a bandwidth figure
            by_job.setdefault(job, []).append(float(bw))
    ratios = sorted(_fall(values[1:-1]) for values in by_job.values() if len(values) - 2 >= THROTTLE_WINDOWS)
    return bool(ratios) and ratios[len(ratios) // 2] < THROTTLE_DROP


def _fall(values: list[float]) -> float:
    """The mean of the last third over the mean of the first third."""
    third = len(values) // 3
    first = sum(values[:third]) / third
    return sum(values[-third:]) / third / first if first > 0 else 1.0


def annotate(frame: pd.DataFrame, sidecars: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """The frame with every rule judged: `flags` = the stored flags plus page_cache, unstable, above_link,
    remote_fs.

    `sidecars` maps a row's `source` to its sidecar (read from beside each CSV when not given).
    """
    if frame.empty:
        return frame.assign(flags=frame.get("flags", ""))
    found: dict[Any, set[str]] = {index: set(parse(cell)) for index, cell in frame.get("flags", {}).items()}
    for index in frame.index:
        found.setdefault(index, set())
    sidecars = dict(sidecars) if sidecars is not None else _sidecars(frame)
    if set(frame.columns) >= NEEDED:
        for name, judge in SWEEP_RULES.items():
            for index in judge(frame, sidecars):
                found[index].add(name)
    return frame.assign(flags=[text(found[index]) for index in frame.index])


def _sidecars(frame: pd.DataFrame) -> dict[str, Mapping[str, Any]]:
    """Each results file's sidecar, by the `source` column."""
    if "source" not in frame:
        return {}
    return {source: results.read_sidecar(Path(source)) for source in frame["source"].dropna().unique()}


def _runs(frame: pd.DataFrame) -> Iterable[pd.DataFrame]:
    """The ok rows of each sweep run (source and run_id), in file order."""
    ok = frame[frame["status"] == "ok"]
    keys = [c for c in ("source", "run_id") if c in ok]
    return (group for _, group in ok.groupby(keys, sort=False, dropna=False)) if keys else [ok]


def page_cache(frame: pd.DataFrame, sidecars: Mapping[str, Any]) -> list[Any]:
    """Buffered reads faster than the run's best O_DIRECT read, or right after a write that left dirty pages."""
    flagged: list[Any] = []
    for run in _runs(frame):
        for _, rows in run.groupby("host", sort=False):
            reads = rows[rows["pattern"].isin(READS) & rows["transfer"].isin(BUFFERED)]
            direct = rows[rows["pattern"].isin(READS) & ~rows["transfer"].isin(BUFFERED)]
            if not direct.empty:
                best = direct.groupby("case")["bw_bytes"].median().max()
                flagged += list(reads.index[reads["bw_bytes"] > best * PAGE_CACHE_MARGIN])
            flagged += [index for index in reads.index if _after_dirty_write(rows, index)]
    return flagged


def _after_dirty_write(rows: pd.DataFrame, index: Any) -> bool:
    """True when the row run just before `index` (same run and host) wrote without fsync or unlink."""
    position = rows.index.get_loc(index)
    if not isinstance(position, int) or position == 0:
        return False
    last = rows.iloc[position - 1]
    return (
        last["pattern"] in WRITES
        and last.get("engine") == rows.loc[index].get("engine")
        and not _true(last.get("end_fsync"))
        and not _true(last.get("unlink"))
    )


def _true(value: Any) -> bool:
    """A boolean option cell as a CSV reads it back (True, 'True', 1)."""
    return str(value).strip().lower() in ("true", "1", "1.0")


def unstable(frame: pd.DataFrame, sidecars: Mapping[str, Any]) -> list[Any]:
    """Every row of a case whose repetitions spread (MAD / median) or whose first repetition lagged."""
    flagged: list[Any] = []
    for run in _runs(frame):
        for _, group in run.groupby(["host", "case"], sort=False):
            bw = group["bw_bytes"].dropna()
            if len(bw) < 2 or bw.median() <= 0 or _any_too_short(group):
                continue
            spread = (bw - bw.median()).abs().median() / bw.median()
            ordered = group.sort_values("repetition")["bw_bytes"]
            lagged = len(ordered) >= 3 and ordered.iloc[0] < FIRST_SLOW * ordered.iloc[1:].median()
            if spread > UNSTABLE_MAD or lagged:
                flagged += list(group.index)
    return flagged


def _any_too_short(group: pd.DataFrame) -> bool:
    """A repetition too short to judge (flagged too_short only: its spread is start-up noise)."""
    seconds = group.get("seconds")
    return seconds is not None and bool((seconds.astype(float) < TOO_SHORT_S).any())


def above_link(frame: pd.DataFrame, sidecars: Mapping[str, Any]) -> list[Any]:
    """Direct-I/O rows faster than the limit their sidecar's fingerprint gives for their host and direction."""
    flagged: list[Any] = []
    for run in _runs(frame):
        meta = sidecars.get(str(run["source"].iloc[0]), {}) if "source" in run else {}
        hosts = (meta.get("fingerprint") or {}).get("hosts") or {}
        for index, row in run[~run["transfer"].isin(BUFFERED)].iterrows():
            limit = host_limit(hosts, str(row["host"]), "write" if row["pattern"] in (*WRITES, "save") else "read")
            if limit and row["bw_bytes"] > limit * LINK_MARGIN:
                flagged.append(index)
    return flagged


def host_limit(hosts: Mapping[str, Any], host: str, direction: str) -> float | None:
    """A host's limit in bytes/s for a direction (the aggregate's: the sum of every host's), or None."""
    if host == "all":
        limits = [host_limit(hosts, name, direction) for name in hosts]
        return sum(limits) if limits and all(limits) else None  # type: ignore[arg-type]
    limit = ((hosts.get(host) or {}).get("limit") or {}).get(f"{direction}_bytes")
    return float(limit) if limit else None


#: File-system types whose O_DIRECT stops at the client (every `fuse.*` type too).
REMOTE_FS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "ceph",
        "lustre",
        "gpfs",
        "beegfs",
        "glusterfs",
        "9p",
        "virtiofs",
        "afs",
        "wekafs",
        "orangefs",
        "fuse",
        "fuseblk",
    }
)


def remote_fs(frame: pd.DataFrame, sidecars: Mapping[str, Any]) -> list[Any]:
    """Direct-I/O rows of runs whose target directory is on a network or FUSE file system (not fio's rows on a
    Ceph cluster's objects or images, nor S3's: they use no directory)."""
    flagged: list[Any] = []
    for run in _runs(frame):
        meta = sidecars.get(str(run["source"].iloc[0]), {}) if "source" in run else {}
        if is_remote_fs(str((meta.get("target") or {}).get("fstype") or "")):
            on_directory = run["stores_on"] == FILES  # the rows' traits (results.load reads old files' too)
            flagged += list(run.index[~run["transfer"].isin(BUFFERED) & on_directory])
    return flagged


def is_remote_fs(fstype: str) -> bool:
    """Whether a /proc/mounts type is a network or FUSE file system."""
    return fstype in REMOTE_FS or fstype.startswith("fuse.")


def busy_machine(frame: pd.DataFrame, sidecars: Mapping[str, Any]) -> list[Any]:
    """Rows whose machine CPU holds others' work: far above their own processes' CPU while the machine was busy
    before the run began (busy_cpus_before) or, in files that did not record that, while every usable core was
    busy. Training loops are not judged (no one measuring window)."""
    if not {"machine_cpu_seconds", "cpu_seconds", "seconds"} <= set(frame.columns):
        return []
    flagged: list[Any] = []
    for run in _runs(frame):
        run = run[run["pattern"] != "train"]
        meta = sidecars.get(str(run["source"].iloc[0]), {}) if "source" in run and not run.empty else {}
        machine, own = run["machine_cpu_seconds"].astype(float), run["cpu_seconds"].astype(float)
        seconds, excess = run["seconds"].astype(float), machine - own
        far_above = (excess / seconds > BUSY_EXCESS_CPUS) & (excess > own)
        before = run["busy_cpus_before"].astype(float) if "busy_cpus_before" in run else machine * float("nan")
        saturated = machine / seconds >= BUSY_SATURATED * usable_cpus(meta)
        busy = (before >= BUSY_BEFORE_CPUS) | (before.isna() & saturated)
        flagged += list(run.index[far_above & busy])
    return flagged


def usable_cpus(meta: Mapping[str, Any]) -> float:
    """The CPUs a run could use, from its sidecar (its affinity; the machine's count in older files); NaN where
    neither is said."""
    facts = meta.get("machine") or {}
    count = facts.get("usable_cpus", facts.get("cpu_count")) if isinstance(facts, Mapping) else None
    return float(count) if isinstance(count, int) and not isinstance(count, bool) and count > 0 else float("nan")


def above_ceiling(frame: pd.DataFrame, sidecars: Mapping[str, Any]) -> list[Any]:
    """Every row of a checkpoint case (save, load) whose median is above its run's ceiling of that pattern on the
    same host (gdsbench.ceilings: fio's best durable write or direct read, or the s3 engine's for objects)."""
    flagged: list[Any] = []
    for run in _runs(frame):
        if "stores_on" not in run:
            continue
        for _, here in run.groupby("host", sort=False):
            ckpt = here[here["pattern"].isin(list(CEILINGS)) & bounded(here)]
            for (_, pattern), group in ckpt.groupby(["case", "pattern"], sort=False):
                limit = ceiling(here, pattern, group).bw
                if limit == limit and group["bw_bytes"].median() > limit * CEILING_MARGIN:
                    flagged += list(group.index)
    return flagged


SWEEP_RULES = {
    "page_cache": page_cache,
    "above_ceiling": above_ceiling,
    "unstable": unstable,
    "above_link": above_link,
    "remote_fs": remote_fs,
    "busy_machine": busy_machine,
}
#: The columns the sweep-wide rules read (a frame without them gets its stored flags only).
NEEDED = {"status", "case", "host", "pattern", "transfer", "repetition", "bw_bytes"}


def remedies(names: Iterable[str]) -> list[str]:
    """'name: meaning; remedy' for each flag named, in RULES order."""
    chosen = set(names)
    return [f"{r.name}: {r.meaning}; remedy: {r.remedy}" for r in RULES.values() if r.name in chosen]
