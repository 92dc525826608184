"""A URL is not a folder (issue 30, item 5): every entry point refuses a `scheme://` location it does not take by
name (UnsupportedLocation) instead of creating a local folder `gs:` and reporting success (s3:// is taken since
issue 33: tests/checkpoint/test_s3_*.py)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from ckptio import Checkpointer, CheckpointError, Reader, Writer, load, load_into, load_mmap, save
from ckptio.errors import UnsupportedLocation

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # DCP without a process group
SD = {"w": torch.ones(4)}

ENTRY_POINTS: dict[str, Callable[[str], Any]] = {
    "save": lambda url: save(SD, url),
    "load": load,
    "load_into": lambda url: load_into(url, {"w": torch.zeros(4)}),
    "load_mmap": load_mmap,
    "Checkpointer": Checkpointer,
    "Writer": Writer,
    "Reader": Reader,
    "dcp.save with a Writer": lambda url: dcp.save(SD, storage_writer=Writer(url), no_dist=True),
    "dcp.save checkpoint_id": lambda url: dcp.save(SD, storage_writer=Writer("."), checkpoint_id=url, no_dist=True),
    "dcp.load checkpoint_id": lambda url: dcp.load(SD, storage_reader=Reader("."), checkpoint_id=url, no_dist=True),
}


@pytest.mark.parametrize("url", ["file:///tmp/ck", "gs://b/c", "HTTPS://host/x"])  # s3:// is taken: test_s3_*.py
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_url_is_refused_by_name_and_nothing_is_created(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, entry: str, url: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnsupportedLocation, match="locations are not supported") as info:
        ENTRY_POINTS[entry](url)
    assert info.value.scheme == url.split(":")[0] and info.value.path == url
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, ValueError)
    assert list(tmp_path.iterdir()) == []  # no folder "s3:" (nor anything else) was made


@pytest.mark.parametrize("name", ["s3:", "dir/s3://x", "ck:pt"])
def test_local_names_with_colons_are_still_paths(tmp_path: pathlib.Path, name: str) -> None:
    """Only a scheme at the start makes a URL: a path holding a colon (or '://' further in) is a path."""
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    save(SD, path)
    assert torch.equal(load(path)["w"], SD["w"])


def test_load_mmap_of_an_object_says_it_needs_a_local_file() -> None:
    """It said "s3:// locations are not supported here: ckptio reads and writes ... s3:// locations" (issue 43)."""
    with pytest.raises(UnsupportedLocation) as info:
        load_mmap("s3://bucket/run/c.ckpt")
    assert str(info.value) == (
        "s3://bucket/run/c.ckpt: load_mmap maps a local file, not a URL: use load or load_into for an object"
    )
