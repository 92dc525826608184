"""Config validation names file, key and expectation; expansion order and filters are pinned."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gdsbench import config
from gdsbench.cases import Pattern, Transfer
from gdsbench.errors import ConfigError
from gdsbench.units import parse_size

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))
BASE = {"name": "t", "directory": "/tmp/x", "matrix": {"engine": ["fio"], "pattern": ["read"]}}


def with_(**changes):
    document = {**BASE, **changes}
    return {k: v for k, v in document.items() if v is not None}


def error_of(document) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config.from_dict(document, "sweep.yaml")
    return info.value


@pytest.mark.parametrize(
    "document,key,expected",
    [
        (with_(runtim="5s"), "runtim", "a known key"),
        (with_(name="../../x"), "name", "a file name"),
        (
            with_(matrix={"engine": ["fio"], "pattern": ["read"], "threads": [100_000_000]}),
            "matrix.threads[0]",
            "an integer from 1 to 4096",
        ),
        (with_(name="/etc/x"), "name", "a file name"),
        (with_(name=".hidden"), "name", "a file name"),
        (with_(file_size="1Q"), "file_size", "a size"),
        (with_(file_size=0), "file_size", "a size"),
        (with_(runtime="soon"), "runtime", "a duration"),
        (with_(repetitions=0), "repetitions", "a positive integer"),
        (with_(matrix={}), "matrix", "non-empty"),
        (with_(matrix=None), "matrix", "non-empty"),
        (
            with_(matrix={"engine": ["fio"], "pattern": ["read"], "transfer": ["CPU_ONY"]}),
            "matrix.transfer[0]",
            "one of GDS",
        ),
        (with_(matrix={"engine": ["fio"], "pattern": ["read"], "io_size": ["4K", "x"]}), "matrix.io_size[1]", "a size"),
        (
            with_(matrix={"engine": ["fio"], "pattern": ["read"], "threads": [1, True]}),
            "matrix.threads[1]",
            "an integer from 1 to 4096",
        ),
        (
            with_(matrix={"engine": ["fio"], "pattern": ["read"], "io_sizes": ["4K"]}),
            "matrix.io_sizes",
            "a matrix axis",
        ),
        (with_(matrix={"engine": ["fio"], "pattern": []}), "matrix.pattern", "a non-empty list"),
        (with_(matrix={"engine": ["nope"], "pattern": ["read"]}), "matrix.engine[0]", "one of fio"),
        (with_(matrix={"pattern": ["read"]}), "matrix.engine", "a list"),
        (with_(matrix=[{"engine": ["fio"], "pattern": ["read"]}, "x"]), "matrix[1]", "a non-empty mapping"),
        (with_(exclude={"pattern": "read"}), "exclude", "a list"),
        (with_(exclude=[{"patern": "read"}]), "exclude[0].patern", "a matrix axis"),
        (with_(exclude=[{"pattern": "read"}]), "matrix", "at least one case left"),
        (with_(ioengine="aio"), "ioengine", "one of libaio"),
        (
            with_(memory="hot", matrix={"engine": ["fastpersist"], "pattern": ["load"]}),
            "memory",
            "one of recent, idle, as-is",
        ),
        (
            with_(matrix={"engine": ["fastpersist"], "pattern": ["save"], "recycle": ["yes please"]}),
            "matrix.recycle[0]",
            "true or false",
        ),
        # null, as a half-edited file has it: an error wherever the key has a default or is a case value
        (with_(matrix={"engine": ["fio"], "pattern": ["read"], "io_size": None}), "matrix.io_size[0]", "a size"),
        (with_(matrix={"engine": ["fio"], "pattern": [None]}), "matrix.pattern[0]", "one of read"),
        (with_(matrix={"engine": ["gdsio"], "pattern": ["read"], "numa_node": [None]}), "matrix.numa_node[0]", "NUMA"),
        (with_(exclude=[{"io_size": None}]), "exclude[0].io_size", "a size"),
        ({**BASE, "directory": None}, "directory", "a directory path"),
        ({**BASE, "repetitions": None}, "repetitions", "a positive integer"),
        ({**BASE, "iomem": None}, "iomem", "a fio iomem type"),
        (with_(checks=5), "checks", "a list of checks"),
        (with_(description=["not", "text"]), "description", "a string"),
        (with_(gpu=[0]), "gpu", "a GPU index"),
        (with_(matrix={"engine": ["fio"], "pattern": ["read"], "gpu": [-1]}), "matrix.gpu[0]", "a GPU index"),
    ],
)
def test_errors_name_file_key_and_expectation(document, key, expected):
    error = error_of(document)
    assert error.file == "sweep.yaml" and error.key == key and expected in error.expected
    assert str(error).startswith(f"sweep.yaml: {key}: expected ")


@pytest.mark.parametrize(
    "document,key,expected",
    [
        (with_(directroy="/tmp/x"), "directroy", "a known key (did you mean directory?)"),
        (
            with_(matrix={"engine": ["fio"], "pattern": ["read"], "io_sise": ["1M"]}),
            "matrix.io_sise",
            "a matrix axis (did you mean io_size?)",
        ),
        (with_(exclude=[{"patern": "read"}]), "exclude[0].patern", "a matrix axis (did you mean pattern?)"),
    ],
)
def test_a_key_typo_is_told_the_nearest_key_not_every_key(document, key, expected):
    error = error_of(document)
    assert (error.key, error.expected) == (key, expected)


def test_a_key_near_none_is_told_where_the_keys_are_listed():
    error = error_of(with_(zzqq=1))
    assert error.expected.startswith("a known key (") and "gdsbench runners" in error.expected
    assert "directory" not in error.expected and len(error.expected) < 120


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nmatrix: [engine: fio\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: \(yaml\): expected valid YAML .*line 3"):
        config.load(path)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="a readable YAML file"):
        config.load(tmp_path / "none.yaml")


def test_expansion_order_is_nested_loops_last_key_fastest():
    document = with_(
        matrix={"engine": ["fio"], "pattern": ["write", "read"], "io_size": ["4K", "1M"], "threads": [1, 4]}
    )
    cases = config.from_dict(document, "s.yaml").cases
    assert [(c.pattern.value, c.get("io_size"), c.get("threads")) for c in cases] == [
        ("write", 4096, 1),
        ("write", 4096, 4),
        ("write", 1 << 20, 1),
        ("write", 1 << 20, 4),
        ("read", 4096, 1),
        ("read", 4096, 4),
        ("read", 1 << 20, 1),
        ("read", 1 << 20, 4),
    ]


def test_exclude_compares_parsed_values_and_defaults_fill_in():
    document = with_(
        matrix={"engine": ["fio"], "pattern": ["randwrite", "read"], "io_size": ["4K", "16M"]},
        exclude=[{"pattern": "randwrite", "io_size": "16384K"}],
        iodepth=None,
        ioengine="io_uring",
    )
    cases = config.from_dict(document, "s.yaml").cases
    assert [(c.pattern, c.get("io_size")) for c in cases] == [
        (Pattern.RANDWRITE, 4096),
        (Pattern.READ, 4096),
        (Pattern.READ, 16 << 20),
    ]
    assert all(
        c.transfer is Transfer.CPU_ONLY and c.get("threads") == 1 and c.get("ioengine") == "io_uring" for c in cases
    )


def test_engines_on_ckptio_leave_the_threads_a_matrix_omits_to_ckptio():
    """A matrix without threads: engines built on ckptio declare it their library's (None in the case: IOOptions()
    picks at run time), the others run at 1; a matrix's threads wins; either case travels as its key."""
    blocks = [
        {"engine": ["fastpersist", "dcp_fast", "dcp", "kvikio"], "pattern": ["save"]},
        {"engine": ["dcp_fast"], "pattern": ["load"], "threads": [2]},
    ]
    cases = config.from_dict(with_(matrix=blocks, checkpoint_size="16M"), "s.yaml").cases
    threads = [(c.engine, c.get("threads")) for c in cases]
    assert threads == [("fastpersist", None), ("dcp_fast", None), ("dcp", 1), ("kvikio", 1), ("dcp_fast", 2)]
    assert all(config.case_from_key(c.key) == c for c in cases)


def test_matrix_blocks_and_duplicates():
    block = {"engine": ["fio"], "pattern": ["read"], "io_size": ["1M"]}
    cases = config.from_dict(with_(matrix=[block, block, {**block, "io_size": ["2M"]}]), "s.yaml").cases
    assert [c.get("io_size") for c in cases] == [1 << 20, 2 << 20]


def test_settings_defaults_and_name_from_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"matrix": BASE["matrix"]}))
    loaded = config.load(path)
    assert loaded.name == "mine" and loaded.repetitions == 3 and loaded.file_size == 1 << 30
    assert loaded.runtime is None and loaded.directory == "/tmp/gdsbench"


@settings(max_examples=200)
@given(st.one_of(st.text(max_size=8), st.integers(min_value=-5, max_value=1 << 40)))
def test_any_io_size_either_parses_or_names_the_key(value):
    document = with_(file_size=1 << 62, matrix={"engine": ["fio"], "pattern": ["read"], "io_size": [value]})
    try:
        expected = parse_size(value)
    except ValueError:
        expected = None
    if expected:
        assert config.from_dict(document, "s.yaml").cases[0].get("io_size") == expected
    else:
        assert error_of(document).key == "matrix.io_size[0]"


KNOWN = set(config.SWEEP_KEYS) | set(config.STRUCTURE_KEYS) | set(config.runners.option_keys())


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(lambda k: k not in KNOWN))
def test_unknown_top_level_keys_are_named(key):
    error = error_of({**BASE, key: 1})
    assert error.key == key and error.expected.startswith("a known key (") and len(error.expected) < 120


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    loaded = config.load(path)
    assert loaded.cases and loaded.name
    assert path.read_text().startswith("#"), "each config opens with a comment saying what it answers"


@pytest.mark.parametrize("engine", ["fio", "gdsio"])
def test_cases_carry_every_axis_of_their_runner_with_its_default(engine):
    runner = config.runners.get(engine)
    case = config.from_dict(with_(matrix={"engine": [engine], "pattern": ["read"]}), "s.yaml").cases[0]
    assert {name for name, _ in case.params} == runner.axes
    options = {key.name: key for key in runner.options}
    assert all(case[name] == options[name].default for name in runner.axes if name in options)
    with pytest.raises(KeyError, match=f"{engine} cases have no parameter 'load_into'"):
        case["load_into"]


def test_tool_paths_are_settings_not_axes():
    fio_runner = config.runners.get("fio")
    assert fio_runner.axes == {"pattern", "transfer", "io_size", "threads", "iodepth"} | {
        key.name for key in fio_runner.options if key.name not in ("fio", "handshake_timeout")
    }
    assert "gdsio" not in config.runners.get("gdsio").axes
    error = error_of(with_(matrix={"engine": ["fio"], "pattern": ["read"], "fio": ["/usr/bin/fio"]}))
    assert error.key == "matrix.fio" and "a matrix axis" in error.expected
    assert config.from_dict(with_(fio="/usr/bin/fio"), "s.yaml").options == {"fio": "/usr/bin/fio"}


def test_the_handshake_timeout_is_a_setting_of_the_sweep():
    loaded = config.from_dict(with_(handshake_timeout="3s"), "s.yaml")
    assert loaded.options == {"handshake_timeout": 3.0}
    assert all("handshake_timeout" not in dict(case.params) for case in loaded.cases)
    error = error_of(with_(matrix={"engine": ["fio"], "pattern": ["read"], "handshake_timeout": ["3s"]}))
    assert error.key == "matrix.handshake_timeout" and "a matrix axis" in error.expected
    error = error_of(with_(handshake_timeout="0s"))
    assert (error.key, error.expected, error.got) == ("handshake_timeout", "a duration such as 10s", "0s")


def test_null_leaves_a_key_without_default_unset():
    document = {**BASE, "runtime": None, "timeout": None, "name": None, "numa_node": None}
    loaded = config.from_dict(document, "s.yaml", default_name="stem")
    assert (loaded.runtime, loaded.timeout, loaded.name, loaded.options["numa_node"]) == (None, None, "stem", None)


def test_gpu_lists_are_fios_colon_lists():
    document = with_(matrix={"engine": ["fio"], "pattern": ["read"], "gpu": [1, "0:1"]})
    assert [c["gpu"] for c in config.from_dict(document, "s.yaml").cases] == ["1", "0:1"]


def test_a_duplicate_key_is_refused_with_its_line(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("name: t\nrepetitions: 3\nrepetitions: 5\nmatrix: {engine: [fio], pattern: [read]}\n")
    with pytest.raises(ConfigError, match="duplicate key 'repetitions' at line 3"):
        config.load(path)


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    """Nine levels of nine aliases (387 million strings once expanded) in `description`: refused before any
    of it is built (it took 92 s and 3.3 GB, then MemoryError)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    body = "\n".join(f"  {line}" for line in lines)
    path = tmp_path / "bomb.yaml"
    path.write_text(f"name: t\ndescription:\n{body}\nmatrix: {{engine: [fio], pattern: [read]}}\n")
    with pytest.raises(ConfigError, match="once aliases are expanded"):
        config.load(path)


def test_anchors_within_reason_still_work(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("name: t\ndirectory: /tmp/x\nmatrix:\n  - &fio {engine: [fio], pattern: [read]}\n  - *fio\n")
    assert len(config.load(path).cases) == 1


def test_a_huge_config_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: t\n" + "# padding\n" * 200_000)
    with pytest.raises(ConfigError, match="under 1 MiB"):
        config.load(path)


@settings(max_examples=40, deadline=None)
@given(io_kib=st.integers(1, 1 << 16), file_kib=st.integers(1, 1 << 16))
def test_an_io_larger_than_its_file_is_refused_at_load(io_kib: int, file_kib: int) -> None:
    """fio and gdsio fail every run whose block is larger than the file: such a case is bad input, refused
    before any runs, naming the key, both sizes and the fix."""
    document = with_(
        file_size=file_kib * 1024, matrix={"engine": ["fio"], "pattern": ["read"], "io_size": [io_kib * 1024]}
    )
    if io_kib <= file_kib:
        assert config.from_dict(document, "sweep.yaml").cases[0]["io_size"] == io_kib * 1024
        return
    error = error_of(document)
    assert error.key == "matrix.io_size" and error.expected.startswith("at most file_size (")
    assert "exclude: [{io_size:" in error.expected


def test_the_cli_refuses_an_io_larger_than_its_file_and_writes_nothing(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gdsbench.cli import cli
    from tests.helpers import assert_exits, write_config

    path = write_config(
        tmp_path, file_size="1M", matrix={"engine": ["fio"], "pattern": ["read"], "io_size": ["4K", "16M"]}
    )
    for extra in ([], ["--dry-run"]):
        run = CliRunner().invoke(cli, ["sweep", str(path), "-o", str(tmp_path / "out"), *extra])
        assert_exits(run, 2, one_line_error=True)
        assert "matrix.io_size: expected at most file_size (1M)" in run.output and "(got '16M')" in run.output
    assert not (tmp_path / "out").exists()


def test_the_cpu_cost_config_runs_the_fast_device_matrix_on_the_disk():
    """configs/cpu-cost.yaml is configs/fast-device.yaml on another directory: the same cases, so the CPU
    costs of the two devices compare row for row."""
    root = Path(__file__).parent.parent / "configs"
    fast, disk = (config.load(root / name) for name in ("fast-device.yaml", "cpu-cost.yaml"))
    assert fast.cases == disk.cases and fast.directory != disk.directory
    assert {k: v for k, v in fast.settings.items() if k not in ("name", "directory", "allow_root_filesystem")} == {
        k: v for k, v in disk.settings.items() if k not in ("name", "directory", "allow_root_filesystem")
    }


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_case_travels_as_its_key(path):
    """A case's key (a results row's `case`) parses back into the same case: the rank program gets its case so."""
    for case in config.load(path).cases:
        assert config.case_from_key(case.key) == case


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("engine=dcp_fast,pattern=save,world_size=two", "matrix.world_size[0]"),
        ("engine=dcp_fast,pattern=save,colour=red", "matrix.colour"),
        ("engine=dcp_fast,world_size=2", "matrix.pattern"),
        ("engine=dcp_fast,pattern,world_size=2", "pattern"),
    ],
)
def test_a_bad_case_key_names_what_is_wrong(text, key):
    with pytest.raises(ConfigError) as caught:
        config.case_from_key(text)
    assert caught.value.file == "--case" and caught.value.key == key
