"""The start-up reference: what bench/startup_worker.cpp does, in plain PyTorch.

Each rank joins the process group (Gloo, env:// rendezvous from torchrun), all-reduces one small
tensor, checks the sum and exits. Timed as `torchrun --nproc_per_node=N bench/startup_ref.py`
against `launch --nproc_per_node=N startup_worker`.
"""
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo")
    ones = torch.ones(4)
    dist.all_reduce(ones)
    world = dist.get_world_size()
    if ones[0].item() != world:
        print(f"startup_ref: rank {dist.get_rank()} of {world}: all_reduce of ones gave "
              f"{ones[0].item()}, expected {world}", file=sys.stderr)
        return 1
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
