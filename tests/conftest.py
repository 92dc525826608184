"""Capability markers from real probes: a test that needs what this machine lacks is skipped with why."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from gdsbench import sysinfo
from gdsbench.sysinfo import gpu

DATA = Path(__file__).parent / "data"
# The many child processes of the suite (the CLI, torchrun's ranks, tools) reuse compiled modules: an environment
# with PYTHONDONTWRITEBYTECODE set (this machine's) made every child compile gdsbench and ckptio again.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# Tests stop their children as a user's Ctrl-C does (SIGINT); a suite started in the background by a shell without
# job control ignores SIGINT, and an ignored signal stays ignored across exec: take Python's handler back, which
# exec resets to the default for every child (xdist's workers too, started after this).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
#: The fio-server fixtures (servers, short_dir) and the shared Ceph and Slurm clusters (ceph_cluster, slurm_cluster)
#: for every test module.
pytest_plugins = ["tests.fio_servers", "tests.ceph_cluster", "tests.slurm_cluster"]


def _odirect_reason() -> str | None:
    """None when O_DIRECT works in the temp directory, else why not."""
    works, why = sysinfo.odirect_works(Path(tempfile.gettempdir()))
    return None if works else why


def _cuda_reason() -> str | None:
    """None when a CUDA device is usable from torch, else why not."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    return None if torch.cuda.is_available() else "no CUDA device"


CHROMIUM = ("chromium", "chromium-browser", "google-chrome")  # tools/html_screenshot.py's BROWSERS
PROBES = {
    "needs_fio": lambda: None if shutil.which("fio") else "fio is not installed (apt-get install fio)",
    "needs_root": lambda: None if os.geteuid() == 0 else "needs root",
    "needs_odirect": _odirect_reason,
    "needs_torch": lambda: None if importlib.util.find_spec("torch") else "torch is not installed",
    "needs_cuda": _cuda_reason,
    "needs_gdsio": lambda: None if gpu.find_gdsio(None)[0] else "NVIDIA gdsio is not installed",
    "needs_chromium": lambda: (
        None
        if any(map(shutil.which, CHROMIUM))
        else "Chromium is not installed (apt-get install chromium; make test installs it)"
    ),
}


#: Measured (pytest --durations) at 2 s or more on the 2-core VM: process start-ups (torch, gloo, torchrun,
#: fio servers, kills) and real sweeps. Marked `slow`: `make test-fast` leaves them out, `make test` runs all.
SLOW_MODULES = (
    "test_dcp_ranks.py",
    "test_multihost.py",
    "test_fio_client_live.py",
    "test_smoke.py",
    "test_benchmark_scripts.py",
    "test_notebook.py",
    "test_e2e.py",
    "test_durability.py",
)
SLOW_TESTS = (
    "test_ctrl_c_or_sigterm_keeps_every_finished_row",
    "test_an_interrupt_during_start_up_leaves_no_file_without_its_sidecar",
    "test_a_stop_once_the_csv_exists_leaves_its_sidecar_and_resume_finishes_the_run",
    "test_distributed_engines_save_and_load_on_two_ranks",
    "test_distributed_train_steps_in_lockstep_and_restores_on_every_rank",
    "test_sweep_and_report_show_each_engine_against_fio",
    "test_a_killed_save_leaves_the_previous_checkpoint_loadable",
    "test_concurrent_savers_always_leave_one_complete_checkpoint",
    "test_blosc_splits_chunks_above_its_2gib_limit",
    "test_a_real_page_cache_read_is_flagged_and_a_clean_direct_read_is_not",
    "test_an_undersized_file_system_is_refused_with_the_numbers",
    "test_resume_reruns_failed_pairs_and_keeps_one_row_per_pair",
    "test_timeout_kills_the_tool_and_every_process_it_started",
    "test_serve_daemonized_on_loopback",
    "test_the_docs_screenshot_is_drawn_by_chromium",
    "test_a_mutated_config_loads_or_is_one_config_error",
    "test_cli_report_writes_plots_and_html",
    "test_warm_and_unprivileged_cold_loads_say_how_the_cache_was_set",
    "test_free_heap_pages_left_by_one_engine_are_not_handed_to_the_next",
    "test_resume_runs_only_missing_cases",
    "test_no_label_overlaps",
    "test_every_gpu_row_of_a_sweep_has_a_path",
    "test_fastpersist_recycle_overwrites_the_spare_and_cleans_it_up",
    "test_environment_overrides_are_recorded_in_the_sidecar_and_the_rows_they_change",
    "test_qualify_runs_the_sweep_with_real_fio",
    "test_root_file_system_is_refused_unless_the_config_allows_it",
    "test_resume_cuts_a_torn_last_row_and_runs_it_again",
    "test_doctor_uses_the_gdsio_given",
    "test_one_fill_per_file_set_outside_the_cases",
    "test_serve_on_a_socket_runs_cases_and_stops_on_ctrl_c",
    "test_a_run_reports_live_figures_and_keeps_its_series",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow tests and run them first (xdist's workers then end on short tests, together); skip each test
    whose capability marker's probe says this machine cannot run it."""
    reasons: dict[str, str | None] = {}
    for item in items:
        if item.path.name in SLOW_MODULES or item.name.split("[")[0] in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
        for name, probe in PROBES.items():
            if item.get_closest_marker(name) is None:
                continue
            if name not in reasons:
                reasons[name] = probe()
            if reasons[name]:
                item.add_marker(pytest.mark.skip(reason=f"{name}: {reasons[name]}"))
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = spread_slow(items, workers)


def spread_slow(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The tests in the order that starts every xdist worker on its share of the slow modules (a module's tests kept
    together, so its module fixtures are built once), the fast tests after: worksteal first hands worker k the k-th
    of `workers` contiguous blocks; with every slow test first, one worker got them all and the others stole only
    fast ones from its tail."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    fast = [item for item in items if item.get_closest_marker("slow") is None]
    sizes, left = [], len(items)
    for k in range(workers):  # as worksteal's first schedule splits the pending tests
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    blocks: list[list[pytest.Item]] = [[] for _ in sizes]
    modules: dict[Path, list[pytest.Item]] = {}
    for item in slow:
        modules.setdefault(item.path, []).append(item)
    for group in sorted(modules.values(), key=len, reverse=True):  # the largest module first, to the least loaded
        while group:
            k = min(range(len(blocks)), key=lambda b: len(blocks[b]) if len(blocks[b]) < sizes[b] else len(items))
            room = sizes[k] - len(blocks[k])
            blocks[k] += group[:room]
            group = group[room:]
    for k, size in enumerate(sizes):
        need = size - len(blocks[k])
        blocks[k] += fast[:need]
        fast = fast[need:]
    return [item for block in blocks for item in block]


@pytest.fixture(autouse=True)
def _wide_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text output at the width a file or pipe gets (xdist's workers set COLUMNS=80); a test of another width
    sets COLUMNS itself."""
    monkeypatch.setenv("COLUMNS", "160")


#: tests/test_ceph_local.py's shared cluster: one per run, brought up by the first worker to take this lock, taken
#: down by the controller at the end of the run (pytest_sessionfinish).
CEPH_LOCK = Path("/var/tmp/gdsbench-ceph-test.lock")


#: tests/test_slurm.py's shared one-host Slurm (tests/slurm_cluster.py), handled as the Ceph cluster is.
SLURM_LOCK = Path("/var/tmp/gdsbench-slurm-test.lock")


def ceph_test_dir(config: pytest.Config) -> Path:
    """This run's shared Ceph directory, named after the controller (an xdist worker's parent) or this process."""
    return _testbed_dir(config, "ceph")


def slurm_test_dir(config: pytest.Config) -> Path:
    """This run's shared Slurm directory, named as the Ceph one is."""
    return _testbed_dir(config, "slurm")


def _testbed_dir(config: pytest.Config, kind: str) -> Path:
    """/var/tmp/gdsbench-<kind>-test-<the controller's pid (an xdist worker's parent) or this process's>."""
    return Path(f"/var/tmp/gdsbench-{kind}-test-{os.getppid() if hasattr(config, 'workerinput') else os.getpid()}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The controller (or a run without xdist) takes this run's shared Ceph and Slurm clusters down, once, at the
    very end."""
    if hasattr(session.config, "workerinput"):
        return
    if (directory := ceph_test_dir(session.config)).exists():
        from gdsbench.testbeds import ceph

        ceph.down(directory)
        CEPH_LOCK.unlink(missing_ok=True)
    if (directory := slurm_test_dir(session.config)).exists():
        from gdsbench.testbeds import slurm

        slurm.down(directory)
        SLURM_LOCK.unlink(missing_ok=True)


@pytest.fixture
def disk_tmp(tmp_path: Path) -> Path:
    """A temporary directory on a real disk filesystem that takes O_DIRECT (tmp_path is on the root ext4
    here); the test is skipped, saying why, where O_DIRECT is refused (tmpfs on older kernels, overlayfs)."""
    works, why = sysinfo.odirect_works(tmp_path)
    if not works:
        pytest.skip(f"needs O_DIRECT in {tmp_path}: {why}")
    return tmp_path


#: An S3 endpoint where nothing listens (discard), for tests of what needs no service.
DEAD_ENDPOINT = "http://127.0.0.1:9"


@pytest.fixture
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """An endpoint and credentials in the environment (nothing is contacted)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", DEAD_ENDPOINT)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-shown")
