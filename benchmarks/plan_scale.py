"""DCP planning cost from 8 to 1,024 ranks, for DCP's own storage (`dcp`) and ckptio's (`dcp_fast`), without
starting 1,024 processes: the entry of benchmarks/planscale/ (the method in its modules' docstrings).

    python benchmarks/plan_scale.py --world-sizes 8,64,256,1024 --csv plan-scale.csv --plot plan-scale.png
    python benchmarks/plan_scale.py --validate 2,4,8,16 --csv validate.csv    # the model against real gloo runs
"""

import sys

from planscale import main

if __name__ == "__main__":
    sys.exit(main())
