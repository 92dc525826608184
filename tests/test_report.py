"""Reports from result rows: fio-style lines exact, tables of medians, grouping and errors."""

from __future__ import annotations

import textwrap

import pandas as pd
import pytest

from gdsbench import report, results
from gdsbench.errors import UsageError
from gdsbench.report import ceilings, summary
from gdsbench.report.fio_style import status_line


def rows_of(*args, **kwargs) -> pd.DataFrame:
    """Hand-written result rows as results.load gives them: rows without trait columns get the legacy reading."""
    return results.with_traits(pd.DataFrame(*args, **kwargs))


def row(**fields):
    base = {
        "run_id": "r1",
        "host": "h1",
        "engine": "fio",
        "transfer": "CPU_ONLY",
        "pattern": "write",
        "io_size": 1 << 20,
        "threads": 1,
        "iodepth": 8,
        "status": "ok",
        "bytes": 2147483648,
        "seconds": 1.086,
        "seconds_min": 1.086,
        "bw_bytes": 1977424147,
        "bw_min_bytes": 1977424147,
        "bw_max_bytes": 1977424147,
        "iops": 1886.0,
        "lat_mean_us": 4000.0,
        "lat_p99_us": 8000.0,
        "error": None,
        "repetition": 1,
    }
    base.update(fields)
    for bound in ("bw_min_bytes", "bw_max_bytes"):  # one job: its range is the bandwidth itself
        if bound not in fields:
            base[bound] = base["bw_bytes"]
    base["case"] = (
        f"engine={base['engine']},pattern={base['pattern']},io_size={base['io_size']},threads={base['threads']}"
    )
    return base


def test_status_line_matches_the_issue_example():
    # The example in the issue: fio printed this for 2 GiB written in 1086 ms.
    assert status_line(row()) == (
        "  WRITE: bw=1886MiB/s (1977MB/s), 1886MiB/s-1886MiB/s (1977MB/s-1977MB/s), "
        "io=2048MiB (2147MB), run=1086-1086msec"
    )


def test_status_line_of_a_checkpoint_row_uses_its_direction():
    line = status_line(
        row(
            engine="fastpersist",
            pattern="load",
            bw_min_bytes=None,
            bw_max_bytes=None,
            seconds_min=None,
            bw_bytes=2.5e9,
            bytes=4 << 30,
            seconds=1.718,
        )
    )
    assert line.startswith("   LOAD: bw=2384MiB/s (2500MB/s), 2384MiB/s-2384MiB/s") and line.endswith(
        "run=1718-1718msec"
    )


def frame():
    rows = [
        row(repetition=1, bw_bytes=100 << 20),
        row(repetition=2, bw_bytes=120 << 20),
        row(repetition=3, bw_bytes=110 << 20),
        row(threads=4, repetition=1, bw_bytes=300 << 20),
        row(threads=4, repetition=2, bw_bytes=310 << 20),
        row(threads=4, repetition=3, bw_bytes=290 << 20),
        row(
            pattern="randread",
            transfer="GPU_BATCH",
            status="skipped",
            repetition=0,
            error="skipped: fio has no GPU_BATCH transfer",
        ),
    ]
    return rows_of(rows)


def test_aggregate_medians_and_ranges():
    table = summary.aggregate(frame(), ["threads"])
    assert table["n"].tolist() == [3, 3]
    assert table["bw_median"].tolist() == [110 << 20, 300 << 20]
    assert table["bw_min"].tolist() == [100 << 20, 290 << 20]
    assert table["bw_max"].tolist() == [120 << 20, 310 << 20]


def test_default_groups_are_the_varying_parameters():
    assert summary.default_groups(frame()) == ["transfer", "pattern", "threads"]
    merged = pd.concat([frame(), frame().assign(host="h2")])
    assert summary.default_groups(merged)[0] == "host"


def test_markdown_report():
    text = report.render(frame(), ["threads"], "markdown")
    assert text.startswith(
        "### Run status, fio style (median repetition; the lower of two middle ones)\n\n```\n# threads=1\n"
    )
    assert "# threads=1\n  WRITE: bw=110MiB/s (115MB/s), 110MiB/s-110MiB/s (115MB/s-115MB/s)," in text
    assert (
        textwrap.dedent("""\
        | threads | n | bw (median) | min-max | IOPS | lat mean | lat p99 |
        |---|---|---|---|---|---|---|
        | 1 | 3 | 110MiB/s (115MB/s) | 100-120MiB/s | 1886 | 4000us | 8000us |
        | 4 | 3 | 300MiB/s (315MB/s) | 290-310MiB/s | 1886 | 4000us | 8000us |
        """)
        in text
    )
    assert "- skipped: engine=fio,pattern=randread,io_size=1M,threads=1: skipped: fio has no GPU_BATCH transfer" in text


def test_text_report_has_lines_table_and_warnings():
    text = report.render(frame(), None, "text")
    assert "  WRITE: bw=300MiB/s (315MB/s)" in text
    assert "Results: median and min-max over repetitions" in text
    assert "300MiB/s (315MB/s)" in text
    assert "skipped:" in text


def test_csv_report_is_the_aggregate():
    text = report.render(frame(), ["threads"], "csv")
    assert text.splitlines()[0].startswith("threads,n,bw_median,bw_min,bw_max")
    assert text.splitlines()[1].startswith(f"1,3,{110 << 20}")


def test_unknown_group_column_is_a_usage_error():
    with pytest.raises(UsageError, match="--by: no column treads"):
        report.render(frame(), ["treads"], "text")


def test_ceiling_ratios_against_fio_and_torch_save():
    rows = [
        row(pattern="write", bw_bytes=2000),
        row(pattern="read", bw_bytes=1000),
        row(pattern="write", transfer="CPU_CACHED", bw_bytes=9000),
        row(engine="fastpersist", pattern="save", bw_bytes=1900, io_size=None),
        row(engine="torch_save", pattern="save", bw_bytes=250, io_size=None),
        row(engine="fastpersist", pattern="load", bw_bytes=950, io_size=None),
    ]
    ratios = ceilings.ceiling_ratios(rows_of(rows)).set_index(["engine", "pattern"])
    assert ratios.loc[("fastpersist", "save"), "x_fio"] == pytest.approx(0.95)
    assert ratios.loc[("fastpersist", "save"), "x_torch_save"] == pytest.approx(7.6)
    assert ratios.loc[("fastpersist", "load"), "x_fio"] == pytest.approx(0.95)
    assert ratios.loc[("torch_save", "save"), "x_fio"] == pytest.approx(0.125)


def test_variants_of_one_engine_are_kept_apart():
    rows = [
        row(pattern="read", bw_bytes=1000),
        row(engine="fastpersist", pattern="load", bw_bytes=700, io_size=None, load_into=False),
        row(engine="fastpersist", pattern="load", bw_bytes=2000, io_size=None, load_into=True),
        row(engine="torch_save", pattern="load", bw_bytes=400, io_size=None, load_into=None),
    ]
    ratios = ceilings.ceiling_ratios(rows_of(rows)).set_index("engine")
    assert ratios.loc["fastpersist (load_into=True)", "x_fio"] == pytest.approx(2.0)
    assert ratios.loc["fastpersist (load_into=False)", "x_torch_save"] == pytest.approx(1.75)
    assert ratios.loc["torch_save", "x_fio"] == pytest.approx(0.4)


def test_loads_are_compared_with_torch_save_in_the_same_memory_state():
    """A load after idle is divided by torch.load after idle, not by torch.load in another state;
    integral parameters read back as floats are labelled as written (threads=4, not 4.0)."""
    rows = [
        row(pattern="read", bw_bytes=1000),
        row(engine="fastpersist", pattern="load", bw_bytes=2000, io_size=None, memory="recent", threads=4),
        row(engine="fastpersist", pattern="load", bw_bytes=900, io_size=None, memory="idle", threads=4),
        row(engine="torch_save", pattern="load", bw_bytes=1000, io_size=None, memory="recent", threads=None),
        row(engine="torch_save", pattern="load", bw_bytes=300, io_size=None, memory="idle", threads=None),
    ]
    frame = rows_of(rows)
    frame["threads"] = frame["threads"].astype(float)  # as a CSV column with gaps reads back
    ratios = ceilings.ceiling_ratios(frame).set_index("engine")
    assert ratios.loc["fastpersist (memory=idle)", "x_torch_save"] == pytest.approx(3.0)
    assert ratios.loc["fastpersist (memory=recent)", "x_torch_save"] == pytest.approx(2.0)
    assert ratios.loc["torch_save (memory=idle)", "x_torch_save"] == pytest.approx(1.0)
    variants = frame[frame["engine"] == "fastpersist"].assign(memory="recent", threads=[4.0, 8.0])
    assert list(ceilings.engine_labels(variants)) == ["fastpersist (threads=4)", "fastpersist (threads=8)"]


def durable_run(*extra):
    """A run with fio's direct writes with and without end_fsync, a page-cache write, a read, and saves/loads."""
    return rows_of(
        [
            row(pattern="write", bw_bytes=2500, end_fsync=False),  # the host's write-back cache
            row(pattern="write", bw_bytes=800, end_fsync=True),  # durable: the save ceiling
            row(pattern="write", bw_bytes=700, end_fsync=True, threads=4),
            row(pattern="write", transfer="CPU_CACHED", bw_bytes=9000, end_fsync=True),  # memory, never a ceiling
            row(pattern="read", bw_bytes=1000, end_fsync=False),
            row(engine="fastpersist", pattern="save", bw_bytes=760, io_size=None, end_fsync=None),
            row(engine="torch_save", pattern="save", bw_bytes=400, io_size=None, end_fsync=None),
            row(engine="fastpersist", pattern="load", bw_bytes=900, io_size=None, end_fsync=None),
            *extra,
        ]
    )


def test_the_save_ceiling_is_fios_best_durable_write():
    ratios = ceilings.ceiling_ratios(durable_run()).set_index(["engine", "pattern"])
    save = ratios.loc[("fastpersist", "save")]
    assert (save["fio_bw"], save["fio_no_fsync_bw"], save["ceiling"], save["durable"]) == (
        800,
        2500,
        "fio durable write",
        True,
    )
    assert save["x_fio"] == pytest.approx(0.95) and save["x_fio_no_fsync"] == pytest.approx(760 / 2500)
    assert save["x_torch_save"] == pytest.approx(1.9)
    load = ratios.loc[("fastpersist", "load")]
    assert (load["fio_bw"], load["ceiling"], load["x_fio"]) == (1000, "fio read", pytest.approx(0.9))
    assert pd.isna(load["x_fio_no_fsync"])
    assert ceilings.warnings(ceilings.ceiling_ratios(durable_run())) == []


def test_fio_on_a_ceph_cluster_is_never_a_checkpoints_ceiling():
    """RADOS objects and RBD images are not the directory the checkpoint's files are in."""
    cluster = [
        row(pattern=p, bw_bytes=9000, end_fsync=True, ioengine=e, threads=t)
        for p in ("write", "read")
        for e, t in (("rados", 8), ("rbd", 9))
    ]
    frame = durable_run(*cluster).assign(ioengine=lambda f: f["ioengine"].fillna("libaio"))
    ratios = ceilings.ceiling_ratios(frame).set_index(["engine", "pattern"])
    assert (
        ratios.loc[("fastpersist", "save"), "fio_bw"] == 800 and ratios.loc[("fastpersist", "load"), "fio_bw"] == 1000
    )


def test_end_fsync_as_a_csv_reads_it_back_counts(tmp_path):
    """end_fsync comes back from a results CSV as True/False/NaN objects (checkpoint rows leave it empty)."""
    path = tmp_path / "r.csv"
    durable_run().to_csv(path, index=False)
    frame = pd.read_csv(path)
    assert ceilings.ceiling_ratios(frame).set_index("engine").loc["fastpersist", "fio_bw"].tolist() == [800, 1000]


def test_without_a_durable_write_saves_fall_back_to_the_labelled_non_durable_one():
    frame = durable_run()
    frame = frame[~((frame["engine"] == "fio") & (frame["end_fsync"] == True))]  # noqa: E712
    ratios = ceilings.ceiling_ratios(frame)
    save = ratios.set_index(["engine", "pattern"]).loc[("fastpersist", "save")]
    assert (save["fio_bw"], save["ceiling"], save["durable"]) == (2500, "fio write (no fsync)", False)
    assert save["x_fio"] == pytest.approx(760 / 2500)
    [warning] = ceilings.warnings(ratios)
    assert warning.startswith(
        "run r1 on h1 has no durable fio write (end_fsync=1); saves are compared with fio's write"
    )
    text = report.render(frame, ["engine", "pattern"], "text")
    assert f"warning: {warning}" in text
    assert "2500B/s (2500B/s), no fsync" in text


def test_the_report_shows_both_save_ceilings():
    text = report.render(durable_run(), ["engine", "pattern", "end_fsync"], "markdown")
    table = text[text.index("### Checkpoint engines against the fio ceiling of the same run") :]
    assert (
        textwrap.dedent("""\
        | engine | pattern | n | bw (median) | x fio best | x fio best (no fsync) | x torch_save best | ceiling |
        |---|---|---|---|---|---|---|---|
        | fastpersist | save | 1 | 760B/s (760B/s) | 0.95 | 0.30 | 1.90 | 800B/s (800B/s), durable |
        | torch_save | save | 1 | 400B/s (400B/s) | 0.50 | 0.16 | 1.00 | 800B/s (800B/s), durable |
        | fastpersist | load | 1 | 900B/s (900B/s) | 0.90 | - | - | 1000B/s (1000B/s) |
        """)
        in table
    )
    assert "no durable fio write" not in text


def test_every_format_renders_the_sections_in_the_reports_order():
    from gdsbench.report import html

    frame = durable_run(row(pattern="randread", status="failed", error="fio failed: boom", repetition=1))
    built = summary.build(frame, ["engine", "pattern"])
    titles = [section.title for section in built.sections]
    assert titles == [
        "Run status, fio style (median repetition; the lower of two middle ones)",
        "Results: median and min-max over repetitions, storage I/O",
        "Results: median and min-max over repetitions, checkpoints",
        "Checkpoint engines against the fio ceiling of the same run",
        "Notes",
    ]
    page = html.page(frame.assign(source="r.csv"), ["engine", "pattern"], figures=[])
    for text in (
        report.render(frame, ["engine", "pattern"], "text"),
        report.render(frame, ["engine", "pattern"], "markdown"),
    ):
        where = [text.index(title) for title in titles]
        assert where == sorted(where)
    # the page puts the answer first: the headline and the tables in the report's order, fio's status text after
    where = [page.index(title) for title in ["<h2>Headline</h2>", *titles[1:], titles[0]]]
    assert where == sorted(where)
    assert "failed: engine=fio,pattern=randread" in page


def test_a_derived_table_declared_once_reaches_every_format(monkeypatch):
    """A derived table is one declaration (report/derived.py) registered in summary.DERIVED: its title, cells,
    legend and notes show in the text, markdown and HTML reports, its figures under its name in the json one."""
    import json

    from gdsbench.report import html
    from gdsbench.report.derived import Derived, Inputs

    def compute(inputs: Inputs) -> pd.DataFrame:
        ok = inputs.frame[inputs.frame["status"] == "ok"]
        return ok.groupby("pattern", as_index=False)["bw_bytes"].max()

    def rows(found: pd.DataFrame, labels: dict[str, str]) -> tuple[list[str], list[list[str]]]:
        return ["pattern", "best B/s"], [[r.pattern, f"{r.bw_bytes:.0f}"] for r in found.itertuples()]

    best = Derived(
        "best",
        "Best of each pattern",
        compute,
        rows,
        "pattern",
        {"best B/s": "the fastest row"},
        lambda found, labels: [f"{len(found)} patterns ranked"],
    )
    monkeypatch.setattr(summary, "DERIVED", (*summary.DERIVED, best))
    frame = durable_run()
    built = summary.build(frame, ["engine", "pattern"])
    names = ["ceilings", "mlperf_geometry", "nodes", "goodput", "ladder", "faults", "cpu_cost", "best"]
    assert [d.name for d in built.derived] == names
    table = built.table("best")
    assert table is not None and table.rows == (("load", "900"), ("read", "1000"), ("save", "760"), ("write", "9000"))
    page = html.page(frame.assign(source="r.csv"), ["engine", "pattern"], figures=[])
    for text in (report.render(frame, ["engine", "pattern"], fmt) for fmt in ("text", "markdown")):
        assert "Best of each pattern" in text and "the fastest row" in text and "4 patterns ranked" in text
    assert "Best of each pattern" in page and "<td>760</td>" in page.replace(' class="l"', "")
    document = json.loads(report.render(frame, ["engine", "pattern"], "json"))
    assert [(r["pattern"], r["bw_bytes"]) for r in document["best"]] == [
        ("load", 900),
        ("read", 1000),
        ("save", 760),
        ("write", 9000),
    ]
    assert document["units"]["bw_bytes"] == "bytes/s" and document["goodput"] == []


def test_formats_are_the_modules_that_register_themselves():
    import pkgutil

    from gdsbench.cli import report as report_command
    from gdsbench.report import formats

    modules = sorted(m.name for m in pkgutil.iter_modules(formats.__path__))
    assert sorted(report.format_names()) == modules == ["csv", "json", "markdown", "text"]
    assert all(report.renderer(name).__module__ == f"gdsbench.report.formats.{name}" for name in modules)
    [option] = [p for p in report_command.params if p.name == "fmt"]
    assert list(option.type.choices) == list(report.format_names())
    with pytest.raises(UsageError, match="--format: expected one of csv, json, markdown, text"):
        report.renderer("yaml")


def test_by_never_pools_reads_with_writes_and_names_what_it_pooled():
    """`--by transfer,io_size` on reads and writes at 1 and 4 threads: pattern stays apart, and the notes say
    that threads were pooled (the README's example silently pooled both before)."""
    rows = [
        row(pattern=pattern, threads=threads, repetition=rep, bw_bytes=bw * threads, transfer="CPU_ONLY")
        for pattern, bw in (("read", 100 << 20), ("write", 10 << 20))
        for threads in (1, 4)
        for rep in (1, 2, 3)
    ]
    built = summary.build(rows_of(rows), ["transfer", "io_size"])
    assert built.groups[0] == "pattern" and len(built.summary) == 2
    notes = "\n".join(built.notes.warnings)
    assert "also grouped by pattern (never pooled)" in notes and "pools rows over threads (1, 4)" in notes


def test_checkpoints_to_s3_are_held_to_the_s3_engines_put_and_get_of_their_run() -> None:
    """s3torchconnector's engines in a recorded run against radosgw (results/sample/s3-checkpoints): their ceiling
    is the s3 engine's best PUT or GET of the same run, never fio's; the table says which."""
    from pathlib import Path

    from gdsbench import results

    frame = results.load(sorted((Path(__file__).parent.parent / "results/sample/s3-checkpoints").glob("*.csv")))
    ratios = ceilings.ceiling_ratios(frame)
    assert set(ratios["engine"].str.split(" ").str[0]) == {"s3torch_save", "s3torch_dcp"}
    for (run_id, pattern), group in ratios.groupby(["run_id", "pattern"]):
        s3 = frame[(frame["run_id"] == run_id) & (frame["engine"] == "s3") & (frame["status"] == "ok")]
        best = (
            s3[s3["pattern"] == {"save": "write", "load": "read"}[pattern]].groupby("case")["bw_bytes"].median().max()
        )
        assert (group["fio_bw"] == best).all() and set(group["ceiling"]) == {
            "s3 PUT" if pattern == "save" else "s3 GET"
        }
        assert (group["x_s3"] == group["bw_median"] / best).all() and group["durable"].all()
        assert group["x_fio"].isna().all()  # not a ratio to fio: the x s3 best column holds it
    text = report.render(frame, None, "text")
    assert ", s3 PUT" in text and ", s3 GET" in text
    from gdsbench.report import cpu_cost

    costs = cpu_cost.cpu_costs(frame, {}).set_index(["run_id", "engine", "pattern"])
    for (run_id, engine, pattern), row in ratios.set_index(["run_id", "engine", "pattern"]).iterrows():
        assert costs.loc[(run_id, engine, pattern), "fio_bw"] == row["fio_bw"]  # the same s3 ceiling in both tables
