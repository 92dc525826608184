"""run_tool: an argument list, never a shell; a timeout or Ctrl-C stops the tool with everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gdsbench.errors import ToolError
from gdsbench.runners.base import run_tool

#: A tool that forks, as fio forks its jobs: the child starts a grandchild that records its pid and
#: sleeps with its output elsewhere (so nothing waits on it through the pipes), then the child sleeps.
FORKING_TOOL = textwrap.dedent(
    """\
    import subprocess, sys, time
    pid_file = sys.argv[1]
    grandchild = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)",
         pid_file],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    print("started", flush=True)
    time.sleep(120)
    """
)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie nobody has reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_for_pid(pid_file: Path, seconds: float = 20) -> int:
    """The pid the grandchild wrote, once it has written it."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = pid_file.read_text() if pid_file.exists() else ""
        if text:
            return int(text)
        time.sleep(0.05)
    raise AssertionError("the grandchild never wrote its pid")


def gone_within(pid: int, seconds: float) -> bool:
    """Poll until `pid` has exited, at most `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def forking_tool(tmp_path: Path):
    """argv of the forking tool and its grandchild's pid file; kills a surviving grandchild afterwards."""
    script = tmp_path / "forking_tool.py"
    script.write_text(FORKING_TOOL)
    pid_file = tmp_path / "grandchild.pid"
    yield [sys.executable, str(script), str(pid_file)], pid_file
    if pid_file.exists() and pid_file.read_text() and alive(int(pid_file.read_text())):
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_timeout_kills_the_tool_and_every_process_it_started(forking_tool) -> None:
    argv, pid_file = forking_tool
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 3s"):
        run_tool(argv, timeout=3)
    assert time.monotonic() - started < 15, "run_tool returned promptly"
    grandchild = wait_for_pid(pid_file)
    assert gone_within(grandchild, 5), f"grandchild {grandchild} still runs after the timeout"


def test_interrupt_kills_the_tool_and_every_process_it_started(forking_tool, tmp_path: Path) -> None:
    """Ctrl-C in the caller (the tool runs in its own session, so the terminal's SIGINT reaches only us)."""
    argv, pid_file = forking_tool
    caller = tmp_path / "caller.py"
    caller.write_text(
        textwrap.dedent(
            f"""\
            import sys
            from gdsbench.runners.base import run_tool
            try:
                run_tool({argv!r}, timeout=60)
            except KeyboardInterrupt:
                print("interrupted", flush=True)
                sys.exit(130)
            """
        )
    )
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, str(caller)], cwd=root, stdout=subprocess.PIPE, text=True)
    grandchild = wait_for_pid(pid_file)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in out
    assert gone_within(grandchild, 5), f"grandchild {grandchild} still runs after Ctrl-C"


def test_output_and_exit_status_come_back(tmp_path: Path) -> None:
    proc = run_tool([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 30)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_an_argument_is_never_a_shell_word(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    proc = run_tool([sys.executable, "-c", "import sys; print(sys.argv[1])", f"x; touch {marker}"], 30)
    assert proc.stdout == f"x; touch {marker}\n" and not marker.exists()


def test_a_missing_tool_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=r"cannot start .*no-such-tool"):
        run_tool([str(tmp_path / "no-such-tool")], 5)
