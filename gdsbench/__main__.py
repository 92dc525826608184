"""`python -m gdsbench` runs the command line."""

from gdsbench.cli import main

main()
