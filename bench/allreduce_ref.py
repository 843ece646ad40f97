"""The all-reduce reference: bench/allreduce_bench.cpp's method on torch.distributed (Gloo).

    torchrun --nproc_per_node=2 bench/allreduce_ref.py [--min_bytes 4096] [--max_bytes 67108864]

For each size (float32, min_bytes, min_bytes*factor, ..., max_bytes): one checked all-reduce,
`warmup` untimed ones, then `iters` timed ones, each after a barrier and lasting until the slowest
rank has its result. Rank 0 prints one JSON line per size: median, 10th and 90th percentile latency
and the median algorithm bandwidth (bytes / median latency).
"""
import argparse
import json
import sys
import time

import torch
import torch.distributed as dist


def iterations_for(nbytes):
    # The same rule as allreduce_bench.cpp.
    return min(max((256 << 20) // nbytes, 10), 200)


def percentile(values, q):
    v = sorted(values)
    i = int(q * (len(v) - 1) + 0.5)
    return v[min(i, len(v) - 1)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--min_bytes", type=int, default=4096)
    p.add_argument("--max_bytes", type=int, default=64 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--warmup", type=int, default=0)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    nbytes = args.min_bytes
    while nbytes <= args.max_bytes:
        n = nbytes // 4
        iters = args.iters or iterations_for(nbytes)
        warmup = args.warmup or max(2, iters // 10)

        t = torch.full((n,), float(rank + 1))
        dist.all_reduce(t)
        expected = world * (world + 1) / 2
        if t[0].item() != expected or t[-1].item() != expected:
            print(f"allreduce_ref: rank {rank}, {nbytes} bytes: sum {t[0].item()} .. "
                  f"{t[-1].item()}, expected {expected}", file=sys.stderr)
            return 1
        t.zero_()
        for _ in range(warmup):
            dist.all_reduce(t)

        seconds = torch.empty(iters, dtype=torch.float64)
        for i in range(iters):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            seconds[i] = time.perf_counter() - start
        gathered = [torch.empty_like(seconds) for _ in range(world)]
        dist.all_gather(gathered, seconds)
        lat = torch.stack(gathered).amax(0).tolist()
        if rank == 0:
            median = percentile(lat, 0.5)
            print(json.dumps({
                "bench": "allreduce", "impl": "torch", "world": world, "bytes": nbytes,
                "iters": iters, "median_us": median * 1e6,
                "p10_us": percentile(lat, 0.1) * 1e6, "p90_us": percentile(lat, 0.9) * 1e6,
                "algbw_GBps": nbytes / median / 1e9,
            }), flush=True)
        nbytes *= args.factor
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
