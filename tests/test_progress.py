"""The sweep's progress bar under Ctrl-C: a stop that lands while its refresh thread starts or stops waits
for that to finish, then stops the sweep as a plain KeyboardInterrupt."""

import io
import os
import signal

import pytest
from rich.console import Console
from rich.progress import Progress

from gdsbench import progress


@pytest.fixture(autouse=True)
def ctrl_c_raises():
    """SIGINT raising KeyboardInterrupt, as in the CLI (an xdist worker ignores it), restored after."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_signal_held_back_is_acted_on_at_the_end_of_the_section():
    reached = []
    with pytest.raises(KeyboardInterrupt), progress.signals_held():
        os.kill(os.getpid(), signal.SIGINT)
        reached.append("after the signal")
    assert reached == ["after the signal"]


def test_a_ctrl_c_while_the_bar_starts_stops_it_whole(monkeypatch):
    """In CI a SIGINT landed inside threading's start of rich's refresh thread and came out as
    RuntimeError('release unlocked lock'), exit 1 instead of 130: here the start finishes, then the stop."""
    steps = []
    real_start, real_stop = Progress.start, Progress.stop

    def start_under_a_signal(self):
        os.kill(os.getpid(), signal.SIGINT)
        real_start(self)
        steps.append("started")

    def stop(self):
        real_stop(self)
        steps.append("stopped")

    monkeypatch.setattr(Progress, "start", start_under_a_signal)
    monkeypatch.setattr(Progress, "stop", stop)
    bar = Progress(console=Console(file=io.StringIO()))
    with pytest.raises(KeyboardInterrupt), progress.live_bar(bar):
        steps.append("inside")
    assert steps == ["started", "stopped"] and not bar.live.is_started
