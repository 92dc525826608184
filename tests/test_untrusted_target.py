"""The sweep's directory: one another user made or can write is never trusted (its planted links are not
followed, nothing of theirs removed), a mistyped one is not made, and the console says what is measured."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdsbench.cli import cli
from tests.helpers import assert_exits, data_rows, write_config
from tests.untrusted import plant_link, plants_as_nobody, shared_folder, victim

pytestmark = [pytest.mark.needs_fio, pytest.mark.needs_odirect]


def sweep(config: Path, out: Path):
    """`gdsbench sweep CONFIG -o OUT`, in process."""
    return CliRunner().invoke(cli, ["sweep", str(config), "-o", str(out)])


def plant_test_files(folder: Path, outside: Path) -> tuple[Path, Path, bytes]:
    """`nobody`'s links under fio's first two test-file names (1 MiB files): one to a root-owned file, one to a
    file not yet there; both outside `folder`. Returns the victim, the absent file and the victim's bytes."""
    target, absent, before = victim(outside), outside / "made-through-a-link", b"root's own bytes\n"
    plant_link(folder / "gdsbench.1048576.0.0", target)
    plant_link(folder / "gdsbench.1048576.1.0", absent)
    return target, absent, before


def writes(tmp_path: Path, directory: Path, **extra) -> Path:
    """A 2-job fio write sweep of 1 MiB files in `directory`."""
    matrix = {"engine": ["fio"], "pattern": ["write"], "io_size": ["1M"], "threads": [2]}
    return write_config(tmp_path, directory=str(directory), file_size="1M", repetitions=1, matrix=matrix, **extra)


@plants_as_nobody
def test_a_directory_another_user_made_is_refused_and_its_links_not_followed(tmp_path: Path) -> None:
    """/tmp/gdsbench made by `nobody` with links named like fio's files: the sweep is refused, naming the owner;
    the root-owned file they point at is not written, no file appears through them, the links stay."""
    with shared_folder(mode=0o755, owner="nobody") as folder:
        target, absent, before = plant_test_files(folder, tmp_path)
        result = sweep(writes(tmp_path, folder), tmp_path / "out")
        assert target.read_bytes() == before and not absent.exists()
        assert_exits(result, 2)
        assert f"`directory` {folder}: owned by nobody (uid 65534)" in result.output
        assert sorted(p.name for p in folder.iterdir()) == ["gdsbench.1048576.0.0", "gdsbench.1048576.1.0"]


@plants_as_nobody
def test_a_sticky_shared_directory_gets_a_private_folder_of_its_own(tmp_path: Path) -> None:
    """In a sticky folder everyone writes (as /tmp), the sweep measures in a private folder made inside it, which
    it removes at the end: `nobody`'s links are neither followed nor removed (keep_files: false)."""
    with shared_folder() as folder:
        target, absent, before = plant_test_files(folder, tmp_path)
        result = sweep(writes(tmp_path, folder), tmp_path / "out")
        assert target.read_bytes() == before and not absent.exists()
        assert_exits(result, 0)
        assert f"target: {folder}/gdsbench-" in result.output and "private folder" in result.output
        assert [row["status"] for row in data_rows(next((tmp_path / "out").glob("*.csv")))] == ["ok"]
        assert sorted(p.name for p in folder.iterdir()) == ["gdsbench.1048576.0.0", "gdsbench.1048576.1.0"]
        assert all(p.is_symlink() and p.lstat().st_uid != os.geteuid() for p in folder.iterdir())


def test_a_link_at_a_test_files_name_is_refused(tmp_path: Path) -> None:
    """Even in a folder of the user's own, a link where a test file goes is refused, not written through."""
    folder = tmp_path / "target"
    folder.mkdir()
    target = victim(tmp_path)
    (folder / "gdsbench.1048576.0.0").symlink_to(target)
    result = sweep(writes(tmp_path, folder, allow_root_filesystem=True), tmp_path / "out")
    assert_exits(result, 2)
    assert f"{folder}/gdsbench.1048576.0.0 is a symbolic link" in result.output
    assert target.read_bytes() == b"root's own bytes\n"


def test_a_mistyped_directory_is_not_made(tmp_path: Path) -> None:
    """A directory whose parent does not exist (a typo) is refused, and nothing is made on the way."""
    result = sweep(writes(tmp_path, tmp_path / "mnt" / "nvme0" / "gdsbench"), tmp_path / "out")
    assert_exits(result, 2, one_line_error=True)
    assert f"nor does its parent {tmp_path}/mnt/nvme0 (a mistyped path?)" in result.output
    assert not (tmp_path / "mnt").exists()


def test_a_refused_sweep_leaves_no_empty_folder_and_the_console_names_the_target(tmp_path: Path) -> None:
    """The folder a sweep made is gone when it is refused later (here: on the root file system, even with
    keep_files: true); an accepted sweep says which folder, file system and device it measures."""
    from gdsbench import filesets

    folder = tmp_path / "target"
    if filesets.storage.mount_of(tmp_path).get("mount_point") != "/":
        pytest.skip("tmp_path is not on the root file system here")
    # keep_files: true, whose cleanup keeps files: the folder the refused sweep made is still removed
    result = sweep(writes(tmp_path, folder, keep_files=True, allow_root_filesystem=False), tmp_path / "out")
    assert_exits(result, 2)
    assert "is on the root file system" in result.output and not folder.exists()
    result = sweep(writes(tmp_path, folder, allow_root_filesystem=True), tmp_path / "out")
    assert_exits(result, 0)
    assert f"target: {folder}: {filesets.mount_text(folder)}" in result.output
