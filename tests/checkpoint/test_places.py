"""A location is resolved once into a place (issue 39, part 1): one registry of schemes (ckptio.places), each place
declaring its traits, and every entry point asking the place; no module outside the places tests a scheme."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from ckptio.errors import InvalidLocation, UnsupportedLocation
from ckptio.places import PLACES, Place, Traits, place

LIBRARY = Path(__file__).resolve().parents[2] / "lib" / "ckptio" / "src" / "ckptio"
#: The places and their own implementation (the s3 package is the object place's).
OWN = ("places", "s3")


def test_a_location_resolves_into_the_place_of_its_scheme() -> None:
    assert set(PLACES) == {"", "memory", "peer", "s3"} and all(issubclass(kind, Place) for kind in PLACES.values())
    local = place("ckpt/run1.pt")
    assert local.scheme == "" and local.name.endswith("/ckpt/run1.pt") and local.name.startswith("/")
    objects = place("s3://bucket/run1/c.ckpt")
    assert objects.scheme == "s3" and objects.name == "s3://bucket/run1/c.ckpt"
    assert place("dir/s3://x").scheme == ""  # a scheme only at the start makes a URL
    with pytest.raises(UnsupportedLocation, match="gs:// locations are not supported"):
        place("gs://bucket/c")
    with pytest.raises(InvalidLocation):
        place("s3://user:secret@bucket/c")


def test_every_place_declares_its_traits() -> None:
    for kind in PLACES.values():
        assert isinstance(kind.traits, Traits) and kind.traits.atomic in ("rename", "put")
        assert kind.traits.survives in ("process", "node", "job")
    assert PLACES[""].traits.from_memory and not PLACES["s3"].traits.from_memory


def test_an_object_cannot_be_mapped_and_says_what_the_call_needs() -> None:
    with pytest.raises(UnsupportedLocation, match="maps a local file"):
        place("s3://bucket/c.ckpt").local_file("load_mmap maps a local file")


def scheme_tests(path: Path) -> list[str]:
    """Where a module tests a scheme: a comparison with, or a startswith of, a string naming one."""
    found = []
    name = path.relative_to(LIBRARY) if path.is_relative_to(LIBRARY) else path.name
    for node in ast.walk(ast.parse(path.read_text())):
        strings: list[ast.expr] = []
        if isinstance(node, ast.Compare):
            strings = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "startswith":
            strings = list(node.args)
        for value in strings:
            if (
                isinstance(value, ast.Constant)
                and isinstance(value.value, str)
                and (value.value in PLACES or "://" in value.value)
                and value.value
            ):
                found.append(f"{name}:{node.lineno}")
        if isinstance(node, ast.Name) and node.id in ("object_location", "refuse_url"):
            found.append(f"{name}:{node.lineno} ({node.id})")
    return found


def test_no_module_outside_the_places_tests_a_scheme(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"  # the detector itself: it finds the branches the six entry points held before
    planted.write_text('if a.startswith("s3://") or scheme == "s3":\n    location = object_location(a)\n')
    assert len(scheme_tests(planted)) == 3
    outside = [p for p in LIBRARY.rglob("*.py") if p.relative_to(LIBRARY).parts[0] not in OWN]
    assert len(outside) > 30
    assert [hit for p in outside for hit in scheme_tests(p)] == []
    assert not (LIBRARY / "location.py").exists()  # the two-way branch it served is gone
