"""The CPU-cost table: seconds per GiB, the projection to every core, fio's own cost, and its absence."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gdsbench import report
from gdsbench.report import cpu_cost, summary
from tests.test_report import row, rows_of

GIB = 1 << 30


def costed_run() -> pd.DataFrame:
    """fio's durable write (2 GiB, 0.5 s machine CPU) and read, fastpersist save/load, torch_save save."""

    def engine(name: str, pattern: str, nbytes: int, bw: float, cpu: float, machine: float, rep: int = 1) -> dict:
        return row(
            engine=name,
            pattern=pattern,
            io_size=None,
            bytes=nbytes,
            bw_bytes=bw,
            repetition=rep,
            cpu_seconds=cpu,
            machine_cpu_seconds=machine,
        )

    rows = [
        row(pattern="write", bytes=2 * GIB, bw_bytes=2000, end_fsync=1, cpu_seconds=0.4, machine_cpu_seconds=0.5),
        row(pattern="write", io_size=4096, bytes=GIB, bw_bytes=100, end_fsync=1, machine_cpu_seconds=9.0),
        row(pattern="read", bytes=GIB, bw_bytes=1000, cpu_seconds=0.1, machine_cpu_seconds=0.2),
        *(
            engine("fastpersist", "save", 4 * GIB, 1900, cpu, machine, rep)
            for rep, cpu, machine in ((1, 0.8, 1.2), (2, 1.0, 1.6), (3, 1.2, 2.0))
        ),
        engine("fastpersist", "load", GIB, 950, 0.3, 0.4),
        engine("torch_save", "save", GIB, 250, 0.5, 4.0),
    ]
    return rows_of(rows).assign(source="r.csv")


METAS = {"r.csv": {"machine": {"cpu_count": 16, "usable_cpus": 8}}}  # the run could use 8 of 16


def test_costs_are_medians_per_gib_and_project_to_every_core():
    costs = cpu_cost.cpu_costs(costed_run(), METAS).set_index(["engine", "pattern"])
    save = costs.loc[("fastpersist", "save")]
    assert save["n"] == 3
    assert save["machine_cpu_s_per_gib"] == pytest.approx(0.4)  # 1.6 s / 4 GiB, the median repetition
    assert save["process_cpu_s_per_gib"] == pytest.approx(0.25)
    assert save["cpu_bound_bw"] == pytest.approx(8 * GIB / 0.4)  # 8 cores x GiB / 0.4 CPU-s
    assert save["fio_bw"] == 2000 and save["fio_machine_cpu_s_per_gib"] == pytest.approx(0.25)  # the ceiling case
    assert costs.loc[("fastpersist", "load"), "fio_machine_cpu_s_per_gib"] == pytest.approx(0.2)
    assert costs.loc[("torch_save", "save"), "machine_cpu_s_per_gib"] == pytest.approx(4.0)


def test_without_the_host_core_count_there_is_no_projection():
    costs = cpu_cost.cpu_costs(costed_run(), {})
    assert costs["cpu_bound_bw"].isna().all() and (costs["machine_cpu_s_per_gib"] > 0).all()
    header, _ = cpu_cost.cost_rows(costs)
    assert "CPU-bound at" not in header  # an empty column is left out


def test_every_format_shows_the_table_and_files_without_cpu_columns_have_none():
    frame = costed_run()
    text = report.render(frame, ["engine", "pattern"], "text")
    assert cpu_cost.TITLE in text and "8 cores: " not in text  # r.csv has no sidecar here: no core count
    document = json.loads(report.render(frame, ["engine", "pattern"], "json"))
    assert {r["engine"] for r in document["cpu_cost"]} == {"fastpersist", "torch_save"}
    old = frame.drop(columns=["cpu_seconds", "machine_cpu_seconds"])
    assert summary.build(old, ["engine", "pattern"]).table("cpu_cost") is None
    assert json.loads(report.render(old, ["engine", "pattern"], "json"))["cpu_cost"] == []


def test_files_from_before_usable_cpus_project_with_the_machines_count():
    costs = cpu_cost.cpu_costs(costed_run(), {"r.csv": {"machine": {"cpu_count": 4}}})
    save = costs.set_index(["engine", "pattern"]).loc[("fastpersist", "save")]
    assert save["cores"] == 4 and save["cpu_bound_bw"] == pytest.approx(4 * GIB / 0.4)


def test_figures_below_the_clocks_resolution_are_left_out():
    """A quick run on 16 CPUs: 90 ms of machine CPU is under one 10 ms tick per CPU (it read below the process's own
    100 ms), so only the process figure stands; the machine's and its projection are omitted, not shown wrong."""
    quick = [
        row(
            engine="fastpersist",
            pattern="save",
            io_size=None,
            bytes=GIB // 32,
            bw_bytes=900,
            repetition=rep,
            cpu_seconds=0.1,
            machine_cpu_seconds=0.09,
        )
        for rep in (1, 2)
    ]
    frame = rows_of(quick).assign(source="q.csv")
    costs = cpu_cost.cpu_costs(frame, {"q.csv": {"machine": {"cpu_count": 16}}}).iloc[0]
    assert pd.isna(costs["machine_cpu_s_per_gib"]) and pd.isna(costs["cpu_bound_bw"])
    assert costs["process_cpu_s_per_gib"] == pytest.approx(3.2)
    on_two = cpu_cost.cpu_costs(frame, {"q.csv": {"machine": {"cpu_count": 2}}}).iloc[0]
    assert on_two["machine_cpu_s_per_gib"] == pytest.approx(2.88)  # 9 ticks on 2 CPUs: above their resolution
