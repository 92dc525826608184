"""Checkpoint engines as runners: real saves and loads of a small workload, measured, verified, cleaned up."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gdsbench import config, results, runners, sweep, workloads
from gdsbench.cases import Case, Pattern
from gdsbench.errors import GdsbenchError, ToolError
from gdsbench.runners.base import RunContext

pytestmark = pytest.mark.needs_torch
SIZE = "16M"
CPU_ENGINES = {"torch_save": "CPU_CACHED", "fastpersist": "CPU_ONLY", "safetensors": "CPU_CACHED"}
DISTRIBUTED = {"dcp": "CPU_CACHED", "dcp_fast": "CPU_ONLY", "torch_save_ranks": "CPU_CACHED"}
ROOT = Path(__file__).parent.parent


def cases(engine: str, transfer: str, threads: int | None = 2, **axes) -> dict[Pattern, Case]:
    """The save and load cases of one engine, expanded by the real config code (`threads` None: left out)."""
    block = {
        "engine": [engine],
        "pattern": ["save", "load"],
        "transfer": [transfer],
        **({} if threads is None else {"threads": [threads]}),
        **{k: [v] for k, v in axes.items()},
    }
    document = {"checkpoint_size": SIZE, "workload": "llama3-8b", "dtype": "mixed", "matrix": block}
    return {case.pattern: case for case in config.from_dict(document, "test.yaml").cases}


@pytest.fixture
def ctx(disk_tmp: Path) -> RunContext:
    return RunContext(directory=disk_tmp, file_size=16 << 20)


#: IOOptions fields ckptio picks by a measurement when the options are built ("auto"): two processes may differ.
MEASURED_OPTIONS = ("fresh_pages",)


def options_of(figures: dict, expected) -> tuple[dict, dict]:
    """A row's io_<field> columns by field, and `expected`'s fields (those ckptio measures taken from the row:
    IOOptions checks they are valid choices)."""
    measured = {name: figures[f"io_{name}"] for name in MEASURED_OPTIONS if hasattr(expected, name)}
    fields = dataclasses.asdict(dataclasses.replace(expected, **measured))
    return {name: figures[f"io_{name}"] for name in fields}, fields


def workload_bytes() -> int:
    return workloads.get(workloads.WorkloadSpec("llama3-8b", 16 << 20, "mixed")).nbytes


@pytest.mark.parametrize("engine", list(CPU_ENGINES))
def test_save_then_load_measures_the_workload(engine, ctx):
    runner = runners.get(engine)
    save_case, load_case = cases(engine, CPU_ENGINES[engine]).values()
    assert runner.unavailable(save_case, ctx) is None
    saved = runner.run(save_case, ctx)
    loaded = runner.run(load_case, ctx)
    for m in (saved, loaded):
        assert m.bytes == workload_bytes() and 0 < m.bytes <= 16 << 20
        assert m.bw_bytes == m.bytes / m.seconds and m.seconds > 0
        assert m.figures["bytes_on_disk"] >= m.bytes  # the tensors plus the format's metadata
        assert m.peak_rss_bytes > m.bytes  # the workload itself is in memory
        assert m.cpu_seconds > 0 and m.machine_cpu_seconds > 0
    assert saved.cache is None and loaded.cache == "cold"
    if engine == "fastpersist":  # ckptio says what staging it held: within IOOptions.buffer_bytes (64 MiB)
        assert 0 < saved.figures["staging_bytes"] <= 64 << 20 and "staging_bytes" not in loaded.figures
    assert "verified" in loaded.note
    assert "cold: posix_fadvise(DONTNEED) on each of the checkpoint's files" in loaded.note
    on_disk = runner.files(runner.path(save_case, ctx))
    assert on_disk and sum(p.stat().st_size for p in on_disk) == saved.figures["bytes_on_disk"]
    ctx.resources.cleanup()
    assert list(ctx.directory.iterdir()) == []  # everything it made is gone
    assert workloads._CACHE == {} and not getattr(runner, "_open", {}), "nothing kept for the next sweep"


def train_case(engine: str, transfer: str, **axes) -> Case:
    """A short train case: 6 steps of 20 ms, a checkpoint every 3."""
    block = {
        "engine": [engine],
        "pattern": ["train"],
        "transfer": [transfer],
        "steps": [6],
        "interval": [3],
        "step_time": ["20ms"],
        **{k: [v] for k, v in axes.items()},
    }
    document = {"checkpoint_size": SIZE, "workload": "llama3-8b", "dtype": "mixed", "matrix": block}
    [case] = config.from_dict(document, "test.yaml").cases
    return case


def assert_a_train_row(m, checkpoints: int) -> None:
    """The figures of a train row are there and consistent with each other."""
    assert m.bytes == workload_bytes() and m.seconds > 0 and m.bw_bytes == m.bytes / m.seconds
    loop = m.figures
    assert 0 < loop["stall_seconds"] <= loop["checkpoint_cost_seconds"] and m.blocking_seconds == loop["stall_seconds"]
    assert loop["restore_seconds"] > 0.02  # a load and one 20 ms step
    assert set(loop) >= {"stall_seconds", "slowdown", "checkpoint_cost_seconds", "restore_seconds"}
    assert f"{checkpoints} checkpoints in 6 steps" in m.note and "verified" in m.note


def test_a_train_case_checkpoints_restores_and_reports_what_its_checkpoints_cost(ctx):
    runner = runners.get("fastpersist")
    m = runner.run(train_case("fastpersist", "CPU_ONLY", threads=2), ctx)
    assert_a_train_row(m, 2)
    # synchronous saves never drain behind steps; 6 steps of compute
    assert m.figures["slowdown"] == 0 and m.cpu_seconds > 0.1
    ctx.resources.cleanup()
    assert list(ctx.directory.iterdir()) == []


@pytest.mark.parametrize("engine", ["dcp_fast"])
def test_distributed_engines_save_and_load_on_two_ranks(engine, ctx, monkeypatch):
    """Two torchrun ranks save their shards and load them back verified (two checkpoints in a row, each in its
    own folder); the rows say what each rank wrote per checkpoint, what the caller waited, the disk use, the
    rules' per-rank figures; every file and folder, the shared workload included, is cleaned up. dcp_fast only:
    the ranks' machinery is every distributed engine's, dcp's save and load through it run in
    test_benchmark_scripts (cpu_profile), torch_save_ranks' in test_mlperf (a sweep of the geometry).
    The config leaves threads out: the ranks run at ckptio's default, CKPTIO_THREADS here, and the rows say so."""
    from ckptio import IOOptions

    monkeypatch.setenv("CKPTIO_THREADS", "3")
    runner = runners.get(engine)
    count = 2
    save_case, load_case = cases(engine, DISTRIBUTED[engine], None, world_size=2, checkpoints=count).values()
    assert runner.unavailable(save_case, ctx) is None
    saved, loaded = runner.run(save_case, ctx), runner.run(load_case, ctx)
    assert saved.bytes == loaded.bytes == count * workload_bytes()
    assert 0 < saved.blocking_seconds <= saved.seconds and loaded.blocking_seconds is None
    assert saved.figures["bytes_on_disk"] >= saved.bytes and 0.9 < saved.figures["compression_ratio"] <= 1.0
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # IOOptions() as each rank builds it: one of two on this host
    for row in (saved, loaded):
        assert 0 < row.figures["max_rank_seconds"] <= row.seconds and row.figures["min_rank_bw_bytes"] > 0
        recorded, used = options_of(row.figures, IOOptions())  # the ranks' Writer and Reader: the environment's 3
        assert recorded == used and used["threads"] == 3
        assert sweep._row(save_case, 1, "r", **row.row())["threads"] == 3
    if count == 2:
        assert sorted(p.name for p in runner.path(save_case, ctx).iterdir()) == ["checkpoint-0", "checkpoint-1"]
    shares = re.search(r"written per rank: ([\d.]+)KiB, ([\d.]+)KiB", saved.note)
    assert shares and abs(float(shares[1]) - float(shares[2])) < 64  # each rank wrote its half
    assert "verified on every rank" in loaded.note and loaded.cache == "cold"
    ctx.resources.cleanup()
    assert list(ctx.directory.iterdir()) == [] and not list(Path("/dev/shm").glob(f"gdsbench-workload.{os.getpid()}.*"))


def test_a_row_takes_rank_0s_io_options_and_its_note_says_how_other_ranks_differ():
    """Ranks on nodes with other cores (or a measured choice) resolve other defaults: the row holds rank 0's."""
    from gdsbench.runners.base import Measurement
    from gdsbench.runners.checkpoint.distributed import with_options

    ours, theirs = {"threads": 4, "backend": "auto"}, {"threads": 8, "backend": "auto"}
    ranks = [{"rank": 0, "io_options": ours}, {"rank": 1, "io_options": ours}, {"rank": 2, "io_options": theirs}]
    m = with_options(Measurement(bytes=1, seconds=1.0, bw_bytes=1.0, note="saved"), ranks)
    assert m.figures == {"io_threads": 4, "io_backend": "auto"} and m.resolved == {"threads": 4}
    assert m.note == "saved; IOOptions unlike rank 0's: rank 2 threads=8"
    dcp_ranks = [{"rank": 0}, {"rank": 1}]  # DCP's own storage layer reports none
    assert with_options(Measurement(bytes=1, seconds=1.0, bw_bytes=1.0), dcp_ranks).figures == {}


@pytest.mark.parametrize(("engine", "is_async"), [("dcp_fast", True)])  # sync loops: the in-process test
def test_distributed_train_steps_in_lockstep_and_restores_on_every_rank(engine, is_async, ctx):
    """Two ranks train with an all-reduce per step; an async save drains behind the steps (it stalls the
    loop less than it takes to be durable), a synchronous one stalls for all of it; both restore, verified."""
    runner = runners.get(engine)
    m = runner.run(train_case(engine, DISTRIBUTED[engine], world_size=2, threads=2, **{"async": is_async}), ctx)
    assert_a_train_row(m, 2)
    assert m.resolved == {"threads": 2} and m.figures["io_threads"] == 2  # the matrix's threads, not ckptio's default
    assert "verified on every rank" in m.note and "an all-reduce on 2 ranks" in m.note
    if is_async:
        assert m.figures["stall_seconds"] < m.seconds
    else:
        assert m.figures["slowdown"] == 0 and m.figures["stall_seconds"] >= m.seconds * 0.9
    assert m.cpu_seconds > 0.2 and m.peak_rss_bytes > 0  # two ranks' loops
    ctx.resources.cleanup()
    assert list(ctx.directory.iterdir()) == []


def test_torch_mmap_loads_what_torch_save_wrote_and_only_loads(ctx):
    runner = runners.get("torch_mmap")
    document = {
        "checkpoint_size": SIZE,
        "workload": "llama3-8b",
        "dtype": "mixed",
        "matrix": {"engine": ["torch_mmap"], "pattern": ["load"], "transfer": ["CPU_CACHED"]},
    }
    [load_case] = config.from_dict(document, "test.yaml").cases
    loaded = runner.run(load_case, ctx)  # writes its file first (untimed), then loads and verifies it
    assert loaded.bytes == workload_bytes() and loaded.cache == "cold" and "verified" in loaded.note
    assert runner.patterns == {Pattern.LOAD}
    ctx.resources.cleanup()
    assert list(ctx.directory.iterdir()) == []


def flip_tensor_bytes(files: list[Path], tensor) -> None:
    """Invert 64 bytes of a tensor's data where they sit in the checkpoint's files (not padding)."""
    raw = tensor.reshape(-1).view(torch_uint8()).numpy().tobytes()
    needle = raw[len(raw) // 2 : len(raw) // 2 + 64]
    for path in files:
        content = path.read_bytes()
        at = content.find(needle)
        if at >= 0:
            with open(path, "r+b") as f:
                f.seek(at)
                f.write(bytes(b ^ 0xFF for b in needle))
            return
    raise AssertionError("tensor bytes not found in the checkpoint")


def torch_uint8():
    import torch

    return torch.uint8


@pytest.mark.parametrize("engine", list(CPU_ENGINES))
def test_a_corrupted_checkpoint_fails_the_load(engine, ctx):
    runner = runners.get(engine)
    save_case, load_case = cases(engine, CPU_ENGINES[engine]).values()
    runner.run(save_case, ctx)
    tensors = workloads.get(workloads.WorkloadSpec("llama3-8b", 16 << 20, "mixed")).tensors
    flip_tensor_bytes(runner.files(runner.path(save_case, ctx)), tensors["model.layers.0.mlp.up_proj.weight"])
    with pytest.raises(GdsbenchError, match=rf"^{engine}: |differs from the saved one"):
        runner.run(load_case, ctx)
    ctx.resources.cleanup()


def test_a_load_without_its_save_writes_the_checkpoint_first_and_cleans_it_up(ctx):
    runner = runners.get("torch_save")
    keep = ctx.directory / "not-ours.pt"
    keep.write_bytes(b"precious")
    load_case = cases("torch_save", "CPU_CACHED")[Pattern.LOAD]
    measured = runner.run(load_case, ctx)
    assert measured.bytes == workload_bytes() and runner.path(load_case, ctx).is_file()
    ctx.resources.cleanup()
    assert list(ctx.directory.iterdir()) == [keep] and keep.read_bytes() == b"precious"


def test_warm_and_unprivileged_cold_loads_say_how_the_cache_was_set(ctx, monkeypatch):
    runner = runners.get("safetensors")
    warm = cases("safetensors", "CPU_CACHED", cache="warm")[Pattern.LOAD]
    measured = runner.run(warm, ctx)
    assert measured.cache == "warm" and measured.note.startswith("warm: files read once")
    monkeypatch.setattr("gdsbench.runners.cache.is_root", lambda: False)
    cold = runner.run(cases("safetensors", "CPU_CACHED")[Pattern.LOAD], ctx)
    assert cold.cache == "cold" and cold.note.startswith("cold: posix_fadvise(DONTNEED)")
    ctx.resources.cleanup()


def test_command_names_the_api_threads_and_durability(ctx):
    save_case, load_case = cases("fastpersist", "CPU_ONLY").values()
    fast = runners.get("fastpersist")
    saved = fast.command(save_case, ctx)
    assert saved[0] == "python-api" and saved[1].startswith("ckptio.Checkpointer(") and "threads=2" in saved
    assert saved[1].endswith(".save") and "IOOptions(threads=2, backend='direct')" in saved[1]
    assert "fsync=files+directory" in saved and "checkpoint_size=16M" in saved
    assert "cache=cold" in fast.command(load_case, ctx)
    default = fast.command(cases("fastpersist", "CPU_ONLY", None)[Pattern.SAVE], ctx)  # threads left to ckptio
    assert "IOOptions(backend='direct')" in default[1] and not any(a.startswith("threads=") for a in default)
    torch_case = cases("torch_save", "CPU_CACHED")[Pattern.SAVE]
    assert not any(a.startswith("threads=") for a in runners.get("torch_save").command(torch_case, ctx))
    assert torch_case.get("threads") is None  # torch.save has no I/O threads: not a parameter of its cases


def test_transfers_each_engine_lacks_are_skipped_with_a_reason(ctx):
    assert (
        sweep.skip_reason(cases("torch_save", "CPU_ONLY")[Pattern.SAVE], ctx) == "torch_save has no CPU_ONLY transfer"
    )
    assert sweep.skip_reason(cases("fastpersist", "GDS")[Pattern.LOAD], ctx) == "fastpersist has no GDS transfer"


def test_gpu_and_deepspeed_engines_say_why_they_cannot_run_here(ctx):
    import torch

    kvikio = cases("kvikio", "GDS")[Pattern.SAVE]
    reason = runners.get("kvikio").unavailable(kvikio, ctx)
    if not torch.cuda.is_available():
        assert reason == "needs CUDA: no CUDA device visible to torch"
    elif importlib.util.find_spec("kvikio") is None:
        assert reason.startswith("kvikio not importable")
    else:
        assert reason is None  # a GPU server with kvikio: the engine runs
    if importlib.util.find_spec("deepspeed") is None:
        assert (
            runners.get("deepspeed").unavailable(cases("deepspeed", "CPU_ONLY")[Pattern.SAVE], ctx)
            == "deepspeed not installed: pip install deepspeed"
        )


def test_a_failing_engine_becomes_a_one_line_tool_error(ctx):
    runner = runners.get("safetensors")
    load_case = cases("safetensors", "CPU_CACHED")[Pattern.LOAD]
    path = runner.path(load_case, ctx)
    path.write_bytes(b"\x00" * 100)  # not ours, not a safetensors file: the load must fail, not be rewritten
    with pytest.raises(ToolError, match=r"^safetensors: SafetensorError: ") as caught:
        runner.run(load_case, ctx)
    assert "\n" not in str(caught.value)


def test_checkpoint_config_runs_fio_beside_every_engine():
    sweep_config = config.load(ROOT / "configs" / "checkpoint.yaml")
    engines = {c.engine for c in sweep_config.cases}
    assert engines == {"fio", "torch_save", "torch_mmap", "fastpersist", "safetensors", "dcp", "kvikio", "deepspeed"}
    assert sweep_config.interleave and sweep_config.repetitions == 3 and sweep_config.file_size == 4 << 30
    engine_cases = [c for c in sweep_config.cases if c.engine != "fio"]
    assert {c.get("checkpoint_size") for c in engine_cases} == {4 << 30}
    assert {c.get("cache") for c in engine_cases} == {"cold"} and {c.get("dtype") for c in engine_cases} == {"mixed"}


@pytest.mark.needs_fio
def test_sweep_and_report_show_each_engine_against_fio(tmp_path):
    from gdsbench.cli import cli

    document = {
        "name": "ckpt",
        "directory": str(tmp_path / "target"),
        "allow_root_filesystem": True,
        "file_size": SIZE,
        "checkpoint_size": SIZE,
        "repetitions": 1,
        "interleave": True,
        "workload": "gpt2-xl",
        "matrix": [
            {"engine": ["fio"], "pattern": ["write", "read"], "io_size": ["4M"], "iodepth": [4]},
            {"engine": ["fastpersist"], "pattern": ["save", "load"], "transfer": ["CPU_ONLY"], "threads": [2]},
            {"engine": ["torch_save"], "pattern": ["save", "load"], "transfer": ["CPU_CACHED"]},
        ],
    }
    path = tmp_path / "ckpt.yaml"
    path.write_text(yaml.safe_dump(document))
    swept = CliRunner().invoke(cli, ["sweep", str(path), "-o", str(tmp_path / "out")])
    assert swept.exit_code == 0, swept.output
    [csv_path] = (tmp_path / "out").glob("ckpt-*.csv")
    frame = results.load([csv_path])
    assert len(frame) == 6 and set(frame["status"]) == {"ok"}
    engine_rows = frame[frame["engine"] != "fio"]
    assert set(engine_rows["bytes"]) == {workloads.layout(workloads.PRESETS["gpt2-xl"], 16 << 20, "mixed").nbytes}
    assert set(engine_rows[engine_rows["pattern"] == "load"]["cache"]) == {"cold"}
    assert not (tmp_path / "target").exists()  # the folder the sweep made, emptied and removed
    reported = CliRunner().invoke(cli, ["report", str(csv_path)])
    assert reported.exit_code == 0, reported.output
    table = reported.output[reported.output.index("against the fio ceiling") :]
    assert "x fio best" in table and "x torch_save best" in table
    torch_save = next(line for line in table.splitlines() if line.split()[:2] == ["torch_save", "save"])
    assert "1.00" in torch_save.split()  # torch_save against itself


def test_fastpersist_load_into_fills_existing_tensors(ctx):
    runner = runners.get("fastpersist")
    save_case, load_case = cases("fastpersist", "CPU_ONLY", load_into=True).values()
    assert load_case.get("load_into") is True and ".load_into(initialised tensors" in runner.command(load_case, ctx)[1]
    runner.run(save_case, ctx)
    loaded = runner.run(load_case, ctx)  # verified against the workload inside run()
    assert loaded.bytes == workload_bytes() and "verified" in loaded.note
    ctx.resources.cleanup()


def test_fastpersist_staging_sets_the_checkpointers_buffer_bytes(ctx):
    """`staging` is IOOptions.buffer_bytes of the case's Checkpointer; unset, the library's default."""
    runner = runners.get("fastpersist")
    save_case, load_case = cases("fastpersist", "CPU_ONLY", staging="32M").values()
    assert save_case.get("staging") == 32 << 20 and "buffer_bytes=33554432)" in runner.command(save_case, ctx)[1]
    assert runner.run(save_case, ctx).bytes == workload_bytes()
    staged = [ckpt.options.buffer_bytes for key, ckpt in runner._open.items() if key[5] == 32 << 20]
    assert staged == [32 << 20]
    assert runner.run(load_case, ctx).bytes == workload_bytes()
    assert cases("fastpersist", "CPU_ONLY")[Pattern.SAVE].get("staging") is None  # unset: the library's default
    small = cases("fastpersist", "CPU_ONLY", staging="32M", fresh_pages="small")[Pattern.LOAD]
    assert "fresh_pages='small'" in runner.command(small, ctx)[1]
    assert runner.run(small, ctx).figures["io_fresh_pages"] == "small"  # a load into 4 KiB pages, said on the row
    ctx.resources.cleanup()


@pytest.mark.parametrize(("environment", "threads", "ran"), [(None, None, None), ("3", None, 3), ("3", 2, 2)])
def test_fastpersist_rows_say_which_io_options_ran(environment, threads, ran, ctx, monkeypatch):
    """Where the config leaves `threads` out, fastpersist runs at ckptio's own default (IOOptions() without threads:
    CKPTIO_THREADS applies, as for a user, and the row's command says it); the matrix's threads wins over both. The
    row's `threads` is the number that ran, and an `io_<field>` column holds each IOOptions field."""
    from ckptio import IOOptions

    for variable in ("CKPTIO_THREADS", "GDSBENCH_IO_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    if environment is not None:
        monkeypatch.setenv("CKPTIO_THREADS", environment)
    row, _ = sweep._measure(sweep.Step(cases("fastpersist", "CPU_ONLY", threads)[Pattern.SAVE], 1), ctx, "r")
    recorded, used = options_of(row, IOOptions(backend="direct", threads=ran or IOOptions().threads))
    assert row["status"] == "ok" and row["threads"] == used["threads"] and recorded == used
    assert row["command"].startswith(f"CKPTIO_THREADS={environment} python-api" if environment else "python-api")
    ctx.resources.cleanup()


def test_fastpersist_recycle_overwrites_the_spare_and_cleans_it_up(ctx):
    """recycle: unmeasured saves make a spare generation, the measured save overwrites it in place
    (the note says so), and cleanup removes the spare with the checkpoint."""
    runner = runners.get("fastpersist")
    save_case = cases("fastpersist", "CPU_ONLY", recycle=True)[Pattern.SAVE]
    assert save_case.get("recycle") is True and "recycle=True)" in runner.command(save_case, ctx)[1]
    first = runner.run(save_case, ctx)
    second = runner.run(save_case, ctx)
    for m in (first, second):
        assert m.note.startswith("recycled: overwrote the previous generation's blocks"), m.note
        assert m.bytes == workload_bytes()
    names = sorted(p.name for p in ctx.directory.iterdir())
    assert len(names) == 2 and names[0].endswith(".recycle.pt.ckptio-spare") and names[1].endswith(".recycle.pt")
    plain = runner.run(cases("fastpersist", "CPU_ONLY")[Pattern.SAVE], ctx)
    assert plain.note.startswith("new file")
    assert len(list(ctx.directory.iterdir())) == 3  # its own file: the recycling Checkpointer keeps its spare
    ctx.resources.cleanup()
    assert list(ctx.directory.iterdir()) == []


def test_level_memory_states(monkeypatch):
    """recent touches and frees memory (RSS back where it was), idle waits, as-is does nothing;
    each says so for the row's note."""
    import psutil
    import torch

    from gdsbench.runners.checkpoint import conditions

    process, touched = psutil.Process(), []
    ones = torch.ones

    def ones_then_measure(*args, **kwargs):  # RSS read once the touching is done, before the free
        out = ones(*args, **kwargs)
        touched.append(process.memory_info().rss)
        return out

    monkeypatch.setattr(torch, "ones", ones_then_measure)
    before = process.memory_info().rss
    note = conditions.level_memory("recent", 256 << 20)
    assert note == "memory: 256 MiB touched and freed just before, C heap trimmed"
    assert touched[0] - before >= 200 << 20  # really touched
    assert process.memory_info().rss - before < 64 << 20  # and really freed
    slept = []
    monkeypatch.setattr(conditions.time, "sleep", slept.append)
    assert conditions.level_memory("idle", 1 << 30) == "memory: 10 s idle before, C heap trimmed"
    assert slept == [conditions.IDLE_SECONDS]
    assert conditions.level_memory("as-is", 1 << 30) == "memory: as left by the previous case"


HEAP_SCENARIO = """
import psutil, torch
from gdsbench.runners.checkpoint.conditions import return_free_heap
process = psutil.Process()
big = torch.ones(30 << 20, dtype=torch.uint8)
del big  # a large free: glibc raises its mmap threshold, later allocations up to it come from the heap
tensors, pins = [], []
for _ in range(12):  # 336 MiB from the heap, each followed by a small live object (fragmentation)
    tensors.append(torch.ones(7 << 20))
    pins.append(torch.ones(16 << 10))
before = process.memory_info().rss
del tensors
freed = process.memory_info().rss
print(return_free_heap(), (before - freed) >> 20, (freed - process.memory_info().rss) >> 20)
"""


def test_free_heap_pages_left_by_one_engine_are_not_handed_to_the_next():
    """Freed 28 MiB tensors stay resident in glibc's heap (an engine's leftovers the next engine's
    malloc would reuse without page faults); return_free_heap hands them back. A fresh interpreter,
    so the heap's state is the scenario's, not whatever earlier tests left."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", HEAP_SCENARIO], capture_output=True, text=True, check=True).stdout
    trimmed, dropped_by_free, dropped_by_trim = out.split()
    assert trimmed == "True"
    assert int(dropped_by_free) < 64  # freed, yet still resident
    assert int(dropped_by_trim) >= 300  # handed back


def test_load_note_and_command_name_the_memory_state(ctx):
    runner = runners.get("fastpersist")
    save_case, load_case = cases("fastpersist", "CPU_ONLY", memory="as-is").values()
    assert "memory=as-is" in runner.command(load_case, ctx)
    runner.run(save_case, ctx)
    assert "memory: as left by the previous case" in runner.run(load_case, ctx).note
    ctx.resources.cleanup()


def test_failed_save_leaves_no_partial_checkpoint(ctx, monkeypatch):
    """A save that dies half-way (FAKE: OSError after writing some bytes) removes its partial file, so
    the load case reports the save's error instead of reading a torn file."""
    runner = runners.get("torch_save")

    def half_a_save(self, state, path, case):
        path.write_bytes(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device (fake)")

    monkeypatch.setattr(type(runner), "save", half_a_save)
    save_case, load_case = cases("torch_save", "CPU_CACHED").values()
    for case in (save_case, load_case):
        with pytest.raises(ToolError, match="No space left on device"):
            runner.run(case, ctx)
        assert not runner.path(save_case, ctx).exists()
    ctx.resources.cleanup()


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        ("rank-killed", "rank 1 exited -9 (pid: 31457)  (SIGKILL)"),
        ("rank-raised", "[rank1]: RuntimeError: rank 1 could not stage 2147483648 bytes; rank 1 exited 1 (pid: 31470)"),
    ],
)
def test_a_failed_torchrun_is_named_by_its_root_cause(recorded, expected):
    """Real torchrun 2.13 output (tests/data/torchrun/die.py: rank 1 SIGKILLed, or raising while rank 0 waits in a
    barrier): the row's error names the failing rank and its own error, not rank 0's `Connection closed by peer`
    nor the banner of `=` signs torchrun ends with."""
    from gdsbench.launchers.torchrun import launcher_failure

    stderr = (ROOT / "tests" / "data" / "torchrun" / f"{recorded}.stderr").read_text()
    assert launcher_failure(stderr, 1) == expected
    assert launcher_failure("", 3) == "torchrun exited 3"


def test_dcp_fast_is_skipped_where_o_direct_cannot_be_probed():
    """dcp_fast rows say O_DIRECT: where no file can be opened with it (procfs takes no new file) the case is
    skipped with why, as fastpersist's is (it ran through the page cache, labelled O_DIRECT, before)."""
    case = cases("dcp_fast", "CPU_ONLY")[Pattern.SAVE]
    reason = runners.get("dcp_fast").unavailable(case, RunContext(directory=Path("/proc/self/gdsbench"), file_size=1))
    assert reason is not None and reason.startswith("O_DIRECT does not work in /proc/self/gdsbench")


def test_ranks_turn_an_o_direct_fallback_into_an_error():
    import warnings

    from ckptio.errors import DirectIOFallbackWarning

    from gdsbench.runners.checkpoint.ranks.rank import quiet_but_direct

    with warnings.catch_warnings():
        quiet_but_direct()
        warnings.warn("quiet", UserWarning, stacklevel=1)  # other warnings stay quiet
        with pytest.raises(DirectIOFallbackWarning):
            warnings.warn(DirectIOFallbackWarning("O_DIRECT refused"), stacklevel=1)


def test_cold_evicts_only_the_checkpoints_files_and_the_machine_drop_is_explicit(tmp_path):
    """`cache: cold` never drops the whole machine's page cache (it did, silently, as root, before every
    load); `cold-machine` does, as root only, and says so."""
    from gdsbench.runners.checkpoint import conditions

    mine = tmp_path / "ckpt.bin"
    mine.write_bytes(b"x" * (1 << 20))
    assert conditions.set_cache([mine], "cold") == "cold: posix_fadvise(DONTNEED) on each of the checkpoint's files"
    if os.geteuid() == 0:
        assert "whole machine's page cache dropped" in conditions.set_cache([mine], "cold-machine")
    else:
        with pytest.raises(ToolError, match="needs root"):
            conditions.set_cache([mine], "cold-machine")


def test_the_rank_program_takes_its_case_as_its_key_and_refuses_a_bad_one(capsys):
    """The config's keys parse the rank's case and fill its defaults (no second table of defaults); a case
    without ranks, a value its key refuses, or a preset without its size is an argparse error naming it."""
    import dataclasses

    from gdsbench import cli_rank

    where = ["--checkpoint", "/ckpt", "--out", "/out"]
    case = "engine=dcp_fast,pattern=train,world_size=2,checkpoint_size=16M,async=true"
    job = cli_rank.parse(["--case", case, *where])
    assert (job.engine, job.pattern, job.world_size, job.checkpoint_size) == ("dcp_fast", "train", 2, 16 << 20)
    assert (job.steps, job.interval, job.step_time, job.asynchronous) == (60, 10, 0.2, True)
    assert (job.compression, job.layout, job.executor, job.warmup) == ("none", "sharded", "thread", 1)
    assert (job.path, job.out, job.workload_file, job.broadcast) == ("/ckpt", "/out", None, False)
    with pytest.raises(dataclasses.FrozenInstanceError):  # a typed, frozen job: no rank rewrites it
        job.world_size = 4
    for case, said in [
        ("engine=fastpersist,pattern=save,checkpoint_size=16M", "has no ranks"),
        ("engine=dcp_fast,pattern=save,compression=lzma,checkpoint_size=16M", "matrix.compression[0]: expected one of"),
        ("engine=dcp_fast,pattern=save", "name checkpoint_size"),
    ]:
        with pytest.raises(SystemExit) as exited:
            cli_rank.parse(["--case", case, *where])
        assert exited.value.code == 2 and said in capsys.readouterr().err
