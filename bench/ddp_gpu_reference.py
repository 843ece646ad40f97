"""The GPU side-by-side for train_mnist: the course's MNIST net with plain PyTorch DDP over NCCL.

Like train_mnist --device gpu, the whole dataset lives on the GPU and each step gathers its batch
there by index, so the comparison is the training loop and the gradient all-reduce, not a data
loader. Same net, per-GPU batch, optimizer, seed handling and sharding rule (each rank takes a
disjoint share of one shuffled order per epoch; samples that do not fill a whole round of
world x batch are dropped). Prints one JSON line per rank with train_mnist's summary keys.

Run under torchrun, one process per GPU (scripts/gpu/run_gpu.sh does):
    python3 -m torch.distributed.run --standalone --nproc_per_node=N bench/ddp_gpu_reference.py
or alone (a world of one). --device cpu (Gloo) exists to smoke-test the script without a GPU.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ref_train_ddp import MNIST, load


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default=os.path.join(os.path.dirname(__file__), "..", "data", "mnist"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch_size", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max_steps", type=int, default=0)
    p.add_argument("--log_interval", type=int, default=200)
    p.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    args = p.parse_args()

    distributed = "WORLD_SIZE" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "gpu":
        if not torch.cuda.is_available():
            raise SystemExit("ddp_gpu_reference: --device gpu but torch sees no CUDA device")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    torch.manual_seed(args.seed)

    x_train, y_train = (t.to(device) for t in load(args.data_dir, "train"))
    x_test, y_test = (t.to(device) for t in load(args.data_dir, "test"))
    model = MNIST().to(device)
    if distributed:
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None)
    else:
        ddp = model
    momentum = 0.9 if args.optimizer == "momentum" else 0.0
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=momentum)

    n = x_train.shape[0]
    per_rank = n // (world * args.batch_size)

    def batches(epoch):
        # One order for every rank (seed + epoch); round r gives rank k the k-th batch of it.
        g = torch.Generator()
        g.manual_seed(args.seed + epoch)
        order = torch.randperm(n, generator=g)[: per_rank * world * args.batch_size]
        return order.view(per_rank, world, args.batch_size)[:, rank].to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    steps = 0
    train_seconds = 0.0
    epoch_seconds = []
    first_loss = None
    last_loss = None
    for epoch in range(args.epochs):
        ddp.train()
        index = batches(epoch)
        sync()
        start = time.perf_counter()
        for batch in range(per_rank):
            idx = index[batch]
            loss = F.cross_entropy(ddp(x_train.index_select(0, idx)), y_train.index_select(0, idx))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            steps += 1
            last_loss = loss.detach()
            if batch % args.log_interval == 0 or first_loss is None:
                value = last_loss.item()
                if first_loss is None:
                    first_loss = value
                if batch % args.log_interval == 0:
                    print(f"epoch: {epoch}, batch: {batch}, loss is: [{value:.8g}]", flush=True)
            if args.max_steps and steps >= args.max_steps:
                break
        sync()
        epoch_seconds.append(time.perf_counter() - start)
        train_seconds += epoch_seconds[-1]
        if args.max_steps and steps >= args.max_steps:
            break

    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum())
                      for i in range(0, y_test.shape[0], 1000))
    accuracy = correct / y_test.shape[0]
    images = steps * args.batch_size
    rate = images / train_seconds if train_seconds > 0 else 0.0
    print(json.dumps({
        "rank": rank, "world": world, "epochs": args.epochs, "steps": steps,
        "train_seconds": round(train_seconds, 4),
        "epoch_seconds": [round(s, 4) for s in epoch_seconds],
        "images_per_sec_rank": round(rate, 2), "images_per_sec": round(rate * world, 2),
        "test_accuracy": accuracy, "loss": None if last_loss is None else last_loss.item(),
        "first_loss": first_loss, "optimizer": args.optimizer, "device": str(device),
        "torch": torch.__version__,
    }), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
