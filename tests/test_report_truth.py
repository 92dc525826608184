"""What the report's figures say they are (issue 30): ratios to the best configuration, each ratio column's
denominator said, machine CPU flagged where others' work is in it, options blank where they do not apply."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from gdsbench import flags, results
from gdsbench.report import ceilings, cpu_cost, render, summary
from gdsbench.runners import resources


def rows_of(*args, **kwargs) -> pd.DataFrame:
    """Hand-written result rows as results.load gives them: rows without trait columns get the legacy reading."""
    return results.with_traits(pd.DataFrame(*args, **kwargs))


def row(engine: str, pattern: str, bw: float, **params: object) -> dict[str, object]:
    """One ok row of one case (its key from the engine, pattern and parameters)."""
    case = ",".join([f"engine={engine}", f"pattern={pattern}", *(f"{k}={v}" for k, v in params.items())])
    base = {
        "run_id": "r1",
        "host": "h",
        "case": case,
        "engine": engine,
        "pattern": pattern,
        "transfer": "CPU_ONLY",
        "repetition": 1,
        "status": "ok",
        "bytes": 1 << 30,
        "bw_bytes": bw,
        "seconds": (1 << 30) / bw,
        "iops": 1.0,
        "lat_mean_us": 1.0,
        "lat_p99_us": 1.0,
    }
    return {**base, **params}


def dcp_run() -> pd.DataFrame:
    """fio's durable write; DCP saves at 1, 2 and 4 threads (its best: 2), dcp_fast at 4 threads."""
    one_rank = {"world_size": 1, "layout": "sharded", "async": False, "executor": "thread", "compression": "none"}
    return rows_of(
        [
            row("fio", "write", 1000e6, end_fsync=True, threads=1),
            row("dcp", "save", 100e6, threads=1, **one_rank),
            row("dcp", "save", 400e6, threads=2, **one_rank),
            row("dcp", "save", 300e6, threads=4, **one_rank),
            row("dcp_fast", "save", 800e6, threads=4, **one_rank),
        ]
    )


def test_x_dcp_divides_by_dcps_best_thread_count_not_the_median_of_all():
    ratios = ceilings.ceiling_ratios(dcp_run()).set_index("engine")
    assert ratios.loc["dcp_fast", "x_dcp"] == pytest.approx(2.0)  # 800 / 400, not 800 / 300 (median of all)
    assert ratios.loc["dcp (threads=1)", "x_dcp"] == pytest.approx(0.25)


def test_every_ratio_column_says_its_denominator():
    text = render(dcp_run(), None, "markdown")
    table = text[text.index("### Checkpoint engines") :]
    assert "| x fio best | x dcp best |" in table
    assert "- x dcp best: over DCP's best configuration (its best thread count)" in table
    assert "- x fio best: over fio's best case of the run, the `ceiling` column" in table


def test_object_store_checkpoints_are_held_to_s3_in_their_own_column():
    frame = rows_of(
        [
            row("fio", "write", 1000e6, end_fsync=True),
            row("s3", "write", 300e6, io_size=64 << 20),
            row("s3torch_save", "save", 150e6),
        ]
    )
    saved = ceilings.ceiling_ratios(frame).set_index("engine").loc["s3torch_save"]
    assert saved["x_s3"] == pytest.approx(0.5) and pd.isna(saved["x_fio"])
    text = render(frame, None, "markdown")
    assert "| x s3 best |" in text and "| x fio best |" not in text


def cpu_rows(**fields: object) -> dict[str, object]:
    """An O_DIRECT fio read of 3 s whose own processes used 0.3 CPU-s."""
    return {**row("fio", "read", 1e9, threads=1), "seconds": 3.0, "cpu_seconds": 0.3, **fields}


def test_busy_machine_flags_others_work_in_the_machine_cpu():
    """A neighbour busy before the run is flagged; a loop device's worker (busy only during the run) is not; an
    older file without the load before the run is flagged where every usable core was busy."""
    frame = rows_of(
        [
            cpu_rows(machine_cpu_seconds=5.7, busy_cpus_before=1.8),  # a neighbour
            cpu_rows(machine_cpu_seconds=3.3, busy_cpus_before=0.05, repetition=2),  # the device's own kernel work
            cpu_rows(machine_cpu_seconds=5.7, busy_cpus_before=float("nan"), repetition=3, source="old.csv"),
            cpu_rows(machine_cpu_seconds=2.0, busy_cpus_before=float("nan"), repetition=4, source="old.csv"),
        ]
    ).assign(source=["new.csv", "new.csv", "old.csv", "old.csv"], run_id=["a", "a", "b", "b"])
    sidecars = {"new.csv": {"machine": {"usable_cpus": 2}}, "old.csv": {"machine": {"cpu_count": 2}}}
    marked = flags.annotate(frame, sidecars)["flags"].tolist()
    assert ["busy_machine" in flags.parse(cell) for cell in marked] == [True, False, True, False]


def test_the_cpu_table_marks_busy_machine_figures_and_says_what_its_columns_are():
    frame = rows_of(
        [
            cpu_rows(machine_cpu_seconds=5.7, busy_cpus_before=1.8, end_fsync=False),
            {**row("torch_save", "load", 5e8), "cpu_seconds": 1.0, "machine_cpu_seconds": 1.2, "busy_cpus_before": 0.0},
        ]
    ).assign(source="r.csv")
    cpu = summary.build(frame).table("cpu_cost")
    assert cpu is not None
    [cells] = cpu.rows
    assert cells[cpu.header.index("ceiling machine CPU-s/GiB")] == "5.70 (busy)"  # 5.7 CPU-s over its 1 GiB
    assert cells[cpu.header.index("machine CPU-s/GiB")] == "1.20"
    meanings = dict(cpu.legend)  # the columns shown (no core count here: no `CPU-bound at`)
    assert (
        "machine, not process" in meanings["ceiling machine CPU-s/GiB"]
        and "busy_machine" in meanings["machine CPU-s/GiB"]
    )
    assert cpu_cost.MEANINGS["CPU-bound at"].startswith("cores x GiB / machine CPU-s per GiB")
    assert cpu_cost.busy(frame.assign(flags="busy_machine")) is True


def test_busy_cpus_sees_a_neighbour_spinning():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = resources.busy_cpus(0.3)
    finally:
        spinner.kill()
        spinner.wait()
    assert busy is not None and busy >= 0.5


def test_the_write_heatmap_never_puts_durable_writes_beside_writes_without_fsync():
    from gdsbench.report import plots

    cells = [(t, s, fsync) for t in (1, 4) for s in (1 << 20, 16 << 20) for fsync in (False, True)]
    frame = rows_of(
        [row("fio", "write", 1e8 * (3 if fsync else 1), threads=t, io_size=s, end_fsync=fsync) for t, s, fsync in cells]
    )
    maps = {plot.name: plot.figure for plot in plots.heatmaps(frame)}
    assert set(maps) == {"heatmap-write-CPU_ONLY", "heatmap-write-CPU_ONLY-durable"}
    assert (
        "write CPU_ONLY durable (end_fsync): bandwidth" in maps["heatmap-write-CPU_ONLY-durable"]._suptitle.get_text()
    )
    texts = [t.get_text() for t in maps["heatmap-write-CPU_ONLY"].axes[0].texts]
    assert texts and all(t == "95" for t in texts)  # 1e8 B/s in MiB/s: the writes without fsync only


def test_options_a_row_does_not_use_are_blank():
    """A read's end_fsync, a local disk's pool and osd_cache (fio's keys for its ceph engines) are written blank by
    the sweep, as fio declares; the s3 engine's osd_cache stays (its reads use it); the report's case labels then
    leave them out."""
    from gdsbench import runners, sweep
    from gdsbench.cases import Case
    from gdsbench.report import tables

    assert runners.unused_options("fio", {"pattern": "read", "ioengine": "libaio"}) == [
        "end_fsync",
        "pool",
        "clientname",
        "rbdname",
        "osd_cache",
    ]
    assert runners.unused_options("fio", {"pattern": "write", "ioengine": "rados"}) == ["rbdname"]
    assert runners.unused_options("s3", {"pattern": "read"}) == []
    read = Case("fio", (("pattern", "read"), ("ioengine", "libaio"), ("end_fsync", True), ("pool", "gdsbench")))
    written = sweep._row(read, 1, "r1")
    assert (written["end_fsync"], written["pool"], written["ioengine"]) == (None, None, "libaio")
    write = Case("fio", (("pattern", "write"), ("ioengine", "libaio"), ("end_fsync", True), ("pool", "gdsbench")))
    frame = rows_of([written, sweep._row(write, 1, "r1")])
    assert tables.unused(frame) == {read.key: {"end_fsync", "pool"}, write.key: {"pool"}}
    other = Case("fio", (("pattern", "write"), ("ioengine", "libaio"), ("end_fsync", False), ("pool", "gdsbench")))
    cases = [read.key, write.key, other.key]
    shown, cells = tables.case_labels(cases, tables.unused(frame))
    assert shown == ["pattern", "end_fsync"] and cells == [["read", ""], ["write", "True"], ["write", "False"]]
    assert tables.case_labels(cases)[1][0] == ["read", "True"]  # what an old file's rows (none blank) show


def test_the_resume_command_is_printed_whole_on_one_line():
    import io
    from pathlib import Path

    from rich.console import Console

    from gdsbench import cli_sweep

    out = io.StringIO()
    path = Path("/var/tmp/a rather long results folder/[run] 1/sweep-20261126-000000.csv")
    cli_sweep.say_resume(path, Console(file=out, width=40))
    assert out.getvalue() == f"continue with: gdsbench sweep --resume '{path}'\n"


def test_json_says_units_and_writes_integer_axes_as_integers():
    import json

    frame = rows_of(
        [
            row("fio", "read", 1e9, threads=4, io_size=1 << 20, iodepth=8),
            row("torch_save", "save", 5e8, threads=None, io_size=None, iodepth=None),
        ]
    )
    document = json.loads(render(frame, ["engine", "pattern", "threads", "io_size"], "json"))
    fio = next(r for r in document["summary"] if r["engine"] == "fio")
    assert (fio["threads"], fio["io_size"]) == (4, 1 << 20) and isinstance(fio["threads"], int)
    assert document["units"]["bw_median"] == "bytes/s" and document["units"]["lat_mean_us"] == "microseconds"
    assert document["units"]["io_size"] == "bytes" and "threads" not in document["units"]
