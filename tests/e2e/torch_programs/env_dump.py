"""Writes what a library sees of its launcher: is_torchelastic_launched() and the environment.

    torchrun --nproc_per_node=2 env_dump.py OUTDIR   # -> OUTDIR/env.<RANK>.json
"""
import json
import os
import sys

import torch.distributed as dist


def main():
    out_dir = sys.argv[1]
    rank = os.environ["RANK"]
    with open(os.path.join(out_dir, f"env.{rank}.json"), "w") as f:
        json.dump({"is_torchelastic_launched": dist.is_torchelastic_launched(),
                   "env": dict(os.environ)}, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
