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
PUBLIC_MODULES = ("ckptio.errors", "ckptio.codec", "ckptio.inspect")

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
    "gdsbench.runners": ("gdsbench.sweep", "gdsbench.report", "gdsbench.cli"),
    "gdsbench.results": ("gdsbench.runners", "gdsbench.sweep", "gdsbench.report", "gdsbench.cli"),
    "gdsbench.units": ("gdsbench.",),
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
    tree = ast.parse(path.read_text())
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


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


OUTSIDE = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))


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
