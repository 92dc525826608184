#!/usr/bin/env python3
"""FAKE gdsio, for tests only: checks its arguments as gdsio does and prints REAL recorded gdsio output.

This machine has no GPU and no GDS tools, so the tests run gdsbench's gdsio runner against this stand-in.
It parses gdsio's options, refuses what gdsio refuses (unknown -x/-I value, no -s, -D with -f) by printing
gdsio's own usage text (tests/data/gdsio/usage-1.1.txt), creates the per-thread files gdsio.<n> of a -D
write as gdsio does, and prints the recorded output file chosen by $FAKE_GDSIO_OUTPUT (a name in
tests/data/gdsio/) or, by default, one recorded with the same -I/-x. A file named error-* is printed as
gdsio's error and the fake exits 1. Every call is appended to $FAKE_GDSIO_LOG when set.
"""

import getopt
import os
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "gdsio"
OPTSTRING = "f:D:d:n:m:w:s:o:i:p:bVx:I:T:k:URFB:a:P:J"
DEFAULT_OUTPUT = {  # (-I, -x) -> a recording made with the same io type and transfer type
    ("0", "0"): "read-gpud-8threads-timebased.txt",
    ("1", "0"): "write-gpud-4k.txt",
    ("0", "1"): "read-cpuonly-4threads.txt",
    ("1", "1"): "write-read-cpuonly-verify.txt",
    ("1", "2"): "write-cpu-gpu-8k-file.txt",
    ("1", "6"): "write-gpu-batch-iodepth10.txt",
}
SUFFIX = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "": 1}


def usage(problem: str) -> None:
    """Print gdsio's usage text after the problem, as gdsio does, and exit 1."""
    print(problem)
    print((DATA / "usage-1.1.txt").read_text(), end="")
    sys.exit(1)


def size(text: str) -> int:
    """A gdsio size: digits with an optional K/M/G suffix (powers of 2)."""
    number, suffix = (text[:-1], text[-1].lower()) if text[-1:].isalpha() else (text, "")
    if not number.isdigit() or suffix not in SUFFIX:
        usage(f"invalid size {text}")
    return int(number) * SUFFIX[suffix]


def main(argv: list) -> None:
    """Check the options, make the files of a -D write, print a recording."""
    if os.environ.get("FAKE_GDSIO_LOG"):
        with open(os.environ["FAKE_GDSIO_LOG"], "a") as log:
            log.write(" ".join(argv) + "\n")
    try:
        opts, _ = getopt.getopt(argv, OPTSTRING)
    except getopt.GetoptError as exc:
        usage(str(exc))
    args = dict(opts)
    if "-s" not in args:
        usage("file size not specified")
    if ("-D" in args) == ("-f" in args):
        usage("specify one of -D <directory> or -f <file>")
    if args.get("-x", "0") not in [str(n) for n in range(8)]:
        usage(f"invalid xfer type {args.get('-x')}")
    if args.get("-I", "0") not in ("0", "1", "2", "3"):
        usage(f"invalid io type {args.get('-I')}")
    file_size, threads = size(args["-s"]), int(args.get("-w", "1"))
    size(args.get("-i", "4K"))
    if "-D" in args and args.get("-I", "0") in ("1", "3"):
        for n in range(threads):
            with open(Path(args["-D"]) / f"gdsio.{n}", "ab") as f:
                f.truncate(max(file_size, f.tell()))
    name = os.environ.get("FAKE_GDSIO_OUTPUT") or DEFAULT_OUTPUT.get((args.get("-I", "0"), args.get("-x", "0")))
    if name is None:
        usage("fake gdsio: no recording for this -I/-x; set FAKE_GDSIO_OUTPUT")
    text = (DATA / name).read_text()
    if name.startswith("error"):
        print(text, end="", file=sys.stderr)
        sys.exit(1)
    print(text, end="")


if __name__ == "__main__":
    main(sys.argv[1:])
