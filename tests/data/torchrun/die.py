import os
import signal
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1 and sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if dist.get_rank() == 1 and sys.argv[1] == "raise":
    raise RuntimeError("rank 1 could not stage 2147483648 bytes")
dist.barrier()
