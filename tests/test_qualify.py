"""`gdsbench qualify`: checks from configs judged against real results, JUnit XML validated by an XSD."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gdsbench import config, qualify, results
from gdsbench.cli import cli
from gdsbench.errors import ConfigError
from tests.helpers import assert_exits

ROOT = Path(__file__).parents[1]
SAMPLE = sorted((ROOT / "results" / "sample").glob("*.csv"))[0]
LOCAL = ROOT / "configs" / "qualify-local.yaml"
SCHEMA = ROOT / "tests" / "data" / "junit" / "jenkins-junit.xsd"


def config_with(tmp_path: Path, checks: list, **settings) -> Path:
    """qualify-local.yaml with other checks (and settings), written to tmp_path."""
    document = {**yaml.safe_load(LOCAL.read_text()), **settings, "checks": checks}
    path = tmp_path / "qualify-test.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def run(*args: str):
    """Invoke the CLI."""
    return CliRunner().invoke(cli, list(args))


def suite(path: Path) -> ET.Element:
    """The JUnit file, validated against the Jenkins-shaped XSD, as its <testsuite> (skipped without xmlschema)."""
    xmlschema = pytest.importorskip("xmlschema", reason="the JUnit schema check: pip install 'gdsbench[test]'")
    xmlschema.XMLSchema(SCHEMA).validate(str(path))
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return root.find("testsuite")


def test_shipped_local_config_passes_on_the_sample(tmp_path: Path) -> None:
    junit = tmp_path / "out" / "qualify.xml"
    result = run("qualify", str(LOCAL), "--results", str(SAMPLE), "--junit", str(junit))
    assert_exits(result, 0)
    assert "6 checks: 5 passed, 0 failed, 0 inconclusive, 1 skipped" in result.output
    assert "PASS seq write 1M x 4 threads, O_DIRECT: 1 case(s), worst 3154MiB/s" in result.output
    node = suite(junit)
    assert {k: node.get(k) for k in ("name", "tests", "failures", "errors", "skipped", "hostname")} == {
        "name": "qualify-local",
        "tests": "6",
        "failures": "0",
        "errors": "0",
        "skipped": "1",
        "hostname": "vm",
    }
    cases = node.findall("testcase")
    assert next(c.get("name") for c in cases) == "seq write 1M x 4 threads, O_DIRECT"
    skipped = [c for c in cases if c.find("skipped") is not None]
    assert len(skipped) == 1 and "no libcufile engine for GDS" in skipped[0].find("skipped").get("message")
    assert float(node.get("time")) == pytest.approx(sum(float(c.get("time")) for c in cases), abs=0.01)


def test_failures_missing_rows_and_ratios_fail_with_messages(tmp_path: Path) -> None:
    checks = [
        {"name": "too fast to be true", "where": {"pattern": "read", "transfer": "CPU_ONLY"}, "min_bw": "100GiB/s"},
        {"name": "nothing there", "where": {"pattern": "randread"}, "min_bw": "1MiB/s"},
        {
            "name": "cache 5x direct",
            "where": {"pattern": "read", "io_size": "1M"},
            "ratio": {"of": {"transfer": "CPU_CACHED"}, "to": {"transfer": "CPU_ONLY"}, "min": 5},
        },
        {
            "name": "latency",
            "where": {"pattern": "write", "transfer": "CPU_ONLY", "io_size": "16M"},
            "max_lat_p99": "1ms",
        },
        {"name": "fine", "where": {"pattern": "write", "io_size": "4K", "threads": 1}, "min_iops": 1000},
    ]
    junit = tmp_path / "q.xml"
    result = run("qualify", str(config_with(tmp_path, checks)), "--results", str(SAMPLE), "--junit", str(junit))
    assert_exits(result, 1)
    assert "FAIL too fast to be true: 8 of 8 case(s) miss >= 100GiB/s" in result.output
    assert "FAIL nothing there: no rows match pattern=randread" in result.output
    assert (
        "FAIL cache 5x direct: transfer=CPU_CACHED / transfer=CPU_ONLY: 2 of 2 ratio(s) outside >= 5" in result.output
    )
    assert "FAIL latency: 2 of 2 case(s) miss <= 1000us" in result.output
    assert "PASS fine" in result.output
    node = suite(junit)
    assert (node.get("tests"), node.get("failures"), node.get("skipped")) == ("5", "4", "0")
    failure = node.find("testcase[@name='nothing there']/failure")
    assert failure is not None and failure.get("message").startswith("no rows match pattern=randread")


def test_baseline_same_host_passes_other_host_fails(tmp_path: Path) -> None:
    other = tmp_path / "other-host.csv"
    results.load([SAMPLE]).drop(columns="source").assign(host="elsewhere").to_csv(other, index=False)
    shutil.copy(SAMPLE, tmp_path / "base.csv")
    checks = [
        {"name": "vs own baseline", "where": {"transfer": "CPU_ONLY"}, "baseline": "base.csv", "min_ratio": 0.9},
        {"name": "vs other host", "where": {"transfer": "CPU_ONLY"}, "baseline": str(other), "min_ratio": 0.9},
    ]
    result = run("qualify", str(config_with(tmp_path, checks)), "--results", str(SAMPLE))
    assert_exits(result, 1)
    assert "PASS vs own baseline: new / baseline base.csv: 16 ratio(s) 1.00x-1.00x, all >= 0.9" in result.output
    assert f"FAIL vs other host: baseline {other} is from host elsewhere but these results are from vm" in result.output


def test_ratio_between_rows_pairs_same_parameters() -> None:
    frame = results.load([SAMPLE])
    check = qualify.parse_check(
        "x.yaml",
        "checks[0]",
        {
            "where": {"pattern": "write"},
            "ratio": {"of": {"transfer": "CPU_CACHED"}, "to": {"transfer": "CPU_ONLY"}, "max": 100},
        },
    )
    outcome = qualify.evaluate(check, frame)
    assert outcome.status == "pass" and "8 ratio(s)" in outcome.message
    ok = frame[
        (frame["status"] == "ok") & (frame["pattern"] == "write") & (frame["io_size"] == 4096) & (frame["threads"] == 1)
    ]
    expected = (
        ok[ok["transfer"] == "CPU_CACHED"]["bw_bytes"].median() / ok[ok["transfer"] == "CPU_ONLY"]["bw_bytes"].median()
    )
    assert f"{expected:.3f}x" in outcome.details


@pytest.mark.parametrize(
    "entry, key",
    [
        ("not a mapping", "checks[0]"),
        ({"where": {"pattern": "read"}, "min_bw": "fast"}, "checks[0].min_bw"),
        ({"where": {"pattern": "read"}, "min_bw": "200MiB"}, "checks[0].min_bw"),
        ({"where": {"pattern": "read"}, "max_lat_p99": "soon"}, "checks[0].max_lat_p99"),
        ({"where": {"colour": "red"}, "min_bw": "1GiB/s"}, "checks[0].where.colour"),
        ({"where": {"transfer": "FLOPPY"}, "min_bw": "1GiB/s"}, "checks[0].where.transfer"),
        ({"where": {"io_size": "huge"}, "min_bw": "1GiB/s"}, "checks[0].where.io_size"),
        ({"where": {"pattern": "read"}, "min_bw": "1GiB/s", "max_lat_p99": "2ms"}, "checks[0]"),
        ({"where": {"pattern": "read"}}, "checks[0]"),
        ({"where": {"pattern": "read"}, "min_bw": "1GiB/s", "speed": 3}, "checks[0].speed"),
        ({"where": {"pattern": "read"}, "ratio": {"of": {"transfer": "GDS"}, "min": 1.5}}, "checks[0].ratio"),
        (
            {"where": {"pattern": "read"}, "ratio": {"of": {"transfer": "GDS"}, "to": {"transfer": "CPU_GPU"}}},
            "checks[0].ratio",
        ),
        (
            {
                "where": {"pattern": "read"},
                "ratio": {"of": {"transfer": "GDS"}, "to": {"transfer": "CPU_GPU"}, "min": -1},
            },
            "checks[0].ratio.min",
        ),
        ({"where": {"pattern": "read"}, "baseline": "missing.csv", "min_ratio": 0.9}, "checks[0].baseline"),
        ({"where": {"pattern": "read"}, "min_bw": "1GiB/s", "min_ratio": 0.9}, "checks[0].min_ratio"),
    ],
)
def test_bad_checks_name_file_and_key(tmp_path: Path, entry, key: str) -> None:
    path = config_with(tmp_path, [entry])
    with pytest.raises(ConfigError) as caught:
        qualify.parse_checks(str(path), list(config.load(path).checks))
    assert caught.value.key == key and caught.value.file == str(path)
    result = run("qualify", str(path), "--results", str(SAMPLE))
    assert_exits(result, 2, one_line_error=True)
    assert result.output.startswith(f"gdsbench: error: {path}: {key}: expected")


def test_config_without_checks_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "none.yaml"
    document = yaml.safe_load(LOCAL.read_text())
    del document["checks"]
    path.write_text(yaml.safe_dump(document))
    result = run("qualify", str(path), "--results", str(SAMPLE))
    assert_exits(result, 2, one_line_error=True)
    assert f"{path}: checks: expected a non-empty list of checks" in result.output


def test_shipped_h200_config_validates() -> None:
    path = ROOT / "configs" / "qualify-h200.yaml"
    checks = qualify.parse_checks(str(path), list(config.load(path).checks))
    assert {c.kind for c in checks} == {"min_bw", "ratio", "max_lat_mean"}
    assert "starting points" in path.read_text().lower()


@pytest.mark.needs_fio
@pytest.mark.needs_odirect
def test_qualify_runs_the_sweep_with_real_fio(tmp_path: Path) -> None:
    # the suite runs beside this sweep: busy_machine is expected and allowed here (tests/test_gate_truth.py judges it)
    checks = [
        {"name": "seq write works", "where": {"pattern": "write"}, "min_bw": "1MiB/s", "allow_flags": ["busy_machine"]}
    ]
    path = config_with(
        tmp_path,
        checks,
        name="tiny",
        directory=str(tmp_path / "target"),
        file_size="16M",
        runtime="1s",
        repetitions=1,
        matrix={
            "engine": ["fio"],
            "pattern": ["write"],
            "io_size": ["1M"],
            "threads": [1],
            "iodepth": [4],
            "transfer": ["CPU_ONLY"],
        },
    )
    junit = tmp_path / "q.xml"
    result = run("qualify", str(path), "-o", str(tmp_path / "res"), "--junit", str(junit))
    assert_exits(result, 0)
    written = list((tmp_path / "res").glob("tiny-*.csv"))
    assert len(written) == 1 and results.sidecar_path(written[0]).exists()
    frame = results.load(written)
    assert frame["status"].tolist() == ["ok"] and frame["bw_bytes"].iloc[0] > 2**20
    assert "PASS seq write works: 1 case(s)" in result.output
    assert suite(junit).get("failures") == "0"


CHECKPOINT_SAMPLE = ROOT / "results" / "sample" / "checkpoint" / "checkpoint-20261122-050204.csv"


def test_where_is_parsed_with_the_configs_own_keys(tmp_path: Path) -> None:
    """Sizes, booleans and runner options in where: are parsed as the matrix parses them, so they match
    the columns a real checkpoint results file holds (checkpoint_size 4294967296, recycle True)."""
    checks = [
        {
            "name": "recycled 4G saves",
            "where": {"engine": "fastpersist", "pattern": "save", "checkpoint_size": "4G", "recycle": True},
            "min_bw": "2GiB/s",
        },
        {
            "name": "4096M is 4G",
            "where": {"pattern": "load", "checkpoint_size": "4096M", "memory": "idle"},
            "min_bw": "100MiB/s",
        },
        {"name": "no 2G run", "where": {"pattern": "save", "checkpoint_size": "2G"}, "min_bw": "1MiB/s"},
    ]
    # The sample's repetitions swing 2x (flagged unstable); this test is about where:, so it allows the flag.
    document = {
        **yaml.safe_load((ROOT / "configs" / "checkpoint.yaml").read_text()),
        "checks": checks,
        "allow_flags": ["unstable"],
    }
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(document))
    result = run("qualify", str(path), "--results", str(CHECKPOINT_SAMPLE))
    assert_exits(result, 1)
    assert "PASS recycled 4G saves: 1 case(s), worst 3477MiB/s (3646MB/s) >= 2048MiB/s" in result.output
    assert "PASS 4G is 4096M" not in result.output and "PASS 4096M is 4G: 5 case(s)" in result.output
    assert "FAIL no 2G run: no rows match checkpoint_size=2G pattern=save" in result.output


@pytest.mark.parametrize(
    "where, key",
    [
        ({"checkpoint_size": "huge"}, "checks[0].where.checkpoint_size"),
        ({"recycle": "yes"}, "checks[0].where.recycle"),
        ({"io_size": None}, "checks[0].where.io_size"),
        ({"fio": "/usr/bin/fio"}, "checks[0].where.fio"),  # a tool path is a setting, not a results column
    ],
)
def test_bad_where_values_name_the_key(where: dict, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        qualify.parse_check("q.yaml", "checks[0]", {"where": where, "min_bw": "1GiB/s"})
    assert caught.value.key == key


def test_a_where_key_typo_is_told_the_nearest_column() -> None:
    with pytest.raises(ConfigError) as caught:
        qualify.parse_check("q.yaml", "checks[0]", {"where": {"engnie": "fio"}, "min_bw": "1GiB/s"})
    assert caught.value.expected == "a parameter column (did you mean engine?)"


def fastpersist_loads_judged(tmp_path: Path, min_bw: str, *more: str) -> tuple[str, Path, int]:
    """qualify the checkpoint sample's fastpersist loads (flagged unstable) against `min_bw`: the check's line,
    the JUnit file and the exit status."""
    checks = [{"name": "saves", "where": {"pattern": "load", "engine": "fastpersist"}, "min_bw": min_bw}]
    document = {**yaml.safe_load((ROOT / "configs" / "checkpoint.yaml").read_text()), "checks": checks}
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(document))
    junit = tmp_path / "q.xml"
    result = run("qualify", str(path), "--results", str(CHECKPOINT_SAMPLE), "--junit", str(junit), *more)
    return next(line for line in result.output.splitlines() if " saves:" in line), junit, result.exit_code


def test_a_flagged_check_is_inconclusive_saying_what_was_measured_which_flag_where_and_the_line_to_add(
    tmp_path: Path,
) -> None:
    """The checkpoint sample's repetitions swing (flagged unstable) though every value passes: the check is neither
    passed nor failed but INCONCLUSIVE (it failed as Flagged before: a gate failing for the wrong reason), with the
    measured value, the flag, the row, the remedy and the exact allow_flags line. Nothing passed, so the gate exits
    3 even without --strict; JUnit has a skipped case, or with --strict a failure of type Inconclusive."""
    line, junit, status = fastpersist_loads_judged(tmp_path, "1MiB/s")
    assert line.startswith("INCONCLUSIVE saves: inconclusive: flagged unstable on") and status == 3
    assert "rep " in line and "(measured: " in line and "worst " in line and "would pass" in line
    assert "add `allow_flags: [unstable]` to this check" in line and "[...]" not in line
    assert "remedy: add warmup runs" in line
    case = suite(junit).find("testcase")
    assert case is not None and case.find("failure") is None and case.find("skipped") is not None
    line, junit, status = fastpersist_loads_judged(tmp_path, "1MiB/s", "--strict")
    failure = suite(junit).find("testcase/failure")
    assert status == 3 and failure is not None and failure.get("type") == "Inconclusive"


def test_a_flagged_check_that_missed_its_threshold_is_inconclusive_too_never_a_fail(tmp_path: Path) -> None:
    """The same unstable rows under a threshold none of them reaches: inconclusive, saying it would fail; the
    measurement that says it cannot be trusted decides nothing either way."""
    line, _, status = fastpersist_loads_judged(tmp_path, "1000GiB/s")
    assert line.startswith("INCONCLUSIVE saves:") and "5 of 5 case(s) miss >= 1000GiB/s" in line
    assert "would fail" in line and status == 3
