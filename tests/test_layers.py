"""Dependencies point one way: reports read results only; the checkpoint library (ckptio, its own
distribution) is a leaf that the benchmark reaches through its public modules only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "gdsbench"
LIBRARY = ROOT / "lib" / "ckptio" / "src" / "ckptio"
#: What the benchmark may take from ckptio: the names in its __all__, and these modules.
PUBLIC_MODULES = ("ckptio.errors", "ckptio.codec", "ckptio.inspect", "ckptio.records")

# module prefix -> gdsbench modules it must never import (at any depth, including inside functions)
FORBIDDEN = {
    # reports read result files only: no runner, sweep, config, machine probe or checkpoint library
    "gdsbench.report": (
        "gdsbench.runners",
        "gdsbench.sweep",
        "ckptio",
        "gdsbench.config",
        "gdsbench.cli",
        "gdsbench.sysinfo",
        "gdsbench.doctor",
        "gdsbench.qualify",
        "gdsbench.compare",
        "gdsbench.workloads",
    ),
    "ckptio": ("gdsbench",),
    "gdsbench.runners": ("gdsbench.sweep", "gdsbench.report", "gdsbench.cli", "gdsbench.testbeds"),
    "gdsbench.results": ("gdsbench.runners", "gdsbench.sweep", "gdsbench.report", "gdsbench.cli"),
    "gdsbench.units": ("gdsbench.",),
    "gdsbench.files": ("gdsbench.",),  # file utilities: the results files and the testbeds' journals use them
    # testbeds stand up what the benchmark runs on (a Ceph, a RAM disk, the first GPU run's plan), never run,
    # configure or record it themselves (the smoke run starts its sweeps as processes); runners never reach in
    "gdsbench.testbeds": (
        "gdsbench.runners",
        "gdsbench.sweep",
        "gdsbench.config",
        "gdsbench.results",
        "gdsbench.report",
        "gdsbench.cli",
    ),
    "gdsbench.errors": ("gdsbench.",),
    # machine facts: read by sweep, doctor and runners, never the other way round
    "gdsbench.sysinfo": (
        "gdsbench.runners",
        "gdsbench.sweep",
        "gdsbench.report",
        "gdsbench.cli",
        "gdsbench.config",
        "ckptio",
        "gdsbench.doctor",
    ),
    # page-cache control changes the machine: only what runs cases uses it
    "gdsbench.runners.cache": ("gdsbench.",),
    # a config is data: it knows the runners' option tables, nothing that runs or renders
    "gdsbench.config": ("gdsbench.sweep", "gdsbench.report", "gdsbench.cli", "gdsbench.qualify", "gdsbench.sysinfo"),
    "gdsbench.sweep": ("gdsbench.report", "gdsbench.cli", "gdsbench.qualify"),
    # guard rails judge result rows, series and sidecars: they run, probe and render nothing
    "gdsbench.flags": (
        "gdsbench.runners",
        "gdsbench.sweep",
        "gdsbench.report",
        "gdsbench.cli",
        "gdsbench.sysinfo",
        "gdsbench.config",
        "gdsbench.qualify",
        "gdsbench.compare",
    ),
    # launchers build the commands that start ranks; rank_env places a rank from its launcher's variables: neither
    # knows an engine, a sweep or a report (the runners and the config read them, never the other way round)
    "gdsbench.launchers": ("gdsbench.runners", "gdsbench.sweep", "gdsbench.config", "gdsbench.report", "gdsbench.cli"),
    "gdsbench.rank_env": ("gdsbench.runners", "gdsbench.sweep", "gdsbench.config", "gdsbench.report", "gdsbench.cli"),
    # checks judge results with the config's keys; they run nothing themselves
    "gdsbench.qualify": ("gdsbench.sweep", "gdsbench.cli", "gdsbench.runners", "gdsbench.sysinfo"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(_root_of(path)).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _root_of(path: Path) -> Path:
    """The folder a file's top-level package sits in (the repository, or the library's src/)."""
    return LIBRARY.parent if path.is_relative_to(LIBRARY) else ROOT


def imports(path: Path) -> set[str]:
    """Every module a file imports, absolute names, relative imports resolved."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, path)
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def imported_from(node: ast.ImportFrom, path: Path) -> str:
    """The absolute module a `from ... import` names (relative levels resolved against `path`)."""
    if not node.level:
        return node.module or ""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    kept = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(kept + ([node.module] if node.module else []))


FILES = sorted(PACKAGE.rglob("*.py")) + sorted(LIBRARY.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path):
    name = module_name(path)
    for prefix, banned in FORBIDDEN.items():
        if name == prefix or name.startswith(prefix + "."):
            own = prefix + "."
            bad = [
                m
                for m in imports(path)
                if any(m.startswith(b) for b in banned) and not m.startswith(own) and m != prefix
            ]
            assert not bad, f"{name} imports {bad}"


def import_graph() -> dict[str, set[str]]:
    """gdsbench's and ckptio's modules, each with the modules of the two it imports when it runs: at the top
    and inside functions alike, not under `if TYPE_CHECKING:` (`from pkg import mod` is an arrow to mod)."""
    modules = {module_name(path): path for path in FILES}
    return {name: _arrows(path, modules) - {name} for name, path in modules.items()}


def _arrows(path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules among `modules` that one file imports anywhere in it."""
    found = set()
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for if_ in ast.walk(tree) if _type_checking(if_) for s in if_.body for n in ast.walk(s)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {_known(alias.name, modules) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = imported_from(node, path)
            found |= {_known(f"{base}.{alias.name}", modules) for alias in node.names}
    return found - {""}


def _type_checking(node: ast.AST) -> bool:
    """An `if TYPE_CHECKING:` (the imports of its body never run)."""
    return isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def _known(name: str, modules: dict[str, Path]) -> str:
    """The longest of `modules` that `name` is or lies in ("" if none: a third-party module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in graph:
        if root in order:
            continue
        work = [(root, iter(sorted(graph[root])))]
        order[root] = low[root] = len(order)
        stack.append(root)
        while work:
            node, arrows = work[-1]
            step = next((m for m in arrows if m not in order or m in stack), None)
            if step is not None and step not in order:
                order[step] = low[step] = len(order)
                stack.append(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step is not None:
                low[node] = min(low[node], order[step])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    component = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    found += [sorted(component)] if len(component) > 1 else []
    return found


def test_no_import_circles_even_inside_functions():
    """No module of gdsbench or ckptio reaches itself through imports, counting function-level ones."""
    graph = import_graph()
    tied = [{m: sorted(graph[m] & set(c)) for m in c} for c in circles(graph)]
    assert not tied, f"import circles: {tied}"


def test_the_circle_check_sees_function_level_imports(tmp_path):
    """The check above is not vacuous: an import inside a function is an arrow, one under TYPE_CHECKING is not,
    and a loop of arrows is a circle."""
    source = tmp_path / "m.py"
    source.write_text("if TYPE_CHECKING:\n    import gdsbench.sweep\ndef f():\n    from gdsbench import config\n")
    assert _arrows(source, {"gdsbench.config": source, "gdsbench.sweep": source}) == {"gdsbench.config"}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_rank_program_never_imports_config():
    """The program torchrun starts (runners/checkpoint/rank.py) reads a job, never the config module,
    neither itself nor through what it imports."""
    graph = import_graph()
    reached, todo = set(), ["gdsbench.runners.checkpoint.ranks.rank"]
    while todo:
        for name in graph[todo.pop()] - reached:
            reached.add(name)
            todo.append(name)
    assert "gdsbench.config" not in reached


def test_fio_only_sweep_does_not_import_torch():
    import subprocess
    import sys

    code = (
        "import sys, gdsbench.cli, gdsbench.sweep, gdsbench.config, gdsbench.runners, gdsbench.report;"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_cli_lists_report_formats_without_importing_pandas():
    """--format choices come from the report registry at import; the registry and the renderers stay light."""
    import subprocess
    import sys

    code = "import sys, gdsbench.cli; print('pandas' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


def checkpoint_imports(path: Path) -> list[str]:
    """What a file outside the checkpoint library takes from it: module paths and imported names."""
    tree = ast.parse(path.read_text())
    taken = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            taken += [a.name for a in node.names if a.name.startswith("ckptio")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ckptio"):
            taken += [node.module if node.module != "ckptio" else f"{node.module}:{a.name}" for a in node.names]
    return taken


OUTSIDE = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "benchmarks").rglob("*.py"))


@pytest.mark.parametrize("path", OUTSIDE, ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_public_checkpoint_api_is_used_outside_the_library(path):
    """Runners, workloads and benchmarks see ckptio's __all__ and its public modules, nothing below."""
    import ckptio as public

    bad = [
        name
        for name in checkpoint_imports(path)
        if not (
            name in ("ckptio", *PUBLIC_MODULES)
            or (name.startswith("ckptio:") and f"ckptio.{name.split(':')[1]}" in PUBLIC_MODULES)
            or (name.startswith("ckptio:") and name.split(":")[1] in public.__all__)
        )
    ]
    assert not bad, f"{path.name} reaches below ckptio's public API: {bad}"
