"""files.replace_file: the one atomic replace behind the sidecar, --resume's rewrite and the testbeds' journals."""

from __future__ import annotations

import os

import pytest

from gdsbench import files, results


def test_a_new_file_gets_the_umask_mode_and_a_replaced_one_keeps_its_mode(tmp_path):
    fresh = tmp_path / "sub" / "new.json"
    files.replace_file(fresh, lambda out: out.write("one"))
    umask = os.umask(0)
    os.umask(umask)
    assert fresh.read_text() == "one" and fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    fresh.chmod(0o600)
    files.replace_file(fresh, lambda out: out.write("two"))
    assert fresh.read_text() == "two" and fresh.stat().st_mode & 0o777 == 0o600


def test_a_writer_that_fails_leaves_the_old_file_whole_and_no_temporary(tmp_path):
    target = tmp_path / "rows.csv"
    target.write_text("kept\n")

    def half_then_fail(out):
        out.write("half")
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        files.replace_file(target, half_then_fail)
    assert target.read_text() == "kept\n" and os.listdir(tmp_path) == ["rows.csv"]


def test_rewrite_replaces_a_csv_row_for_row(tmp_path):
    target = tmp_path / "r.csv"
    target.write_text("a,b\n1,2\n3,4\n")
    results.rewrite(target, [["a", "b"], ["1", "2"]])
    assert target.read_text() == "a,b\n1,2\n"
