"""Checkpointer(recycle=True): the replaced generation becomes the spare the next save overwrites in
place, never while anything still reads it, and the result is byte for byte what a fresh save writes.
The spare is the Checkpointer's: closing it removes the spare; plain saves never touch it."""

from __future__ import annotations

import os
import pathlib

import pytest
import torch
from ckptio import Checkpointer, IOOptions, durable, load, save

from tests.untrusted import plant_file, plants_as_nobody, shared_folder

from .conftest import assert_same, random_tensor


def _state(tag: int, mib: int = 6) -> dict:
    """A state dict whose size and bytes depend on `tag` (odd lengths so tails and gaps vary)."""
    return {
        "tag": tag,
        "w": random_tensor(((mib << 20) // 2 + 77 * tag,), torch.bfloat16, seed=tag),
        "b": random_tensor((1000 + tag,), torch.float32, seed=100 + tag),
    }


def _recycling(path: pathlib.Path, **options: object) -> Checkpointer:
    """A recycling Checkpointer of `path`."""
    return Checkpointer(path, recycle=True, options=IOOptions(**options))  # type: ignore[arg-type]


def _spare(path: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(durable.spare_path(str(path)))


def _fresh_bytes(state: dict, directory: pathlib.Path) -> bytes:
    """What a save without recycling writes for `state`."""
    fresh = directory / "fresh" / "ckpt.pt"
    fresh.parent.mkdir(exist_ok=True)
    save(state, fresh)
    return fresh.read_bytes()


def test_third_save_overwrites_the_first_generations_blocks(tmp_path: pathlib.Path) -> None:
    """Gen 1 becomes the spare at save 2 and is overwritten in place (same inode) by save 3."""
    path = tmp_path / "ckpt.pt"
    ckpt = _recycling(path)
    assert not ckpt.save(_state(1)).recycled
    first = path.stat().st_ino
    assert not _spare(path).exists()
    assert not ckpt.save(_state(2)).recycled
    assert _spare(path).stat().st_ino == first
    assert torch.load(_spare(path), weights_only=True)["tag"] == 1  # the spare is a whole old generation
    assert ckpt.save(_state(3)).recycled
    assert path.stat().st_ino == first
    assert path.read_bytes() == _fresh_bytes(_state(3), tmp_path)
    assert_same(load(path), _state(3))
    assert torch.load(_spare(path), weights_only=True)["tag"] == 2


@pytest.mark.parametrize("sizes", [(24, 3), (3, 24)], ids=["shrinks", "grows"])
def test_recycled_file_of_another_size_equals_a_fresh_save(tmp_path: pathlib.Path, sizes: tuple[int, int]) -> None:
    """A bigger spare is cut to size, a smaller one extended; no stale byte survives."""
    path = tmp_path / "ckpt.pt"
    ckpt = _recycling(path)
    ckpt.save(_state(1, sizes[0]))
    ckpt.save(_state(2, sizes[0]))
    recycled_inode = _spare(path).stat().st_ino
    ckpt.save(_state(3, sizes[1]))
    assert path.stat().st_ino == recycled_inode
    assert path.read_bytes() == _fresh_bytes(_state(3, sizes[1]), tmp_path)


def test_open_reader_of_the_spare_is_never_overwritten(tmp_path: pathlib.Path) -> None:
    """A reader that opened generation 1 before it was replaced keeps reading generation 1."""
    path = tmp_path / "ckpt.pt"
    ckpt = _recycling(path)
    ckpt.save(_state(1))
    expected = path.read_bytes()
    with open(path, "rb") as reader:
        ckpt.save(_state(2))
        assert not ckpt.save(_state(3)).recycled
        assert os.fstat(reader.fileno()).st_ino != path.stat().st_ino
        assert reader.read() == expected
    assert_same(load(path), _state(3))
    assert torch.load(_spare(path), weights_only=True)["tag"] == 2


def test_mmap_loaded_tensors_of_the_spare_stay_intact(tmp_path: pathlib.Path) -> None:
    """Tensors mapped from generation 1 (torch.load(mmap=True)) survive two recycling saves."""
    path = tmp_path / "ckpt.pt"
    ckpt = _recycling(path)
    ckpt.save(_state(1))
    mapped = torch.load(path, weights_only=True, mmap=True)
    ckpt.save(_state(2))
    ckpt.save(_state(3))
    assert_same(mapped, _state(1))
    assert_same(load(path), _state(3))


def test_spare_still_linked_to_the_live_file_is_not_written(tmp_path: pathlib.Path) -> None:
    """A crash between link and rename leaves the spare as a second name of the live file: the
    next save must write a new file, leaving the live generation's bytes alone until the rename."""
    path = tmp_path / "ckpt.pt"
    ckpt = _recycling(path)
    ckpt.save(_state(1))
    expected = path.read_bytes()
    os.link(path, _spare(path))  # the state that crash leaves
    with open(path, "rb") as old:
        ckpt.save(_state(2))
        assert old.read() == expected
    assert_same(load(path), _state(2))
    assert torch.load(_spare(path), weights_only=True)["tag"] == 1


def test_spare_that_is_not_a_file_is_left_alone(tmp_path: pathlib.Path) -> None:
    """Something else at the spare's name (a directory) is neither used nor removed."""
    path = tmp_path / "ckpt.pt"
    with _recycling(path) as ckpt:
        ckpt.save(_state(1))
        _spare(path).mkdir()
        ckpt.save(_state(2))
        ckpt.save(_state(3))
    assert _spare(path).is_dir()  # not ours to remove, even on close
    assert_same(load(path), _state(3))


def test_without_recycle_no_spare_is_kept(tmp_path: pathlib.Path) -> None:
    """The default keeps one generation on disk, as before."""
    path = tmp_path / "ckpt.pt"
    for tag in (1, 2, 3):
        save(_state(tag), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]


def test_plain_saves_leave_the_spare_and_closing_removes_it(tmp_path: pathlib.Path) -> None:
    """A plain save never touches the Checkpointer's spare; closing the Checkpointer gives its space
    back, and a reader still holding that generation keeps its bytes."""
    path = tmp_path / "ckpt.pt"
    with _recycling(path) as ckpt:
        ckpt.save(_state(1))
        expected = path.read_bytes()
        with open(path, "rb") as reader:
            ckpt.save(_state(2))
            save(_state(3), path)
            assert torch.load(_spare(path), weights_only=True)["tag"] == 1
            ckpt.close()
            assert not _spare(path).exists() and reader.read() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pt"]
    assert_same(load(path), _state(3))


def test_buffered_backend_recycles_too(tmp_path: pathlib.Path) -> None:
    """Recycling is the durable layer's, not O_DIRECT's: buffered saves overwrite the spare as well."""
    path = tmp_path / "ckpt.pt"
    ckpt = _recycling(path, backend="buffered")
    ckpt.save(_state(1))
    first = path.stat().st_ino
    ckpt.save(_state(2))
    ckpt.save(_state(3))
    assert path.stat().st_ino == first
    assert path.read_bytes() == _fresh_bytes(_state(3), tmp_path)


@plants_as_nobody
def test_a_spare_planted_by_another_user_is_neither_adopted_nor_removed() -> None:
    """In a shared sticky folder, `nobody` plants a world-writable file under the spare's name: no save
    writes into it (root's checkpoint stays root's, writable by root alone) and closing leaves it be."""
    with shared_folder() as folder:
        path = folder / "ckpt.pt"
        plant_file(_spare(path), b"planted", mode=0o666)
        with _recycling(path) as ckpt:
            assert not any(ckpt.save(_state(tag)).recycled for tag in (1, 2, 3))
        info = path.stat()
        assert (info.st_uid, info.st_mode & 0o022) == (os.geteuid(), 0)
        assert _spare(path).read_bytes() == b"planted" and _spare(path).stat().st_uid != os.geteuid()
        assert_same(load(path), _state(3))


@plants_as_nobody
def test_a_stale_temp_name_planted_by_another_user_is_not_removed() -> None:
    """A file of `nobody`'s named like the temp file of a dead save on this host is another user's file:
    a save beside it leaves it where it is (only this user's own stale temps are cleaned up)."""
    with shared_folder() as folder:
        path = folder / "ckpt.pt"
        dead = f".{path.name}.{durable._host()}.{durable._boot_id()}.4194399.1.cafe0000{durable.TEMP_SUFFIX}"
        plant_file(folder / dead, b"nobody's")
        assert durable.stale_temps(str(path)) == [str(folder / dead)]  # the name alone says "dead writer"
        save(_state(1), path)
        assert (folder / dead).read_bytes() == b"nobody's"
        assert_same(load(path), _state(1))
