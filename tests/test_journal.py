"""testbeds/journal.py: the one journal the one-host Ceph and the fast device keep of what they made."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from gdsbench import trusted
from gdsbench.testbeds.journal import Journal, undone_on_failure


@dataclass
class Made:
    """A testbed's record, as ceph's and fastdev's are: fields, then the steps taken."""

    name: str
    count: int = 0
    steps: list[str] = field(default_factory=list)


def test_each_step_is_recorded_whole_and_reads_back_as_made(tmp_path):
    folder = trusted.private_folder(tmp_path / "state")
    journal, made = Journal(folder / "made.json"), Made("bed")
    journal.record(made, "first")
    made.count = 2
    journal.record(made, "second")
    assert json.loads(journal.path.read_text()) == {"name": "bed", "count": 2, "steps": ["first", "second"]}
    assert journal.read(Made) == made and [p.name for p in folder.iterdir()] == ["made.json"]
    journal.erase()
    assert not journal.exists()


def test_a_record_in_a_folder_others_can_write_is_refused(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    (folder / "made.json").write_text(json.dumps({"name": "x", "count": 1, "steps": []}))
    with pytest.raises(trusted.UntrustedError, match="writable by others"):
        Journal(folder / "made.json").read(Made)


def test_a_failure_or_interrupt_is_undone_then_raised():
    undone = []
    with pytest.raises(KeyboardInterrupt), undone_on_failure(lambda: undone.append("down")):
        raise KeyboardInterrupt
    with undone_on_failure(lambda: undone.append("not asked")):
        pass
    assert undone == ["down"]
