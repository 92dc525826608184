"""fio on Ceph: the `rados` engine (librados, one object per fio file) and the `rbd` engine (librbd, one image),
as `engine: fio` cases with `ioengine: rados` or `ioengine: rbd`.

What this module guards against (../docs/ceph.md has the setup; runners/ceph.py the cluster's admin actions):
- fio's ceph engines read only /etc/ceph/ceph.conf (they ignore CEPH_CONF): a case without it is skipped.
- The rados engine stores at most `osd_max_object_size` (128 MiB by default) of an object and reports the full
  size written: each job's `file_size` is cut into objects (`nrfiles`) no larger than the cluster's limit, and
  after a write the objects are checked to hold the bytes fio reported (up to all of them), else the case fails.
- A read of objects never written "succeeds" at memory speed over empty objects: before a read, every object
  is checked to exist at full size, and written first (unmeasured, said in the row) if not.
- Reads can come from the OSDs' caches: `osd_cache: drop` drops them before each read (`ceph tell osd.* cache
  drop`, which disturbs every client of the cluster), and the row says so (`cache: cold`).
- rbd jobs each get their own stretch of the image (`offset_increment`), which must hold them all.
Objects gdsbench creates are removed when the sweep ends; objects that were there before, and images, never.
"""

from __future__ import annotations

import functools
import json
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from gdsbench.cases import Case, Transfer
from gdsbench.errors import ToolError
from gdsbench.keys import Key, text
from gdsbench.runners import ceph

T = TypeVar("T")

if TYPE_CHECKING:
    from gdsbench.runners.base import Resources, RunContext

#: fio's ioengines whose I/O goes to a Ceph cluster (objects, an image), not to files in the target directory.
ENGINES = ("rados", "rbd")
DEFAULT_MAX_OBJECT = 128 << 20  # Ceph's osd_max_object_size default: a dry run's layout without a cluster
STAT_WORKERS = 8

CEPH_ONLY = (("ioengine", ENGINES),)  # fio uses these keys only on its ceph engines
KEYS = (
    Key(
        "pool",
        text,
        "a Ceph pool name",
        "gdsbench",
        "ioengine rados/rbd: the pool fio's objects or image live in",
        used_with=CEPH_ONLY,
    ),
    Key(
        "clientname",
        text,
        "a Ceph client name",
        "admin",
        "ioengine rados/rbd: the cephx user (client.<name>)",
        used_with=CEPH_ONLY,
    ),
    Key(
        "rbdname",
        text,
        "an RBD image name",
        "gdsbench",
        "ioengine rbd: the image fio's jobs write and read",
        used_with=(("ioengine", ("rbd",)),),
    ),
    replace(ceph.OSD_CACHE, used_with=CEPH_ONLY),  # the s3 engine uses OSD_CACHE on every read
)


def is_ceph(case: Case) -> bool:
    """Whether a case is fio on one of its ceph engines (objects or an image, no files in the directory)."""
    return case.engine == "fio" and case.get("ioengine") in ENGINES


def unavailable(case: Case, ctx: RunContext) -> str | None:
    """Why this ceph case cannot run here, or None."""
    if ctx.hosts:
        return f"ioengine {case['ioengine']} runs on this host only (not through fio servers)"
    if case.transfer is not Transfer.CPU_ONLY:
        return f"ioengine {case['ioengine']} moves host memory to RADOS, no page cache between: use CPU_ONLY"
    if not ceph.CONF.exists():
        return f"no {ceph.CONF}: fio's {case['ioengine']} engine reads only that file (gdsbench ceph up makes it)"
    try:
        limit = max_object_bytes()
        pools = pool_names()
    except ToolError as e:
        return f"the Ceph cluster of {ceph.CONF} does not answer: {e}"
    if case["pool"] not in pools:
        return f"no pool {case['pool']!r} in the cluster (pools: {', '.join(sorted(pools)) or 'none'})"
    if case["ioengine"] == "rados" and case["io_size"] > limit:
        return f"io_size {case['io_size']} is above the cluster's largest object (osd_max_object_size {limit})"
    return _rbd_problem(case, ctx) if case["ioengine"] == "rbd" else None


def _rbd_problem(case: Case, ctx: RunContext) -> str | None:
    """Why the image cannot hold every job's stretch, or None."""
    try:
        size = image_bytes(case["pool"], case["rbdname"])
    except ToolError as e:
        return f"no RBD image {case['pool']}/{case['rbdname']}: {e}"
    need = case["threads"] * ctx.file_size
    return None if need <= size else f"{case['threads']} jobs x file_size {ctx.file_size} = {need} bytes > image {size}"


def layout(file_size: int, io_size: int, limit: int | None = None) -> tuple[int, int]:
    """(objects per job, bytes per object): each object at most `limit` (the cluster's osd_max_object_size) and
    a whole number of I/Os, together at least file_size."""
    if limit is None:
        try:
            limit = max_object_bytes()
        except ToolError:  # no cluster (a dry run): Ceph's default; a real run is refused before (unavailable)
            limit = DEFAULT_MAX_OBJECT
    largest = max(io_size, limit // io_size * io_size)
    count = -(-file_size // largest)
    each = -(-file_size // count // io_size) * io_size
    return count, each


@dataclass(frozen=True)
class Objects:
    """A rados case's objects in `pool`, named as fio names its files (`<name>.<job>.<file>`): `count` per job,
    `each` bytes."""

    pool: str
    names: tuple[str, ...]
    count: int
    each: int


def objects(case: Case, name: str, file_size: int) -> Objects | None:
    """The objects a rados case's jobs use (laid out within the cluster's limit); None for any other case."""
    if not is_ceph(case) or case["ioengine"] != "rados":
        return None
    count, each = layout(file_size, case["io_size"])
    names = tuple(f"{name}.{job}.{index}" for job in range(case["threads"]) for index in range(count))
    return Objects(case["pool"], names, count, each)


def before(
    case: Case, objects: Objects | None, resources: Resources, lay_out: Callable[[], object]
) -> tuple[str | None, str]:
    """Prepare a ceph case: a rados case's new objects remembered for removal and, for a read, every object
    written at full size first; for a read with osd_cache drop, the OSDs' caches dropped. Returns the row's
    (cache state, note): (None, "") for a case on files."""
    if not is_ceph(case):
        return None, ""
    notes = []
    if objects is not None:
        sizes = object_sizes(objects)
        new = tuple(o for o, size in sizes.items() if size < 0)
        if new and not resources.keep_files:  # keep_files: left for inspection, as test files are
            resources.close_at_end(functools.partial(remove_objects, objects.pool, new))
        if not case.pattern.is_write and min(sizes.values(), default=objects.each) < objects.each:
            lay_out()
            notes.append("objects written first (unmeasured): a read of objects never written reads nothing")
    if case.pattern.is_write:
        return None, "; ".join(notes)
    cache, note = ceph.osd_cache(case)
    return cache, "; ".join([*notes, note])


def after_write(case: Case, objects: Objects | None, reported: int) -> None:
    """Check a rados write: the case's objects hold at least the bytes fio reported writing (up to all of them).
    RADOS keeps only osd_max_object_size of a larger object while fio reports the whole; a time-based run may
    end before one full pass (fio writes its files round robin), so the check is on the total, not per object."""
    if objects is None or not case.pattern.is_write:
        return
    each, sizes = objects.each, object_sizes(objects)
    stored, expected = sum(max(size, 0) for size in sizes.values()), min(reported, len(sizes) * each)
    if stored < expected:
        largest = max(sizes.values())
        raise ToolError(
            f"RADOS holds {stored} bytes of the {expected} fio reported writing to {len(sizes)} "
            f"objects of {each} bytes (the largest holds {largest}): fio's figure is not what reached "
            "the cluster"
        )


def object_sizes(objects: Objects) -> dict[str, int]:
    """Every object of a rados case and its stored bytes (-1: none)."""
    with ThreadPoolExecutor(STAT_WORKERS) as pool:
        return dict(zip(objects.names, pool.map(lambda o: object_bytes(objects.pool, o), objects.names)))


def remove_objects(pool: str, names: tuple[str, ...]) -> None:
    """Remove objects this sweep created (one missing already is fine)."""
    for name in names:
        argv = ceph.argv("rados", "-p", pool, "rm", name)
        subprocess.run(argv, capture_output=True, timeout=ceph.CLI_TIMEOUT_S, check=False)


# -- what fio's engines ask of the cluster (runners/ceph.py: its tools) --------------------------------


@functools.lru_cache(maxsize=1)
def max_object_bytes() -> int:
    """The cluster's osd_max_object_size: the most bytes one RADOS object holds."""
    return answer(int, "ceph", "config", "get", "osd", "osd_max_object_size")


def pool_names() -> set[str]:
    """The cluster's pools."""
    return set(ceph.run("ceph", "osd", "pool", "ls").split())


def image_bytes(pool: str, image: str) -> int:
    """The size of an RBD image."""
    return answer(lambda out: int(json.loads(out)["size"]), "rbd", "info", "--format", "json", f"{pool}/{image}")


def answer(parse: Callable[[str], T], tool: str, *args: str) -> T:
    """A ceph tool's stdout parsed; ToolError where the tool fails or says something else."""
    out = ceph.run(tool, *args)
    try:
        return parse(out.strip())
    except (ValueError, KeyError, TypeError) as e:
        raise ToolError(f"{tool} {' '.join(args)}: unexpected output {out[:200]!r} ({e})") from None


def object_bytes(pool: str, name: str) -> int:
    """The stored size of a RADOS object, -1 if there is none."""
    proc = subprocess.run(
        ceph.argv("rados", "-p", pool, "stat", name),
        capture_output=True,
        text=True,
        timeout=ceph.CLI_TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        return -1
    return int(proc.stdout.rsplit("size", 1)[-1].strip())
