"""`gdsbench smoke`: the first run on a GPU server as one command, everything written to one folder.

Each step runs as its own process (argument lists, never a shell) with a time limit, writes its output to
a numbered file, and never stops the steps after it; `00-summary.txt` (and `summary.json`) says what each
step did: `done`, `failed (exit N)` or `skipped: <reason>` (a missing tool: with the line that installs it), then
what the run proved and what it did not (the skipped and failed steps', and the cases a sweep skipped, each with its
reason). GPU steps run only where torch sees a CUDA device and are otherwise `skipped: no CUDA device`. Installing CUDA torch and kvikio is an ops step before it
(tools/gpu_install.py, which `make gpu-smoke` runs first), not part of the run.
docs/gds-server.md says what to look at in each file. Designed for under 25 minutes on one H100.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gdsbench.testbeds.smoke import plan


@dataclass
class Smoke:
    """One smoke run: where it writes, where its test files go, what it may do."""

    out: Path
    directory: Path
    gpu: bool = True
    quick: bool = False
    outcomes: list[dict[str, Any]] = field(default_factory=list)
    cuda_reason: list[str | None] = field(default_factory=list)  # torch's answer, asked once
    swept: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)  # step -> its sweep's measured
    # cases (engine, transfer, patterns) and skip reasons

    def python(self, *args: str) -> list[str]:
        """This interpreter (the venv gdsbench runs in) with `args`."""
        return [sys.executable, *args]

    def run(self, name: str, argv: list[str], log: str, timeout: float, append: bool = False) -> int:
        """Run one command, its stdout and stderr to `log` in the folder; return its exit status."""
        with open(self.out / log, "a" if append else "w") as f:
            f.write(f"$ {' '.join(argv)}\n")
            f.flush()
            try:
                return subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout, check=False).returncode
            except subprocess.TimeoutExpired:
                f.write(f"\n{name}: timed out after {timeout:.0f}s\n")
                return 124
            except OSError as exc:
                f.write(f"\n{name}: cannot start {argv[0]}: {exc.strerror}\n")
                return 127

    def step(self, name: str, skip: str | None, body: Callable[[], int | str], proves: str) -> None:
        """Run (or skip) one step and record its outcome, its duration and what it `proves` when done; a body
        returns its exit status, or why it found nothing to run (then the step is skipped)."""
        started = time.monotonic()
        result = skip or body()
        status = (
            f"skipped: {result}" if isinstance(result, str) else ("done" if result == 0 else f"failed (exit {result})")
        )
        measured, skipped = self.swept.pop(name, ([], []))
        proves += f": {', '.join(measured)} measured" if measured else ""
        self.outcomes.append(
            {
                "step": name,
                "status": status,
                "seconds": round(time.monotonic() - started, 1),
                "proves": proves,
                "cases_skipped": skipped,
            }
        )
        print(f"smoke: {name}: {status}", file=sys.stderr, flush=True)

    def cuda(self, fresh: bool = False) -> str | None:
        """None when torch (as installed now, asked in a child process) sees a CUDA device, else why not."""
        if fresh or not self.cuda_reason:
            self.cuda_reason[:] = [self.ask_cuda()]
        return self.cuda_reason[0]

    def ask_cuda(self) -> str | None:
        """Ask torch in a child process whether it sees a CUDA device."""
        probe = "import torch; print(torch.cuda.is_available(), torch.__version__, torch.version.cuda)"
        try:
            out = subprocess.run(self.python("-c", probe), capture_output=True, text=True, timeout=300).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            return "torch could not be asked"
        if out[:1] == ["True"]:
            return None
        if not gpu_host():
            return "no CUDA device"
        return f"no CUDA device visible to torch {' '.join(out[1:2])} (CUDA build {' '.join(out[2:3])})"

    def summary(self) -> int:
        """Write 00-summary.txt and summary.json; exit status 1 when any step failed."""
        lines = [f"{o['step']:<28} {o['seconds']:>7.1f}s  {o['status']}" for o in self.outcomes]
        text = ["gdsbench smoke", *lines, "", "proven:", *proven(self.outcomes), "", "not proven:"]
        (self.out / "00-summary.txt").write_text("\n".join([*text, *not_proven(self.outcomes)]) + "\n")
        (self.out / "summary.json").write_text(json.dumps(self.outcomes, indent=2) + "\n")
        return 1 if any(o["status"].startswith("failed") for o in self.outcomes) else 0


def proven(outcomes: list[dict[str, Any]]) -> list[str]:
    """What the steps that ran to the end showed, one line each."""
    return [f"  {o['step'][:2]} {o['proves']}" for o in outcomes if o["status"] == "done" and o["proves"]]


def not_proven(outcomes: list[dict[str, Any]]) -> list[str]:
    """What the run did not show, and why: skipped or failed steps, and the cases a finished sweep skipped."""
    lines = [
        f"  {o['step'][:2]} {o['proves']}: {o['status']}" for o in outcomes if o["status"] != "done" and o["proves"]
    ]
    lines += [f"  {o['step'][:2]} {reason}" for o in outcomes if o["status"] == "done" for reason in o["cases_skipped"]]
    return lines or ["  (nothing: every step ran to the end)"]


def gpu_host() -> bool:
    """Whether this host has an NVIDIA GPU at all (driver device node or nvidia-smi), whatever torch says."""
    return Path("/dev/nvidia0").exists() or (
        shutil.which("nvidia-smi") is not None
        and subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0
    )


def run(out: Path, directory: Path, gpu: bool = True, quick: bool = False) -> int:
    """Every smoke step in order (plan.STEPS), then the summary; the exit status of the whole run."""
    out.mkdir(parents=True, exist_ok=True)
    made = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    smoke = Smoke(out, directory, gpu, quick)
    try:
        for step in plan.STEPS:
            step(smoke)
    finally:
        if made and not any(directory.iterdir()):
            directory.rmdir()  # ours, and empty: each sweep removed the files it made
    return smoke.summary()
