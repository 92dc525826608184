"""An ops step before the first GPU run (`make gpu-smoke` runs it, then `gdsbench smoke`): in this venv, on a
GPU host whose torch is a CPU build, PyPI's CUDA wheel of the same torch version; then kvikio for torch's CUDA
major (kvikio-cu12 or -cu13) and nvidia-ml-py. Writes 02-install.log, 02-torch-cuda.txt and 02-pip-list.txt
into OUT (the smoke run's folder); argument lists, never a shell. Without a GPU it installs nothing and says so.

    python tools/gpu_install.py results/gpu-smoke-<host>-<stamp>
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

VERSION = "import torch; print(torch.__version__.split('+')[0])"
SEES_CUDA = "import torch; print(torch.cuda.is_available())"
CUDA_MAJOR = "import torch; print((torch.version.cuda or '').split('.')[0])"


def run(argv: list[str], log: Path, timeout: float) -> tuple[int, str]:
    """Run one command, appending the command and its output to `log`; return its exit status and stdout."""
    with log.open("a") as f:
        f.write(f"$ {' '.join(argv)}\n")
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        f.write(done.stdout + done.stderr)
    return done.returncode, done.stdout.strip()


def gpu_host() -> bool:
    """Whether this host has an NVIDIA GPU at all, whatever torch says (the smoke run's own test)."""
    from gdsbench.testbeds.smoke import gpu_host as smoke_gpu_host

    return smoke_gpu_host()


def install(out: Path) -> int:
    """The install step; its exit status (0 when torch sees CUDA afterwards, or there is no GPU)."""
    out.mkdir(parents=True, exist_ok=True)
    log, python = out / "02-install.log", sys.executable
    if not gpu_host():
        log.write_text("no GPU on this host: nothing installed\n")
        return 0
    _, version = run([python, "-c", VERSION], log, 120)
    _, sees = run([python, "-c", SEES_CUDA], log, 300)
    if sees != "True":  # a CPU build: PyPI's Linux wheel of the same version is the CUDA one
        run([python, "-m", "pip", "uninstall", "-y", "torch"], log, 300)
        run([python, "-m", "pip", "install", f"torch=={version}"], log, 900)
    _, major = run([python, "-c", CUDA_MAJOR], log, 120)
    (out / "02-torch-cuda.txt").write_text(major + "\n")
    if not major:
        with log.open("a") as f:
            f.write("torch has no CUDA build after the install: kvikio not installed\n")
        return 1
    rc, _ = run([python, "-m", "pip", "install", f"kvikio-cu{major}", "nvidia-ml-py"], log, 900)
    _, listing = run([python, "-m", "pip", "list"], log, 120)
    (out / "02-pip-list.txt").write_text(listing + "\n")
    _, sees = run([python, "-c", SEES_CUDA], log, 300)
    return rc or (0 if sees == "True" else 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the smoke run's folder")
    sys.exit(install(parser.parse_args().out))


if __name__ == "__main__":
    main()
