"""Data-parallel training on CPU with gloo, the way the PyTorch DDP tutorial writes it.

Start it with a launcher that sets torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...):

    torchrun --nproc_per_node=2 ddp_train.py OUT.json

A two-layer MLP learns a fixed random linear map from synthetic data (fixed seed, nothing is
downloaded); DistributedSampler gives each rank its shard of every epoch. At the end rank 0 writes
OUT.json: the SHA-256 of the final parameters (their float32 bytes, in order), the loss before and
after training, and each rank's own parameter hash (DDP keeps the replicas identical).
"""
import argparse
import hashlib
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

SAMPLES, FEATURES, HIDDEN = 512, 16, 32
BATCH, EPOCHS = 32, 5  # per rank: 256 samples -> 8 steps an epoch, 40 in all on 2 ranks


def synthetic_dataset():
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    teacher = torch.randn(FEATURES, 1, generator=g)
    y = x @ teacher + 0.1 * torch.randn(SAMPLES, 1, generator=g)
    return TensorDataset(x, y)


def parameter_sha256(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def mean_loss(model, dataset, loss_fn):
    x, y = dataset.tensors
    with torch.no_grad():
        return loss_fn(model(x), y).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    ddp_model = DDP(model)
    dataset = synthetic_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)

    initial_loss = mean_loss(model, dataset, loss_fn)
    steps = 0
    seen = 0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            steps += 1
            seen += len(x)
    final_loss = mean_loss(model, dataset, loss_fn)

    hashes = [None] * world_size
    dist.all_gather_object(hashes, parameter_sha256(model))
    seen_total = torch.tensor([seen])
    dist.all_reduce(seen_total)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"world_size": world_size, "steps": steps,
                       "samples_seen": int(seen_total.item()),
                       "initial_loss": repr(initial_loss), "final_loss": repr(final_loss),
                       "param_sha256": hashes[0], "rank_sha256": hashes}, f)
        print(f"rank 0: {steps} steps, loss {initial_loss:.4f} -> {final_loss:.6f}, "
              f"params {hashes[0][:16]}", flush=True)
    # DDP's reducer holds the process group: drop it first, so that the group is destroyed by
    # destroy_process_group() and not from the reducer's destructor, which in torch 1.13 waits for
    # gloo's worker threads while holding the GIL they may need (a hang at exit, rarely;
    # pytorch/pytorch#56297).
    del ddp_model
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
