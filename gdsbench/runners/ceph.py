"""A Ceph cluster's admin actions, through its command-line tools and /etc/ceph/ceph.conf (argument lists, bounded
in time): what the engines on Ceph do to the cluster around a case and ask of it. fio's rados and rbd engines
(fio_ceph), the s3 engine and the s3torch checkpoint engines use them.

- `osd_cache: drop` (OSD_CACHE) drops every OSD's caches before a read (`ceph tell osd.* cache drop`, which disturbs
  every client of the cluster), and the row says so (`cache: cold`).
- radosgw's garbage collection (`radosgw-admin gc process`) gives deleted and overwritten objects' space back now.
- The conf says which radosgw it serves (`rgw frontends ... endpoint=`, as `gdsbench ceph up` writes it), so an
  engine can refuse to act on another cluster than its case's endpoint's.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from gdsbench.cases import Case
from gdsbench.errors import ToolError
from gdsbench.keys import Key, one_of

CONF = Path("/etc/ceph/ceph.conf")  # the only configuration fio's ceph engines read; the admin tools are given it
CLI_TIMEOUT_S = 60.0
OSD_CACHE = Key(
    "osd_cache",
    one_of("keep", "drop"),
    "keep or drop",
    "keep",
    "ioengine rados/rbd and s3 reads: drop the OSDs' caches first (ceph tell osd.* cache drop; disturbs the cluster)",
    patterns=("read", "randread"),
)
_RGW_ENDPOINT = re.compile(r"^\s*rgw[ _]frontends\s*=.*?\bendpoint=(\S+)", re.MULTILINE)


def argv(tool: str, *args: str) -> list[str]:
    """A ceph tool's argument list, pointed at CONF."""
    return [tool, "-c", str(CONF), *args]


def run(tool: str, *args: str) -> str:
    """stdout of a ceph tool, ToolError on failure or timeout."""
    try:
        proc = subprocess.run(argv(tool, *args), capture_output=True, text=True, timeout=CLI_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError(f"{tool} {' '.join(args)}: {e}") from None
    if proc.returncode != 0:
        raise ToolError(f"{tool} {' '.join(args)}: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    return proc.stdout


def has_admin(*tools: str) -> bool:
    """Whether this host has the cluster's admin access: `tools` on the PATH and CONF."""
    return all(shutil.which(tool) for tool in tools) and CONF.exists()


def rgw_endpoints() -> list[str]:
    """The radosgw endpoints CONF names (none: no conf, or an existing cluster's that names none)."""
    try:
        return _RGW_ENDPOINT.findall(CONF.read_text(errors="replace"))
    except OSError:  # none, or gone meanwhile (a cluster taken down)
        return []


def osd_cache(case: Case) -> tuple[str, str]:
    """A read's OSD caches dropped when the case says `osd_cache: drop`: the row's (cache state, note)."""
    if case["osd_cache"] == "drop":
        return cold()
    return "warm", "OSD caches kept (osd_cache: keep): a read may come from the OSDs' memory"


def cold() -> tuple[str, str]:
    """Every OSD's caches dropped: the row's (cache state, note)."""
    drop_osd_caches()
    return "cold", "the OSDs' caches dropped first (ceph tell osd.* cache drop)"


def drop_osd_caches() -> None:
    """Drop every OSD's caches (BlueStore's onode and data caches)."""
    run("ceph", "tell", "osd.*", "cache", "drop")


def collect_rgw_garbage() -> None:
    """radosgw's garbage collection now: deleted and overwritten objects' space back at once, not hours later."""
    run("radosgw-admin", "gc", "process", "--include-all")
