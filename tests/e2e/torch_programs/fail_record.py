"""Rank 1 raises right after joining the process group; rank 0 keeps working until it is stopped.

The entry point is decorated with torchelastic's @record, as torchrun's documentation asks: the
exception is written as JSON to the file named by TORCHELASTIC_ERROR_FILE, so that the launcher can
name it as the job's root cause.
"""
import time

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 fails on purpose")
    time.sleep(60)  # rank 0's long training step; the launcher stops it when rank 1 fails


if __name__ == "__main__":
    main()
