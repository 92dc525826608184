"""Run a list of jobs on a pool of threads: the checkpoint engines' one way to go parallel.

pwrite, preadv, memmove, the checksums and the codecs release the GIL, so threads overlap one job's
copy or hash with other jobs' I/O. The first failure cancels what has not started and is re-raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait


def run_parallel(jobs: Sequence[Callable[[], None]], threads: int, name: str) -> None:
    """Run jobs on `threads` workers in order; on the first failure cancel what has not started, re-raise it."""
    if threads <= 1 or len(jobs) <= 1:
        for job in jobs:
            job()
        return
    with ThreadPoolExecutor(max_workers=min(threads, len(jobs)), thread_name_prefix=name) as pool:
        futures = [pool.submit(job) for job in jobs]
        _, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for f in pending:
            f.cancel()
        for f in futures:
            error = f.exception() if f.done() and not f.cancelled() else None
            if error is not None:
                raise error
