"""Rank 1 raises right after joining the process group; rank 0 keeps working until it is stopped.

No @record: nothing writes TORCHELASTIC_ERROR_FILE, so the launcher only sees the exit code and
the traceback the interpreter prints on stderr.
"""
import time

import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        raise RuntimeError("rank 1 fails on purpose")
    time.sleep(60)  # rank 0's long training step; the launcher stops it when rank 1 fails


if __name__ == "__main__":
    main()
