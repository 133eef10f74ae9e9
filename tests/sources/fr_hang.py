"""Test helper: two gloo ranks where rank 1 skips a collective; each writes its real flight recorder dump.

Run as ``python fr_hang.py RANK PORT OUT_PREFIX``. Rank 0 enters a third all_reduce that rank 1
never calls; after 3 s both ranks dump c10d's flight recorder (what the NCCL watchdog does on a
timeout) to ``OUT_PREFIX<rank>``; rank 1 exits once rank 0's dump is there (its exit would
end rank 0's wait with an error before the dump).
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _dump_fr_trace

rank, port, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, TORCH_FR_BUFFER_SIZE="64")
dist.init_process_group("gloo", rank=rank, world_size=2)


def dump_then_exit() -> None:
    time.sleep(3)
    with open(f"{prefix}{rank}.part", "wb") as f:
        f.write(_dump_fr_trace())
    os.rename(f"{prefix}{rank}.part", f"{prefix}{rank}")
    while rank == 1 and not os.path.exists(f"{prefix}0"):
        time.sleep(0.1)
    os._exit(0)


threading.Thread(target=dump_then_exit, daemon=True).start()
tensor = torch.ones(4)
dist.all_reduce(tensor)
dist.all_reduce(tensor)
if rank == 0:
    dist.all_reduce(tensor)  # rank 1 never joins
time.sleep(30)
