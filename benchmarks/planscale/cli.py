"""DCP planning cost from 8 to 1,024 ranks, for DCP's own storage (`dcp`: FileSystemWriter/Reader) and
ckptio's (`dcp_fast`: ckptio.Writer/Reader), without starting 1,024 processes.

    python benchmarks/plan_scale.py --world-sizes 8,64,256,1024 --csv plan-scale.csv --plot plan-scale.png
    python benchmarks/plan_scale.py --validate 2,4,8,16 --csv validate.csv    # the model against real gloo runs
"""

from __future__ import annotations

import argparse
import gc
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from .measure import ENGINES, Setup, freeze_heap
from .model import model_rows
from .real import real_rows
from .report import plot, ratio_table, ratios, table, write_csv, write_ratios


def sizes(text: str) -> list[int]:
    """`8,64,256` -> [8, 64, 256]."""
    return [int(x) for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--world-sizes", type=sizes, default=[8, 64, 256, 1024], help="comma-separated (default 8,64,256,1024)"
    )
    p.add_argument("--engines", default=",".join(ENGINES), help="dcp, dcp_fast or both (default)")
    p.add_argument("--reps", type=int, default=Setup.reps, help="repetitions per world size; the median counts")
    p.add_argument(
        "--budget", type=float, default=Setup.budget, help="no new repetition of a world size after this many seconds"
    )
    p.add_argument("--csv", type=Path, help="write the rows here (--validate: the model/real ratios)")
    p.add_argument("--plot", type=Path, help="write a PNG: seconds and metadata bytes vs world size")
    p.add_argument("--validate", type=sizes, help="model and real gloo runs at these world sizes (e.g. 2,4,8,16)")
    p.add_argument("--layers", type=int, help="transformer layers of the Llama-like model (default: its 32)")
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="where checkpoints go (removed)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the model at the world sizes (or the validation against real gloo runs); print, write, plot."""
    args = parser().parse_args(argv)
    engines = tuple(e for e in args.engines.split(",") if e)
    base = Path(tempfile.mkdtemp(prefix="plan-scale-", dir=args.dir))
    setup = Setup(base, engines, args.reps, args.budget, args.layers)
    try:
        model_rows(2, replace(setup, reps=1))  # imports and first-call costs, not counted
        freeze_heap()
        if args.validate:
            return validate(args.validate, setup, args.csv)
        rows = [row for world in args.world_sizes for row in model_rows(world, setup)]
    finally:
        gc.unfreeze()
        shutil.rmtree(base, ignore_errors=True)
    print(table(rows))
    if args.csv:
        write_csv(rows, args.csv)
    if args.plot:
        plot(rows, args.plot)
    return 0


def validate(worlds: list[int], setup: Setup, out: Path | None) -> int:
    """The model and real gloo runs at each world size; the ratios printed (and written to `out`)."""
    model, real = [], []
    for world in worlds:
        model += model_rows(world, setup)
        real += real_rows(world, setup)
    print("model:\n" + table(model) + "\n\nreal gloo runs:\n" + table(real) + "\n")
    rows = ratios(model, real)
    print(ratio_table(rows))
    if out:
        write_ratios(rows, out)
    return 0
