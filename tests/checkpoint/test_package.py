"""ckptio as a package: typed (py.typed shipped, every public name seen by a type checker), and its source
distribution carries its documentation."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import ckptio
import ckptio.inspect
import pytest

LIBRARY = Path(__file__).parent.parent.parent / "lib" / "ckptio"


def statically_bound(module_file: str) -> set[str]:
    """The names a type checker sees in a module: its imports, definitions and assignments at the top level,
    and the imports under `if TYPE_CHECKING:` (a lazy __getattr__ hides its names from it)."""
    bound = set()
    for node in ast.parse(Path(module_file).read_text()).body:
        body = node.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING" else [node]
        for stmt in body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                bound |= {(a.asname or a.name).split(".")[0] for a in stmt.names}
            elif isinstance(stmt, ast.FunctionDef | ast.ClassDef):
                bound.add(stmt.name)
            elif isinstance(stmt, ast.Assign):
                bound |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return bound


def build(source: Path, kind: str, out: Path) -> Path:
    """Build an sdist or a wheel of `source` into `out` with setuptools (this venv's; no download)."""
    out.mkdir()
    code = f"import setuptools.build_meta as b; print(b.build_{kind}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return out / done.stdout.splitlines()[-1]


def test_every_public_name_is_visible_to_type_checkers():
    """Writer and Reader (imported on first use) are bound under TYPE_CHECKING, as every other public name."""
    import ckptio.records

    for module in (ckptio, ckptio.inspect, ckptio.records):
        assert module.__file__ is not None
        assert set(module.__all__) <= statically_bound(module.__file__), module.__name__


@pytest.mark.slow
def test_the_sdist_carries_py_typed_and_the_docs(tmp_path):
    """The source distribution holds py.typed, the API and the format; the wheel's package data py.typed."""
    source = tmp_path / "ckptio"
    shutil.copytree(LIBRARY, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"))
    sdist, wheel = build(source, "sdist", tmp_path / "sdist"), build(source, "wheel", tmp_path / "wheel")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"src/ckptio/py.typed", "docs/api.md", "docs/format.md", "README.md"} <= names
    with zipfile.ZipFile(wheel) as whl:
        assert "ckptio/py.typed" in whl.namelist()


def test_the_options_import_without_torch_and_the_functions_stay_functions() -> None:
    """`from ckptio import IOOptions` (a tool reading its fields) costs no torch import; the names that need torch
    come on first use, and stay the functions whatever internal module was imported before them."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom ckptio import IOOptions\nassert 'torch' not in sys.modules, 'torch imported'\n"
        "import ckptio.inspect, ckptio\nassert callable(ckptio.save) and callable(ckptio.load), (ckptio.save, ckptio.load)\n"
        "assert ckptio.Checkpointer.__name__ == 'Checkpointer'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_readme_names_the_public_surface_as_all_has_it():
    """lib/ckptio/README.md lists `ckptio.__all__` in its first parenthesis: the same names, none more (issue 43)."""
    text = (LIBRARY / "README.md").read_text().replace("\n", " ")
    listed = text.split("`ckptio.__all__` (", 1)[1].split(")", 1)[0]
    assert sorted(name.strip() for name in listed.split(",")) == sorted(ckptio.__all__)


def test_the_records_are_what_the_calls_return(tmp_path) -> None:
    """ckptio.records names the types a Checkpointer's and a TieredCheckpointer's calls return."""
    import torch
    from ckptio.records import Loaded, Restored, Saved, TierSave

    with ckptio.Checkpointer(tmp_path / "a.pt") as single, ckptio.TieredCheckpointer([tmp_path / "t"]) as tiered:
        assert isinstance(single.save({"w": torch.ones(8)}), Saved)
        single.load()
        assert isinstance(single.last, Loaded)
        assert isinstance(tiered.save({"w": torch.ones(8)}, 1), TierSave)
        tiered.load()
        assert isinstance(tiered.last, Restored) and tiered.last.step == 1


def test_an_object_store_endpoint_is_an_option_beside_the_environment(monkeypatch) -> None:
    """IOOptions.endpoint and region win over AWS_ENDPOINT_URL(_S3) and AWS_REGION; CKPTIO_ENDPOINT sets them as any
    field; an endpoint with credentials, a path or another scheme is refused naming the field."""
    from ckptio.errors import OptionError
    from ckptio.s3.location import endpoint, region

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:7480")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert (endpoint(), region()) == ("http://127.0.0.1:7480", "eu-west-1")
    options = ckptio.IOOptions(endpoint="https://store.example:9000", region="zone-a")
    assert (endpoint(options.endpoint, options.region), region(options.region)) == (
        "https://store.example:9000",
        "zone-a",
    )
    monkeypatch.setenv("CKPTIO_ENDPOINT", "http://10.0.0.1:80")
    assert ckptio.IOOptions().endpoint == "http://10.0.0.1:80"
    for bad in ("http://user:secret@h:1", "ftp://h", "http://h:1/path", "http://h:99999"):
        with pytest.raises(OptionError, match=r"IOOptions\.endpoint") as refused:
            ckptio.IOOptions(endpoint=bad)
        assert "secret" not in str(refused.value)
    with pytest.raises(OptionError, match=r"IOOptions\.region"):
        ckptio.IOOptions(region="us east")
