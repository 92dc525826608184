"""Sweep configs: YAML -> a validated SweepConfig -> the ordered list of Cases to run.

Every error names the file, the key (as a path such as `matrix[1].io_size[2]`) and what was expected.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gdsbench import launchers, runners
from gdsbench.cases import CORE_AXES, Case, Pattern, Transfer, cross_product, matches, plain, unique
from gdsbench.columns import Column
from gdsbench.errors import ConfigError, UsageError
from gdsbench.hosts import HostError, parse_hosts
from gdsbench.keys import (
    Key,
    at_most,
    boolean,
    choices_text,
    duration,
    duration_or_off,
    file_name,
    member_of,
    non_negative_int,
    one_of,
    positive_int,
    size,
    string,
    text,
)
from gdsbench.units import size_label

MAX_THREADS = 4096  # fio's own job limit (REAL_MAX_JOBS)
MAX_IODEPTH = 65536

#: The axes every matrix has besides `engine`, with the value used when a matrix leaves one out.
AXIS_KEYS: dict[str, Key] = {
    "pattern": Key("pattern", member_of(Pattern), choices_text(Pattern), None, "access pattern"),
    "transfer": Key("transfer", member_of(Transfer), choices_text(Transfer), Transfer.CPU_ONLY, "transfer type"),
    "io_size": Key("io_size", size, "a size such as 4K, 128K, 1M, 16M", 1 << 20, "bytes per I/O"),
    "threads": Key(
        "threads", at_most(MAX_THREADS), f"an integer from 1 to {MAX_THREADS}", 1, "jobs/threads in parallel"
    ),
    "iodepth": Key(
        "iodepth", at_most(MAX_IODEPTH), f"an integer from 1 to {MAX_IODEPTH}", 1, "I/Os in flight per thread"
    ),
}

#: Settings of the whole sweep (top-level YAML keys), besides matrix, exclude and runner options.
SWEEP_KEYS: dict[str, Key] = {
    key.name: key
    for key in (
        Key("name", file_name, "a file name (letters, digits, '.', '_', '-')", None, "the config file's stem"),
        Key("description", string, "a string", "", "what the sweep answers"),
        Key("directory", text, "a directory path", "/tmp/gdsbench", "where test files are made (created if missing)"),
        Key("file_size", size, "a size such as 1G or 512M", 1 << 30, "size of each test file"),
        Key("runtime", duration, "a duration such as 5s or 2m", None, "time-bound runs; omit for size-bound"),
        Key("ramp_time", duration, "a duration such as 2s", None, "fio's and s3's ramp time, not measured"),
        Key("repetitions", positive_int, "a positive integer", 3, "recorded runs per case"),
        Key("warmup", non_negative_int, "a non-negative integer", 0, "unrecorded runs before each case"),
        Key("interleave", boolean, "true or false", False, "run repetition-major so drift falls on all cases alike"),
        Key("keep_files", boolean, "true or false", False, "keep the test files gdsbench created"),
        Key("timeout", duration, "a duration such as 10m", None, "limit for one run of one case"),
        Key(
            "fill_timeout",
            duration,
            "a duration such as 2h",
            None,
            "limit for writing the files reads need, once before the cases (default: their size at 50 MiB/s + 10 min)",
        ),
        Key(
            "allow_root_filesystem",
            boolean,
            "true or false",
            False,
            "allow `directory` on the root file system (else refused: an unmounted /mnt/nvme lands there)",
        ),
        Key(
            "series",
            duration_or_off,
            "a duration such as 1s, or false",
            None,
            "fio's bandwidth/latency logs averaged over this window (default: runtime / 20, 0.1-1 s); false: none",
        ),
        Key(
            "status_interval",
            duration_or_off,
            "a duration such as 1s, or false",
            1.0,
            "fio's periodic status for live figures while a case runs; false: none",
        ),
    )
}

STRUCTURE_KEYS = ("matrix", "exclude", "checks", "hosts", "launcher", "allow_flags")


@dataclass(frozen=True)
class SweepConfig:
    """A validated sweep: its settings, runner options and the cases it expands to."""

    source: str
    settings: Mapping[str, Any]
    options: Mapping[str, Any]
    cases: tuple[Case, ...]
    raw: Mapping[str, Any] = field(default_factory=dict)
    checks: tuple[Mapping[str, Any], ...] = ()

    def __getattr__(self, name: str) -> Any:
        """Settings read as attributes: config.repetitions, config.directory, ..."""
        try:
            return self.settings[name]
        except KeyError:
            raise AttributeError(name) from None


MAX_CONFIG_BYTES = 1 << 20  # a sweep config is a page of YAML; anything larger is a mistake or an attack
MAX_YAML_NODES = 100_000  # nodes once aliases are expanded (an alias bomb expands to billions)


def load(path: str | Path) -> SweepConfig:
    """Read and validate a sweep config file."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise ConfigError(str(path), "(file)", f"a YAML file under {MAX_CONFIG_BYTES >> 20} MiB")
        document = strict_yaml(path.read_text())
    except OSError as exc:
        raise ConfigError(str(path), "(file)", "a readable YAML file", exc.strerror) from None
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), "(yaml)", f"valid YAML ({_yaml_problem(exc)})") from None
    return from_dict(document, str(path), default_name=path.stem)


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (the last would silently win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


def strict_yaml(text: str) -> Any:
    """A YAML document, refusing duplicate keys and documents that expand past MAX_YAML_NODES."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expanded_size(root: yaml.Node) -> None:
    """Count nodes as aliases expand them, stopping at MAX_YAML_NODES (YAMLError past it)."""
    stack, count = [root], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_YAML_NODES:
            raise yaml.YAMLError(f"more than {MAX_YAML_NODES} values once aliases are expanded (an alias bomb?)")
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend(v for pair in node.value for v in pair)


#: Keys a config once had that live elsewhere now, and where (said instead of "did you mean").
MOVED = {
    "mtbf": "no mtbf here: the mean time between failures is a report setting now, not a case axis (it changed no "
    "measurement): `gdsbench report --mtbf 1h,24h`, or `mtbf: 24h` beside a check's min_goodput",
}


def unknown(name: Any, known: Iterable[str], what: str) -> str:
    """What an unknown key should have been: `what` and the nearest known key, not the whole list of them (or where
    a key that moved went: MOVED)."""
    if name in MOVED:
        return MOVED[str(name)]
    close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
    if close:
        return f"{what} (did you mean {close[0]}?)"
    return f"{what} (the README's 'Sweep configs' lists the sweep's keys, `gdsbench runners` each engine's)"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A one-line description of a YAML syntax error with its line."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{getattr(exc, 'problem', None) or exc}{where}"


def from_dict(document: Any, source: str, default_name: str = "sweep") -> SweepConfig:
    """Validate a parsed YAML document (a mapping) into a SweepConfig."""
    if not isinstance(document, dict):
        raise ConfigError(source, "(top level)", "a mapping of keys such as name, directory, matrix")
    option_keys = runners.option_keys()
    known = [*SWEEP_KEYS, *option_keys, *STRUCTURE_KEYS]
    for key in document:
        if key not in known:
            raise ConfigError(source, str(key), unknown(key, known, "a known key"))
    settings = {name: _setting(source, name, key, document) for name, key in SWEEP_KEYS.items()}
    settings["name"] = settings["name"] or default_name
    settings["hosts"] = _hosts(source, document.get("hosts"))
    settings["launch"] = launch_setting(source, document.get("launcher", "local"))
    options = {name: _setting(source, name, key, document) for name, key in option_keys.items() if name in document}
    excludes = _excludes(source, document.get("exclude", []))
    cases = tuple(expand(source, document.get("matrix"), options, excludes))
    if not cases:
        raise ConfigError(source, "matrix", "at least one case left after exclude")
    _check_io_fits(source, cases, settings["file_size"])
    checks = document.get("checks")
    if checks is not None and not isinstance(checks, list):
        raise ConfigError(source, "checks", "a list of checks", checks)
    return SweepConfig(source, settings, options, cases, raw=document, checks=tuple(checks or ()))


def _check_io_fits(source: str, cases: tuple[Case, ...], file_size: int) -> None:
    """Refuse an I/O larger than the file it is made in (fio and gdsio would fail every run of that case)."""
    for case in cases:
        io_size = case.get("io_size")
        if io_size is not None and io_size > file_size:
            raise ConfigError(
                source,
                "matrix.io_size",
                f"at most file_size ({size_label(file_size)}): each {case.engine} I/O must fit in its test "
                f"file; raise file_size or add `exclude: [{{io_size: {size_label(io_size)}}}]`",
                size_label(io_size),
            )


def _hosts(source: str, value: Any) -> tuple:
    """The fio servers of a multi-host sweep (host-list files read from the config's folder); () = this machine."""
    if value is None:
        return ()
    try:
        return parse_hosts(value, base=Path(source).parent)
    except HostError as exc:
        raise ConfigError(source, exc.where, exc.expected, exc.got) from None


def launch_setting(source: str, value: Any) -> launchers.Launch:
    """How distributed checkpoint cases start their ranks (`launcher:`, a name or a mapping; local by default)."""
    try:
        return launchers.parse(value)
    except launchers.LaunchError as exc:
        raise ConfigError(source, exc.where, exc.expected, exc.got) from None


def with_launcher(config: SweepConfig, name: str) -> SweepConfig:
    """The config with its `launcher:` named `name` on the command line (its other launcher settings kept)."""
    current = config.raw.get("launcher", "local")
    value = {**current, "name": name} if isinstance(current, Mapping) else name
    try:
        launch = launchers.parse(value, where="--launcher")
    except launchers.LaunchError as exc:
        raise UsageError(str(exc)) from None
    return replace(config, settings={**config.settings, "launch": launch}, raw={**config.raw, "launcher": value})


def _setting(source: str, name: str, key: Key, document: Mapping[str, Any]) -> Any:
    """A top-level value parsed, its default when absent; null means "not set" only for keys that have no default."""
    if name not in document or (document[name] is None and key.default is None):
        return key.default
    return _parse(source, name, key, document[name])


def _parse(source: str, where: str, key: Key, value: Any) -> Any:
    """Parse one value with its Key; null or a value the parser refuses is a ConfigError at `where`."""
    if value is None:
        raise ConfigError(source, where, key.expected)
    try:
        return key.parse(value)
    except (ValueError, TypeError):
        raise ConfigError(source, where, key.expected, value) from None


def engine_key() -> Key:
    """The `engine` axis: one of the registered runners."""
    names = tuple(runners.RUNNERS)
    return Key("engine", one_of(*names), "one of " + ", ".join(names), None, "which runner measures the case")


def axis_keys() -> dict[str, Key]:
    """Every key a matrix may use: engine and the core axes, then the runners' options (not their settings)."""
    options = {name: key for name, key in runners.option_keys().items() if key.axis}
    return {"engine": engine_key(), **AXIS_KEYS, **options}


def declared_columns() -> dict[str, Column]:
    """Every result column the runners declare beside the core schema, by name (what qualify's limits may name)."""
    return runners.declared_columns()


def expand(source: str, matrix: Any, options: Mapping[str, Any], excludes: list[dict[str, Any]]) -> list[Case]:
    """The cases of a matrix (a mapping of lists, or a list of such mappings), in order, excludes removed."""
    if matrix is None or matrix == {} or matrix == []:
        raise ConfigError(source, "matrix", "a non-empty mapping of lists (or a list of such mappings)")
    blocks = matrix if isinstance(matrix, list) else [matrix]
    cases: list[Case] = []
    for index, block in enumerate(blocks):
        where = f"matrix[{index}]" if isinstance(matrix, list) else "matrix"
        for point in cross_product(_axes(source, where, block, options)):
            point = left_to_library(point, {*block, *options}, set(block))
            if not any(matches(point, rule) for rule in excludes):
                cases.append(_case(point))
    return unique(cases)


def left_to_library(point: Mapping[str, Any], given: set[str], in_block: set[str]) -> dict[str, Any]:
    """The point with None for each axis the config does not give that its engine leaves to its library
    (Runner.library_defaults: ckptio's threads): the library's own default runs, and the row records its value.
    Options an engine takes from its own matrix block only (Runner.block_options: the ckptio engines' `bucket`,
    which sends their checkpoints to S3) are None where the block leaves them out, whatever the top level says."""
    runner = runners.get(point["engine"])
    left = [n for n in getattr(runner, "library_defaults", ()) if n not in given]
    left += [n for n in getattr(runner, "block_options", ()) if n not in in_block]
    return {**point, **dict.fromkeys(left)}


def _axes(source: str, where: str, block: Any, options: Mapping[str, Any]) -> dict[str, list[Any]]:
    """One matrix block validated: every axis a list of parsed values, defaults filled in."""
    if not isinstance(block, dict) or not block:
        raise ConfigError(source, where, "a non-empty mapping of axis names to lists")
    keys = axis_keys()
    axes: dict[str, list[Any]] = {}
    for name, values in block.items():
        if name not in keys:
            raise ConfigError(source, f"{where}.{name}", unknown(name, keys, "a matrix axis"))
        values = values if isinstance(values, list) else [values]
        if not values:
            raise ConfigError(source, f"{where}.{name}", "a non-empty list")
        axes[name] = [_parse(source, f"{where}.{name}[{i}]", keys[name], v) for i, v in enumerate(values)]
    for name in ("engine", "pattern"):
        if name not in axes:
            raise ConfigError(source, f"{where}.{name}", "a list (every matrix names its engines and patterns)")
    for name, key in keys.items():
        axes.setdefault(name, [options.get(name, key.default)])
    return axes


def _case(point: Mapping[str, Any]) -> Case:
    """A Case keeping only the parameters its engine uses, in the fixed axis order."""
    runner, keys = runners.get(point["engine"]), runners.option_keys()
    order = [*CORE_AXES[1:], *keys]
    carried = [n for n in order if n in runner.axes and (n not in keys or keys[n].applies(point["pattern"]))]
    return Case(runner.name, tuple((name, point[name]) for name in carried))


def _excludes(source: str, rules: Any) -> list[dict[str, Any]]:
    """Validate exclude rules: a list of mappings of axis names to single values."""
    if not isinstance(rules, list):
        raise ConfigError(source, "exclude", "a list of mappings such as {pattern: randwrite, io_size: 16M}")
    keys = axis_keys()
    parsed = []
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict) or not rule:
            raise ConfigError(source, f"exclude[{index}]", "a mapping of axis names to values")
        for name in rule:
            if name not in keys:
                raise ConfigError(source, f"exclude[{index}].{name}", unknown(name, keys, "a matrix axis"))
        parsed.append({name: _parse(source, f"exclude[{index}].{name}", keys[name], v) for name, v in rule.items()})
    return parsed


def case_defaults() -> dict[str, str]:
    """Every case parameter's default as a case string spells it (`unlink` -> `False`): a parameter that a
    results file does not name had this value (files written before the parameter existed)."""
    keys = {**AXIS_KEYS, **runners.option_keys()}
    return {name: str(plain(key.default)) for name, key in keys.items()}


def case_from_key(text: str, source: str = "--case") -> Case:
    """A case from its key (`engine=dcp_fast,pattern=save,world_size=2,...`: a results row's `case` cell),
    every value parsed by its key's own parser and every parameter the text leaves out at its default: the
    one way a case travels as text (torchrun's rank program gets its case so)."""
    block: dict[str, list[Any]] = {}
    for part in filter(None, str(text).split(",")):
        name, equals, value = part.partition("=")
        if not equals or not name.strip():
            raise ConfigError(source, part, "name=value pairs separated by commas")
        if value != "None":  # an option left unset: its default is None
            block[name.strip()] = [yaml.safe_load(value)]
    cases = from_dict({"matrix": block}, source).cases
    if len(cases) != 1:
        raise ConfigError(source, "(case)", "one case, not a list of values")
    return cases[0]
