#!/usr/bin/env python3
"""FAKE gdsio, for tests only: checks its arguments as gdsio does and prints REAL recorded gdsio output.

This machine has no GPU and no GDS tools, so the tests run gdsbench's gdsio runner against this stand-in.
It is as strict as the real gdsio where that is known: it takes the options of the gdsio version in
$FAKE_GDSIO_VERSION (1.12 by default: -a, -M, -P, -J exist, -p and -b take no argument; 1.1 has none of
those four) and refuses anything else (unknown option, unknown -x/-I value, no -s, -D with -f) by printing
that version's own usage text (tests/data/gdsio/usage-<version>.txt), as `-h` does; a read (-I 0/2) of a
-D directory needs every gdsio.<n> of its -w threads written first at -s bytes ("must first execute write
loads", NVIDIA's configuration guide); a -D write creates the per-thread files as gdsio does. It prints the
recorded output file chosen by $FAKE_GDSIO_OUTPUT (a name in tests/data/gdsio/) or, by default, one recorded
with the same -I/-x. A file named error-* is printed as gdsio's error and the fake exits 1. Every call is
appended to $FAKE_GDSIO_LOG when set.
"""

import getopt
import os
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "gdsio"
OPTSTRINGS = {
    "1.12": "f:D:d:n:m:w:s:o:i:pbVx:B:I:T:k:URFa:M:P:Jh",
    "1.1": "f:D:d:n:m:w:s:o:i:pbVx:B:I:T:k:URFh",
}
DEFAULT_OUTPUT = {  # (-I, -x) -> a recording made with the same io type and transfer type
    ("0", "0"): "read-gpud-8threads-timebased.txt",
    ("1", "0"): "write-gpud-4k.txt",
    ("0", "1"): "read-cpuonly-4threads.txt",
    ("1", "1"): "write-read-cpuonly-verify.txt",
    ("1", "2"): "write-cpu-gpu-8k-file.txt",
    ("1", "6"): "write-gpu-batch-iodepth10.txt",
}
SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "": 1}


def version() -> str:
    """The gdsio version this fake plays."""
    return os.environ.get("FAKE_GDSIO_VERSION", "1.12")


def usage(problem: str, status: int = 1) -> None:
    """Print gdsio's usage text after the problem, as gdsio does, and exit."""
    if problem:
        print(problem)
    print((DATA / f"usage-{version()}.txt").read_text(), end="")
    sys.exit(status)


def size(text: str) -> int:
    """A gdsio size: digits with an optional K/M/G suffix (powers of 2)."""
    number, suffix = (text[:-1], text[-1].lower()) if text[-1:].isalpha() else (text, "")
    if not number.isdigit() or suffix not in SUFFIX:
        usage(f"invalid size {text}")
    return int(number) * SUFFIX[suffix]


def check(args: dict) -> None:
    """Refuse what gdsio refuses."""
    if "-h" in args:
        usage("", status=0)
    if "-s" not in args:
        usage("file size not specified")
    if ("-D" in args) == ("-f" in args):
        usage("specify one of -D <directory> or -f <file>")
    if args.get("-x", "0") not in [str(n) for n in range(8)]:
        usage(f"invalid xfer type {args.get('-x')}")
    if args.get("-I", "0") not in ("0", "1", "2", "3"):
        usage(f"invalid io type {args.get('-I')}")
    size(args.get("-i", "4K"))


def files(args: dict) -> list:
    """The per-thread files of a -D run."""
    return [Path(args["-D"]) / f"gdsio.{n}" for n in range(int(args.get("-w", "1")))]


def main(argv: list) -> None:
    """Check the options, read or make the files of a -D run, print a recording."""
    if os.environ.get("FAKE_GDSIO_LOG"):
        with open(os.environ["FAKE_GDSIO_LOG"], "a") as log:
            log.write(" ".join(argv) + "\n")
    try:
        opts, _ = getopt.getopt(argv, OPTSTRINGS[version()])
    except getopt.GetoptError as exc:
        usage(str(exc))
    args = dict(opts)
    check(args)
    file_size, io = size(args["-s"]), args.get("-I", "0")
    if "-D" in args and io in ("0", "2"):
        for path in files(args):
            if not path.is_file() or path.stat().st_size < file_size:
                print(f"FAKE gdsio: {path} must be written (-I 1) before it is read", file=sys.stderr)
                sys.exit(1)
    if "-D" in args and io in ("1", "3"):
        for path in files(args):
            with open(path, "ab") as f:
                f.truncate(max(file_size, f.tell()))
    name = os.environ.get("FAKE_GDSIO_OUTPUT") or DEFAULT_OUTPUT.get((io, args.get("-x", "0")))
    if name is None:
        usage("fake gdsio: no recording for this -I/-x; set FAKE_GDSIO_OUTPUT")
    text = (DATA / name).read_text()
    if name.startswith("error"):
        print(text, end="", file=sys.stderr)
        sys.exit(1)
    print(text, end="")


if __name__ == "__main__":
    main(sys.argv[1:])
