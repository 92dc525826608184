"""DCP planning cost from 8 to 1,024 ranks in one process, the package behind `benchmarks/plan_scale.py`:
`state` (the Llama-like state dict of Shard(0) DTensors), `measure` (rank 0's timer and a save-save-load
sequence), `peers` (what ranks 1..N-1 send rank 0), `model` (rank 0 real, its collectives fed by the peers),
`real` (gloo runs, for `--validate`), `report` (CSV, tables, figure, ratios) and `cli` (the command line).
"""

from .cli import main
from .measure import ENGINES, PHASES, Setup, Timer, make_writer, sequence
from .model import check_peers, model_rows, modelled
from .peers import Peers, check_equal
from .real import real_run
from .state import Spec, dtensor_state, fake_group, model_specs

__all__ = [
    "ENGINES",
    "PHASES",
    "Peers",
    "Setup",
    "Spec",
    "Timer",
    "check_equal",
    "check_peers",
    "dtensor_state",
    "fake_group",
    "main",
    "make_writer",
    "model_rows",
    "model_specs",
    "modelled",
    "real_run",
    "sequence",
]
