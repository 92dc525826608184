"""How much a `gdsbench compare` gate can see on this disk, measured: how often an A/A pair (the same sweep twice,
nothing changed) is called a change, and the smallest real slowdown it calls a regression, with 3 and with 5
interleaved repetitions.

The sweep: fio O_DIRECT sequential read and write (end_fsync) of 1 MiB requests, 1 s each, in `--directory`.
A/A: `--pairs` pairs of sweeps run back to back, each pair compared. Power: a base sweep, then the same sweep in a
blkio cgroup (gdsbench.testbeds.throttle) that caps the disk's read and write bandwidth at `fraction` x the base's
median of that pattern, for each `--fractions`; each compared with the base at `--threshold`. Printed: a markdown
table of verdicts per repetition count; `--json` keeps every comparison. Root (the cgroup).

    sudo .venv/bin/python benchmarks/gate_power.py --directory /var/tmp/gdsbench-gate --pairs 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from gdsbench import compare, flags, results
from gdsbench.report import tables
from gdsbench.testbeds import throttle

ROOT = Path(__file__).resolve().parents[1]
MATRIX = {
    "engine": ["fio"],
    "pattern": ["read", "write"],
    "io_size": ["1M"],
    "threads": [1],
    "iodepth": [4],
    "transfer": ["CPU_ONLY"],
    "end_fsync": [True],
}


def sweep(work: Path, name: str, directory: Path, repetitions: int, group: Path | None = None) -> Path:
    """One sweep of MATRIX (in `group`'s throttle where given); its CSV."""
    config = work / f"{name}.yaml"
    document = {
        "name": name,
        "directory": str(directory),
        "file_size": "256M",
        "runtime": "1s",
        "repetitions": repetitions,
        "interleave": True,
        "allow_root_filesystem": True,
        "matrix": MATRIX,
    }
    config.write_text(yaml.safe_dump(document))
    out = work / f"out-{name}"
    argv = [sys.executable, "-m", "gdsbench", "sweep", str(config), "-o", str(out)]
    enter = None if group is None else (lambda: throttle.enter(group))
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, preexec_fn=enter)
    if done.returncode != 0:
        raise SystemExit(f"sweep {name} failed: {done.stderr[-2000:]}")
    return next(out.glob("*.csv"))


def verdicts(base: Path, new: Path, threshold: float) -> list[dict[str, Any]]:
    """compare's verdict per case (flags as the gate judges them)."""
    table = compare.compare_files(base, new, threshold).table
    return [
        {
            "pattern": tables.parse_case(case).get("pattern", ""),
            "verdict": row.verdict,
            "regression": bool(row.regression),
            "ratio": round(float(row.ratio), 3),
            "flags": flags.text(n for cell in (row.base_flags, row.new_flags) for n in flags.parse(cell)),
        }
        for case, row in zip(table["case"], table.itertuples())
    ]


def medians(csv_path: Path) -> dict[str, float]:
    """The median bandwidth of each pattern (bytes/s)."""
    frame = results.load([csv_path])
    ok = frame[frame["status"] == "ok"]
    return {str(p): float(group["bw_bytes"].median()) for p, group in ok.groupby("pattern")}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--directory", type=Path, default=Path("/var/tmp/gdsbench-gate"))
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--repetitions", default="3,5")
    p.add_argument("--fractions", default="0.95,0.9,0.8,0.7,0.5")
    p.add_argument("--threshold", type=float, default=0.10)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if throttle.available():
        raise SystemExit(throttle.available())
    args.directory.mkdir(parents=True, exist_ok=True)
    found: dict[str, Any] = {"threshold": args.threshold, "aa": {}, "power": {}}
    with tempfile.TemporaryDirectory(prefix="gdsbench-gate-") as tmp:
        work = Path(tmp)
        for reps in map(int, args.repetitions.split(",")):
            pairs = [
                (
                    sweep(work, f"aa{reps}-{i}a", args.directory, reps),
                    sweep(work, f"aa{reps}-{i}b", args.directory, reps),
                )
                for i in range(args.pairs)
            ]
            found["aa"][reps] = [v for a, b in pairs for v in verdicts(a, b, args.threshold)]
            base = sweep(work, f"base{reps}", args.directory, reps)
            rates = medians(base)
            found["power"][reps] = {}
            for fraction in map(float, args.fractions.split(",")):
                with throttle.throttled(args.directory, rates["read"] * fraction, rates["write"] * fraction) as group:
                    slow = sweep(work, f"slow{reps}-{fraction}", args.directory, reps, group)
                found["power"][reps][fraction] = verdicts(base, slow, args.threshold)
            print(table(reps, found["aa"][reps], found["power"][reps]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(found, indent=2))
    return 0


def table(reps: int, aa: list[dict[str, Any]], power: dict[float, list[dict[str, Any]]]) -> str:
    """The verdicts of one repetition count as markdown."""
    counts = Counter(v["verdict"] for v in aa)
    lines = [
        f"### {reps} repetitions",
        "",
        f"A/A cases: {len(aa)}: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())),
        "",
        "| throttled to | read verdict (ratio) | write verdict (ratio) |",
        "|---|---|---|",
    ]
    for fraction, cases in power.items():
        cells = {
            c["pattern"]: f"{c['verdict']}{' REGRESSION' if c['regression'] else ''} ({c['ratio']:.2f})" for c in cases
        }
        lines.append(f"| {fraction:.2f} x base | {cells.get('read', '-')} | {cells.get('write', '-')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
