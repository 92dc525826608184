"""ckptio's engines in S3 (issue 33): fastpersist and dcp_fast save and load `s3://bucket/<fresh prefix>` where a
case's block names a bucket, against the test cluster's radosgw (real ckptio, real daemons): the loads verified,
the prefix gone after each run, what the sweep did not write kept; their rows held to the s3 engine's PUT and GET
beside the same engine's local rows held to fio; bad keys one line of config error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gdsbench import config
from gdsbench.cases import Case
from gdsbench.compare import match_key
from gdsbench.report import ceilings
from gdsbench.runners import get
from gdsbench.runners.base import Measurement, RunContext, check_figures
from gdsbench.runners.s3_client import Bucket
from tests.ceph_cluster import ceph_cluster, radosgw  # noqa: F401
from tests.helpers import assert_exits, write_config

MiB = 1 << 20


def case_of(engine: str, pattern: str, **params: Any) -> Case:
    """A case as a config makes it: 4 MiB of llama3-8b, warm loads, free memory as it is."""
    matrix = {
        "engine": [engine],
        "pattern": [pattern],
        "checkpoint_size": ["4M"],
        "cache": ["warm"],
        "memory": ["as-is"],
        "transfer": ["CPU_ONLY"],
        **{k: [v] for k, v in params.items()},
    }
    [case] = config.from_dict({"matrix": matrix}, "s3.yaml").cases
    return case


# -- configs and rows ---------------------------------------------------------------------------------------------


def test_a_blocks_bucket_sends_a_case_to_s3_and_a_top_level_one_does_not(tmp_path: Path) -> None:
    """The sweep's `bucket:` is its S3 engines'; a ckptio engine goes to S3 where its own block names one."""
    blocks = [
        {"engine": ["fastpersist", "dcp_fast"], "pattern": ["save"]},
        {"engine": ["fastpersist"], "pattern": ["save"], "bucket": ["ckpts"]},
    ]
    cases = config.load(write_config(tmp_path, bucket="shared", matrix=blocks)).cases
    assert [(c.engine, c["bucket"]) for c in cases] == [
        ("fastpersist", None),
        ("dcp_fast", None),
        ("fastpersist", "ckpts"),
    ]
    traits = [get(c.engine).traits.row(c.row()) for c in cases]
    files, objects = {"stores_on": "files", "ceiling": "fio", "baseline": ""}, {"stores_on": "objects", "ceiling": "s3"}
    assert traits == [files] * 2 + [{**objects, "baseline": ""}]
    again = config.case_from_key(cases[1].key)  # a rank's case, from its key
    assert again == cases[1] and again["bucket"] is None
    assert match_key(cases[0].key, config.case_defaults()) == match_key(
        "engine=fastpersist,pattern=save,transfer=CPU_ONLY,threads=None", config.case_defaults()
    )  # a row written before the engines took a bucket is the same local case


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [("bucket", "Bad_Bucket", "an S3 bucket name"), ("prefix", "../up", "a key prefix of plain names")],
)
def test_a_bad_bucket_or_prefix_is_one_line_and_exit_2(key: str, value: str, said: str, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gdsbench.cli import cli

    matrix = {"engine": ["dcp_fast"], "pattern": ["save"], "bucket": ["ckpts"], key: [value]}
    result = CliRunner().invoke(cli, ["sweep", str(write_config(tmp_path, matrix=matrix)), "--dry-run"])
    assert_exits(result, 2, one_line_error=True)
    assert f"matrix.{key}[0]" in result.output and said in result.output


def test_what_s3_cannot_take_is_skipped_saying_why(credentials: None, tmp_path: Path) -> None:
    ctx = RunContext(directory=tmp_path, file_size=4 * MiB)

    def said(engine: str, pattern: str, **params: Any) -> str:
        return str(get(engine).unavailable(case_of(engine, pattern, bucket="bkt", **params), ctx))

    assert "a checkpoint in S3 is an object" in said("fastpersist", "save", mmap=True)
    assert said("dcp_fast", "train") == "a training loop saving straight to S3 is the tiered engine's (tiers: [s3])"
    assert "a case in S3 saves or loads one checkpoint" in said("dcp_fast", "save", checkpoints=2)
    elsewhere = said("fastpersist", "save", endpoint="http://127.0.0.1:7480")
    assert "ckptio reads its endpoint from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL only" in elsewhere
    argv = get("fastpersist").command(case_of("fastpersist", "load", bucket="bkt"), ctx)
    assert argv[2] == "s3://bkt/gdsbench/fastpersist.*/gdsbench-ckpt.fastpersist.llama3-8b.4M.mixed.s0.pt"
    assert not any("not-shown" in word for word in argv)


def test_one_engines_s3_rows_are_held_to_the_s3_engine_and_its_local_rows_to_fio() -> None:
    """fastpersist in one run on disk (x fio) and in S3 (x s3: the s3 engine's best PUT for saves, GET for loads)."""

    def row(engine: str, pattern: str, bw: float, stores_on: str, ceiling: str, **more: Any) -> dict[str, Any]:
        return {
            "run_id": "r1",
            "host": "h1",
            "case": f"{engine}-{pattern}-{more}",
            "engine": engine,
            "pattern": pattern,
            "transfer": "CPU_ONLY",
            "status": "ok",
            "bw_bytes": bw,
            "stores_on": stores_on,
            "ceiling": ceiling,
            **more,
        }

    frame = pd.DataFrame(
        [
            row("fio", "write", 800.0, "files", "", end_fsync=True),
            row("fio", "read", 1000.0, "files", "", end_fsync=False),
            row("s3", "write", 500.0, "objects", "", io_size=1),
            row("s3", "write", 400.0, "objects", "", io_size=2),
            row("s3", "read", 600.0, "objects", "", io_size=1),
            row("fastpersist", "save", 760.0, "files", "fio"),
            row("fastpersist", "load", 900.0, "files", "fio"),
            row("fastpersist", "save", 450.0, "objects", "s3", bucket="bkt"),
            row("fastpersist", "load", 540.0, "objects", "s3", bucket="bkt"),
        ]
    )
    ratios = ceilings.ceiling_ratios(frame).set_index(["engine", "pattern"])
    local, objects = "fastpersist", "fastpersist (bucket=bkt)"  # a parameter the local case lacks is left out
    assert ratios.loc[(local, "save"), "x_fio"] == pytest.approx(0.95) and pd.isna(ratios.loc[(local, "save"), "x_s3"])
    assert ratios.loc[(local, "load"), "x_fio"] == pytest.approx(0.9)
    assert ratios.loc[(objects, "save"), "x_s3"] == pytest.approx(0.9) and pd.isna(
        ratios.loc[(objects, "save"), "x_fio"]
    )
    assert ratios.loc[(objects, "load"), "x_s3"] == pytest.approx(0.9)
    assert list(ratios.loc[(objects, slice(None)), "ceiling"]) == ["s3 PUT", "s3 GET"]


# -- against the test cluster's radosgw -------------------------------------------------------------------------


def bucket(name: str) -> Bucket:
    return Bucket(os.environ["AWS_ENDPOINT_URL"], name, "us-east-1", 16 * MiB)


def run(case: Case, ctx: RunContext) -> Measurement:
    runner = get(case.engine)
    assert runner.unavailable(case, ctx) is None
    return check_figures(runner, runner.run(case, ctx))


@pytest.mark.slow
def test_fastpersist_saves_one_object_and_loads_it_verified_leaving_only_what_it_found(
    radosgw: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The object holds the bytes a local save writes; each run's prefix is gone when it ends; someone else's
    object and bucket stay."""
    import ckptio

    from gdsbench import workloads
    from gdsbench.runners.checkpoint.base import workload_spec

    name, ctx = "gdsbench-ckptio-fp", RunContext(directory=tmp_path, file_size=4 * MiB)
    theirs = bucket(name)
    theirs.create()
    theirs.put("gdsbench/theirs.ckpt", memoryview(b"someone's"))
    try:
        save = run(case_of("fastpersist", "save", bucket=name), ctx)
        load = run(case_of("fastpersist", "load", bucket=name, load_into=True), ctx)
        assert list(tmp_path.iterdir()) == []  # nothing on disk: the checkpoints were objects
        case = case_of("fastpersist", "save")
        ckptio.save(workloads.get(workload_spec(case, ctx)).tensors, tmp_path / "local.ckpt")
        size = (tmp_path / "local.ckpt").stat().st_size
        assert save.figures["bytes_on_disk"] == load.figures["bytes_on_disk"] == size
        assert load.bytes == save.bytes and load.cache == "warm" and "; verified;" in str(load.note)
        assert save.figures["io_threads"] >= 1 and load.resolved["threads"] == load.figures["io_threads"]
        assert theirs.sizes("") == {"gdsbench/theirs.ckpt": 9}  # every run's prefix gone
        ctx.resources.cleanup()
        assert theirs.sizes("") == {"gdsbench/theirs.ckpt": 9}
    finally:
        theirs.delete("gdsbench/theirs.ckpt")
        theirs.remove()


@pytest.mark.slow
def test_dcp_fast_saves_and_loads_on_a_rank_verified_and_removes_the_bucket_it_made(
    radosgw: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A load with its unmeasured save first (a data object and `.metadata`), verified on the rank."""
    name, ctx = "gdsbench-ckptio-dcp", RunContext(directory=tmp_path, file_size=4 * MiB)
    assert not bucket(name).exists()
    load = run(case_of("dcp_fast", "load", bucket=name), ctx)
    assert list(tmp_path.iterdir()) == []  # nothing on disk: the checkpoint was objects
    assert "verified on every rank" in str(load.note) and "read per rank: " in str(load.note)
    assert load.figures["bytes_on_disk"] > load.bytes > 4 * MiB - 4096
    assert bucket(name).sizes("") == {}  # the run's prefix gone
    ctx.resources.cleanup()
    assert not bucket(name).exists()
