"""Joins the process group and all-reduces once; rank 1 fails in the first attempt only.

Run with --max_restarts=1: the launcher starts the whole group again and the second attempt
(TORCHELASTIC_RESTART_COUNT=1) must be able to init_process_group on the same MASTER_ADDR:PORT.
Each rank of each attempt writes OUTDIR/attempt<N>.rank<R>.json after its all-reduce.
"""
import json
import os
import sys

import torch
import torch.distributed as dist


def main():
    out_dir = sys.argv[1]
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    with open(os.path.join(out_dir, f"attempt{attempt}.rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world_size": dist.get_world_size(), "all_reduce": t.item(),
                   "restart_count": attempt,
                   "max_restarts": os.environ.get("TORCHELASTIC_MAX_RESTARTS"),
                   "master_addr": os.environ["MASTER_ADDR"],
                   "master_port": os.environ["MASTER_PORT"]}, f)
    if attempt == "0" and rank == 1:
        raise RuntimeError("rank 1 fails in the first attempt")
    dist.barrier()  # in the first attempt rank 0 waits here until rank 1's failure stops it
    dist.destroy_process_group()
    print(f"rank {rank}: attempt {attempt} done", flush=True)


if __name__ == "__main__":
    main()
