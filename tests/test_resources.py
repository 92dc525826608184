"""resources.Usage against work of known cost: a busy loop here, one in a child, a sleep, a transient block."""

from __future__ import annotations

import mmap
import subprocess
import sys
import threading
import time

import pytest

from gdsbench.runners import fio_output
from gdsbench.runners.checkpoint.distributed import ranks_cost
from gdsbench.runners.resources import Usage
from tests.conftest import DATA


def spin(seconds: float) -> None:
    """Burn `seconds` of this thread's CPU time."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_busy_loop_is_counted_once_by_the_process_and_by_the_machine():
    with Usage() as usage:
        spin(0.5)
    assert usage.cpu_seconds == pytest.approx(0.5, abs=0.08)
    assert usage.machine_cpu_seconds is not None and usage.machine_cpu_seconds >= 0.42


def test_work_done_paused_is_left_out_of_both_figures():
    """A load's check against what was saved runs `paused`: only the load's own work counts."""
    with Usage() as usage:
        spin(0.2)
        with usage.paused():
            spin(0.4)
    # machine CPU: the same subtraction, with the neighbours' work in it
    assert usage.cpu_seconds == pytest.approx(0.2, abs=0.08)
    assert usage.machine_cpu_seconds is not None and usage.machine_cpu_seconds >= 0.12


def test_a_child_that_was_waited_for_is_counted_and_a_sleep_is_not():
    child = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass"
    with Usage() as usage:
        subprocess.run([sys.executable, "-c", child], check=True)
    assert 0.6 <= usage.cpu_seconds < 1.2  # the busy loop plus the interpreter's start-up
    with Usage() as idle:
        time.sleep(0.5)
    assert idle.cpu_seconds < 0.05


def test_threads_of_the_process_are_counted_together():
    with Usage() as usage:
        workers = [threading.Thread(target=spin, args=(0.3,)) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert usage.cpu_seconds == pytest.approx(0.6, abs=0.1)


def test_peak_rss_sees_memory_freed_before_the_block_ends_with_nothing_running_beside_the_call():
    """The kernel's high-water mark, reset on entry: a 64 MiB block touched and freed at once (no time for a
    sampler) counts, no thread runs during the call, and a block freed before the `with` does not count."""
    earlier = mmap.mmap(-1, 128 << 20)
    earlier[::4096] = b"\x01" * len(earlier[::4096])
    earlier.close()
    threads = threading.active_count()
    with Usage() as usage:
        assert threading.active_count() == threads
        block = mmap.mmap(-1, 64 << 20)  # fresh pages from the kernel (malloc may reuse resident ones)
        block[::4096] = b"\x01" * len(block[::4096])
        block.close()
    assert usage.exact and 60 << 20 <= usage.peak_rss - usage.rss_before < 100 << 20


def test_fio_cpu_is_each_jobs_share_of_its_own_runtime():
    """write-1m-2jobs-libaio: job 1 sys 5.555556% of 54 ms, job 2 usr 8.928571% of 56 ms (fio 3.33's JSON)."""
    text = (DATA / "fio" / "write-1m-2jobs-libaio.txt").read_text()
    document = fio_output.parse_json(subprocess.CompletedProcess([], 0, text, ""))
    measured = fio_output.measure(document, fio_output.Pattern.WRITE)
    assert measured.cpu_seconds == pytest.approx(0.05555556 * 0.054 + 0.08928571 * 0.056)
    del document["jobs"][0]["usr_cpu"]
    assert fio_output.measure(document, fio_output.Pattern.WRITE).cpu_seconds is None


def test_ranks_add_up_and_each_host_counts_its_machine_once():
    ranks = [
        {"host": "a", "cpu_seconds": 1.0, "machine_cpu_seconds": 3.0, "peak_rss_bytes": 100, "staging_bytes": 8},
        {"host": "a", "cpu_seconds": 1.5, "machine_cpu_seconds": 3.2, "peak_rss_bytes": 200, "staging_bytes": 8},
        {"host": "b", "cpu_seconds": 2.0, "machine_cpu_seconds": 2.5, "peak_rss_bytes": 300, "staging_bytes": 16},
    ]
    assert ranks_cost(ranks) == {
        "cpu_seconds": 4.5,
        "peak_rss_bytes": 600,
        "staging_bytes": 32,
        "machine_cpu_seconds": 5.7,
    }
    ranks[2].pop("cpu_seconds")
    assert ranks_cost(ranks)["cpu_seconds"] is None
