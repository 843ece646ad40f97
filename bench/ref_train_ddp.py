"""The reference: the course's MNIST net trained data-parallel with plain, idiomatic PyTorch DDP.

Run under torchrun (bench/torchrun_py311.py on Debian's torch 1.13) or alone (world of one).
Same net, per-worker batch, optimizer, threads and data as train_mnist; prints one JSON line per
rank at the end with the same keys as train_mnist's summary.

Like train_mnist, the whole dataset is one in-memory tensor and each step gathers its batch by
index (the sampler's indices, batched by BatchSampler). A DataLoader over the TensorDataset
with batch_size=100 would index and collate 100 single samples per step in Python, which costs
several percent of an epoch on this net and would handicap the reference.
"""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0 * 2.0 - 1.0).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


class MNIST(nn.Module):
    def __init__(self, pool_first=False):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, stride=1, padding=2)
        self.conv2 = nn.Conv2d(20, 20, 5, stride=1, padding=2)
        self.fc = nn.Linear(980, 10)
        self.pool_first = pool_first

    def forward(self, x):
        if self.pool_first:  # --tuned: the same function, relu on a quarter of the values
            x = F.relu(F.max_pool2d(self.conv1(x), 2, 2))
            x = F.relu(F.max_pool2d(self.conv2(x), 2, 2))
        else:
            x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        return self.fc(x.flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default=os.path.join(os.path.dirname(__file__), "..", "data", "mnist"))
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum"])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max_steps", type=int, default=0)
    p.add_argument("--log_interval", type=int, default=200)
    # Not used by run_all (the reference stays the plain program): the layout changes train_mnist
    # makes, for measuring how much of the gap a hand-tuned PyTorch program closes. Run it with
    # MALLOC_MMAP_THRESHOLD_=67108864 MALLOC_TRIM_THRESHOLD_=536870912 for train_mnist's mallopt.
    p.add_argument("--tuned", action="store_true",
                   help="channels-last weights and pool before relu, as train_mnist")
    args = p.parse_args()

    # The same intra-op threads as train_mnist: OMP_NUM_THREADS, which both sides get explicitly.
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.manual_seed(args.seed)

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "test")
    model = MNIST(pool_first=args.tuned)
    if args.tuned:
        model = model.to(memory_format=torch.channels_last)
    ddp = nn.parallel.DistributedDataParallel(model) if distributed else model
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    dataset = torch.utils.data.TensorDataset(x_train, y_train)
    if distributed:
        sampler = torch.utils.data.distributed.DistributedSampler(
            dataset, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True)
    else:
        sampler = torch.utils.data.RandomSampler(dataset)
    batches = torch.utils.data.BatchSampler(sampler, args.batch_size, drop_last=True)

    steps = 0
    train_seconds = 0.0
    loss_value = float("nan")
    for epoch in range(args.epochs):
        if distributed:
            sampler.set_epoch(epoch)
        ddp.train()
        start = time.perf_counter()
        for batch, indices in enumerate(batches):
            indices = torch.tensor(indices)
            x, y = x_train.index_select(0, indices), y_train.index_select(0, indices)
            loss = F.cross_entropy(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            if batch % args.log_interval == 0:
                loss_value = loss.item()
                print(f"epoch: {epoch}, batch: {batch}, loss is: [{loss_value:.8g}]", flush=True)
            if args.max_steps and steps >= args.max_steps:
                break
        train_seconds += time.perf_counter() - start
        if args.max_steps and steps >= args.max_steps:
            break

    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum())
                      for i in range(0, len(y_test), 1000))
    accuracy = correct / len(y_test)
    images = steps * args.batch_size
    print(json.dumps({
        "rank": rank, "world": world, "epochs": args.epochs, "steps": steps,
        "train_seconds": round(train_seconds, 4),
        "images_per_sec_rank": round(images / train_seconds, 2),
        "images_per_sec": round(images * world / train_seconds, 2),
        "test_accuracy": accuracy, "loss": loss_value,
    }), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
