"""What runs inside each rank of a distributed checkpoint case (torch imported): the rank's work (rank.py), its
share of the state (state.py) and its join to the process group (join.py). Never imported by the sweep process,
which only starts the rank program (gdsbench.cli_rank)."""
