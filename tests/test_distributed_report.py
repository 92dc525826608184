"""Distributed checkpoint rows in the report and in qualify: the ratio to DCP's own storage measured alike,
the time the caller was blocked and the compression ratio."""

from __future__ import annotations

from pathlib import Path

import yaml

from gdsbench import qualify, results
from gdsbench.report import render
from gdsbench.report.ceilings import ceiling_ratios

GiB = 1 << 30


def row(engine: str, pattern: str, bw: float, rep: int, **params: object) -> dict[str, object]:
    """One ok result row of a distributed checkpoint case (or of fio, without params)."""
    case = ",".join([f"engine={engine}", f"pattern={pattern}", *(f"{k}={v}" for k, v in params.items())])
    base = {
        "run_id": "r1",
        "host": "h",
        "case": case,
        "engine": engine,
        "pattern": pattern,
        "repetition": rep,
        "status": "ok",
        "bytes": 4 * GiB,
        "bw_bytes": bw,
        "seconds": 4 * GiB / bw,
    }
    return {**base, **params}


def frame(tmp_path: Path) -> Path:
    """A run: fio's durable write, dcp and dcp_fast saves at 2 ranks (sync, async, compressed)."""
    rows = []
    for rep, jitter in enumerate((1.0, 1.1, 0.9), start=1):
        rows.append(row("fio", "write", 1.0e9 * jitter, rep, transfer="CPU_ONLY", end_fsync=True))
        common = {"transfer": "CPU_ONLY", "world_size": 2, "layout": "sharded", "executor": "thread"}
        rows.append(
            row(
                "dcp",
                "save",
                0.4e9 * jitter,
                rep,
                **{**common, "async": False, "compression": "none"},
                blocking_seconds=10.7,
                compression_ratio=0.99,
            )
        )
        rows.append(
            row(
                "dcp_fast",
                "save",
                1.2e9 * jitter,
                rep,
                **{**common, "async": False, "compression": "none"},
                blocking_seconds=3.6,
                compression_ratio=0.99,
            )
        )
        rows.append(
            row(
                "dcp",
                "save",
                0.3e9 * jitter,
                rep,
                **{**common, "async": True, "compression": "none"},
                blocking_seconds=2.0,
                compression_ratio=0.99,
            )
        )
        rows.append(
            row(
                "dcp_fast",
                "save",
                0.9e9 * jitter,
                rep,
                **{**common, "async": True, "compression": "none"},
                blocking_seconds=0.4,
                compression_ratio=0.99,
            )
        )
        rows.append(
            row(
                "dcp_fast",
                "save",
                0.8e9 * jitter,
                rep,
                **{**common, "async": False, "compression": "blosc"},
                blocking_seconds=5.0,
                compression_ratio=1.37,
            )
        )
    path = tmp_path / "d.csv"
    columns = (*results.COLUMNS, "end_fsync", "world_size", "layout", "executor", "async", "compression")
    writer = results.ResultWriter(path, columns)
    for r in rows:
        writer.write(r)
    writer.close()
    return path


def test_dcp_fast_is_compared_with_dcp_measured_alike(tmp_path: Path) -> None:
    """Sync with sync, async with async; a codec DCP lacks is compared with DCP uncompressed."""
    ratios = ceiling_ratios(results.load([frame(tmp_path)])).set_index("engine")
    sync = ratios.loc["dcp_fast (async=False, compression=none)"]
    assert round(sync["x_dcp"], 2) == 3.0 and round(sync["x_fio"], 2) == 1.2 and sync["blocking_s"] == 3.6
    assert round(ratios.loc["dcp_fast (async=True, compression=none)"]["x_dcp"], 2) == 3.0
    blosc = ratios.loc["dcp_fast (async=False, compression=blosc)"]
    assert round(blosc["x_dcp"], 2) == 2.0 and blosc["compression_ratio"] == 1.37


def test_the_report_shows_the_ratio_to_dcp_blocking_and_size(tmp_path: Path) -> None:
    text = render(results.load([frame(tmp_path)]), None, "markdown")
    table = text[text.index("| engine | pattern | n | bw (median) | x fio best |") :].splitlines()
    # no torch_save and no write without fsync in this run: those empty columns are left out
    assert table[0].split(" | ")[5:8] == ["x dcp best", "blocked s", "size ratio"]
    assert "x torch_save" not in table[0] and "no fsync" not in table[0]
    line = next(ln for ln in table if ln.startswith("| dcp_fast (async=True, compression=none)"))
    assert " | 3.00 | 0.400 | 0.99 | " in line


def test_qualify_judges_blocking_and_compression(tmp_path: Path) -> None:
    csv_path = frame(tmp_path)
    checks = [
        {"name": "async saves block < 1s", "where": {"engine": "dcp_fast", "async": True}, "max_blocking": "1s"},
        {"name": "sync saves block < 1s", "where": {"engine": "dcp_fast", "async": False}, "max_blocking": "1s"},
        {"name": "blosc saves a quarter", "where": {"compression": "blosc"}, "min_compression_ratio": 1.25},
    ]
    config_path = tmp_path / "q.yaml"
    config_path.write_text(yaml.safe_dump({"matrix": {"engine": ["dcp_fast"], "pattern": ["save"]}, "checks": checks}))
    parsed = qualify.parse_checks(str(config_path), checks)
    outcomes = qualify.evaluate_all(parsed, results.load([csv_path]))
    assert [o.status for o in outcomes] == ["pass", "fail", "pass"]
    assert "0.400s <= 1.000s" in outcomes[0].message and "worst 5.000s" in outcomes[1].message


def test_the_nodes_table_shows_one_repetition_s_slowest_node_with_its_own_seconds() -> None:
    """The slowest node differs between repetitions: the table shows the median repetition's node, that node's
    seconds and the longest rank's of the same row (never a median of seconds of different nodes beside one of
    them), and its legend says so with the rows' own definition."""
    import pandas as pd

    from gdsbench import runners
    from gdsbench.report import nodes
    from gdsbench.report.derived import Inputs

    reps = [(1.0e9, "0 (vm0)", 0.50, 0.52), (1.2e9, "1 (vm1)", 0.40, 0.41), (0.8e9, "1 (vm1)", 0.70, 0.70)]
    common = {"transfer": "CPU_ONLY", "world_size": 4, "launcher": "mpirun", "nodes": 2}
    frame = pd.DataFrame(
        [
            row(
                "dcp_fast", "save", bw, rep, slowest_node=node, slowest_node_seconds=its, max_rank_seconds=top, **common
            )
            for rep, (bw, node, its, top) in enumerate(reps, start=1)
        ]
    )
    frame.attrs["figures"] = runners.declared_columns()  # as a results file's sidecar declares them
    table = nodes.TABLE.build(Inputs(frame, {}), {}).table
    assert table is not None and nodes.SLOWEST in table.title
    [cells] = [dict(zip(table.header, r)) for r in table.rows]
    assert (cells["slowest node"], cells["its s"], cells["max rank s"]) == ("0 (vm0)", "0.500", "0.520")
    assert "median repetition" in dict(table.legend)["slowest node"]
