"""The tiered engine's kill_upload fault (issue 33): a rank killed during its upload, `kills:` times.

After the loop (its last checkpoint durable in S3), each kill starts a child interpreter (an argument list, the
environment passed through, never a shell) that saves the next step with ckptio.save straight to the object tier's
key (parts of 5 MiB: a multipart upload), polls the key's incomplete uploads until the child's upload begins and
SIGKILLs it at a random moment within as long as one unkilled child's upload took (the calibration, saved under
step 0's key). A kill landed inside an upload when its upload had begun and is left incomplete. After each kill a restore with the local copies removed must read the
object tier's last good step exactly, or the next step whole (a child that finished first); anything else is a
torn checkpoint and fails the row. Then one more save drains to S3 and a restore reads it exactly; the killed
children's incomplete uploads of the key must be gone after it (ckptio aborts them once the drain completed); any
left are counted, aborted (this run's) and fail the row.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gdsbench.errors import ToolError

MiB = 1 << 20
PART = 5 * MiB
POLL_SECONDS = 0.005  # between listings of the key's uploads (each a request the store's cores answer)
#: The child: saves `size` bytes of 7s as `url` with parts of `part` bytes; says "saving" once imported, then "saved".
CHILD = """
import sys
import ckptio, torch
url, size, part = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
state = {"killed": torch.full((size,), 7, dtype=torch.uint8)}
print("saving", flush=True)
ckptio.save(state, url, options=ckptio.IOOptions(part_bytes=part))
print("saved", flush=True)
"""


@dataclass
class Kills:
    """What the kills did: made (the child still running), inside an upload, torn restores (why), uploads seen."""

    made: int = 0
    inside: int = 0
    torn: list[str] = field(default_factory=list)


def child_size(nbytes: int) -> int:
    """The child's checkpoint: the case's bytes, at least three parts (a multipart upload)."""
    return max(nbytes, 3 * PART)


def save_child(url: str, size: int, uploads: Callable[[], set[str]], hold: float | None) -> tuple[bool, bool, float]:
    """Start a child saving `url`; once `uploads()` (the key's incomplete upload ids) shows a new one, SIGKILL it
    `hold` seconds later (None: let it finish). Whether it was killed while running, whether its upload had begun by
    then, and the seconds from its upload's start (or its save's, none seen) until its kill or, unkilled, until the
    upload completed."""
    argv = [sys.executable, "-c", CHILD, url, str(size), str(PART)]
    before = uploads()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        said = child.stdout.readline().strip()
        if said != "saving":
            child.kill()
            _, err = child.communicate()
            raise ToolError(f"kill_upload: the child saving {url} did not start: {said or err.strip()[-300:]}")
        start = time.perf_counter()
        began = False
        while child.poll() is None and not began:
            began = bool(uploads() - before)
            time.sleep(POLL_SECONDS)
        start = time.perf_counter() if began else start
        while hold is None and began and child.poll() is None and uploads() - before:
            time.sleep(POLL_SECONDS)  # the calibration: until its upload completed
        killed = False
        if hold is not None and began:
            time.sleep(hold)
            killed = child.poll() is None
            if killed:
                child.send_signal(signal.SIGKILL)
        seconds = time.perf_counter() - start
        _, err = child.communicate()
        if not killed and child.returncode != 0:
            raise ToolError(f"kill_upload: the child saving {url} failed (exit {child.returncode}): {err[-300:]}")
    return killed, began, seconds


def check_restore(found: Any, objects: int, good: int, after: int, exact: Callable[[Any], None]) -> str | None:
    """Why a restore after a kill is torn (None when it read the last good step exactly from the object tier, or
    the next step whole)."""
    skipped = [f"tier {s.tier} step {s.step}: {s.reason}" for s in found.skipped if s.tier == objects]
    if skipped:
        return "skipped " + "; ".join(skipped)
    if found.tier != objects or found.step not in (good, after):
        return f"read step {found.step} from tier {found.tier}, expected step {good} or {after} from tier {objects}"
    try:
        if found.step == good:
            exact(found.state)
        elif set(found.state) != {"killed"} or not bool((found.state["killed"] == 7).all()):
            return f"step {after} holds a state the child did not save"
    except ToolError as exc:
        return str(exc)
    return None


def kill_uploads(objects: Any, key: str, url: str, kills: int, size: int, restore: Callable[[], str | None]) -> Kills:
    """`kills` children killed during their upload of `url` (`key` in `objects`, ckptio's client of the bucket),
    each at a random moment of an upload as long as one unkilled child's (step 0's key); a restore checked after
    each (`restore`: why it is torn, or None)."""
    done = Kills()
    calibration = url.rsplit("/", 1)[0] + "/step-000000000000.ckpt"
    _, _, window = save_child(calibration, size, lambda: upload_ids(objects, calibration.split("/", 3)[3]), None)
    for _ in range(kills):
        killed, began, _ = save_child(url, size, lambda: upload_ids(objects, key), random.uniform(0.0, window))
        done.made += killed
        done.inside += killed and began and bool(key_uploads(objects, key))
        why = restore()
        if why:
            done.torn.append(why)
    return done


def key_uploads(objects: Any, key: str) -> list[Any]:
    """The key's own incomplete multipart uploads (the listing also holds those of longer keys it prefixes)."""
    return [u for u in objects.uploads(key) if u.key == key]


def upload_ids(objects: Any, key: str) -> set[str]:
    """The ids of the key's incomplete multipart uploads."""
    return {u.upload_id for u in key_uploads(objects, key)}


def figures(done: Kills, left: int) -> dict[str, Any]:
    """The row's kill_upload figures; a torn checkpoint, or an incomplete upload the final save did not abort,
    fails the row, naming it."""
    if done.torn:
        raise ToolError(f"kill_upload: {len(done.torn)} torn checkpoints after {done.made} kills: {done.torn[0]}")
    if left:
        raise ToolError(f"kill_upload: {left} incomplete uploads of the key left after the final save committed")
    return {"kills_made": done.made, "kills_in_upload": done.inside, "torn_seen": 0, "uploads_left": left}
