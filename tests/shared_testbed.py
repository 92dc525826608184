"""One testbed cluster a whole test run shares (the one-host Ceph, the one-host Slurm): the first xdist worker to
take its lock brings it up, the others reuse it; what a killed run left is taken down first (only ours)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gdsbench import trusted
from gdsbench.testbeds.daemons import alive


def shared_cluster(testbed: Any, lock_path: Path, directory: Path, prepare: Callable[[], None]) -> Any:
    """The run's cluster of `testbed` (a module with up, attach, down) in `directory`, under the lock at
    `lock_path` (in /var/tmp: opened without following a link, and ours); `prepare` runs under the lock first."""
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(lock, "r+"):
        trusted.check_owned(lock_path, os.fstat(lock))
        fcntl.flock(lock, fcntl.LOCK_EX)
        prepare()
        prefix = directory.name.rsplit("-", 1)[0]
        for stale in directory.parent.glob(f"{prefix}-*"):  # left by a run that was killed
            if stale != directory and not Path(f"/proc/{stale.name.rsplit('-', 1)[1]}").exists():
                with contextlib.suppress(trusted.UntrustedError):  # one others made: left alone
                    testbed.down(stale)
        found = testbed.attach(directory)
        if found is None or len(found.pids()) != len(found.pidfiles) or not all(map(alive, found.pids())):
            testbed.down(directory)  # an unfinished `up` or a dead daemon: start again
            found = testbed.up(directory)
    return found
