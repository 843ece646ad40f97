#!/usr/bin/env bash
# One command for the side-by-side benchmarks of docs/PERFORMANCE.md: start-up (launch vs
# torchrun), the real trainer's first step (train_mnist vs DDP under torchrun), all-reduce (our
# Gloo communicator vs torch.distributed on Gloo), MNIST training (train_mnist vs PyTorch DDP),
# model parallel, parameter server, and the run report's cost (launch --report=true vs
# --report=false), ours and the reference interleaved in the same run, medians, one table with
# ratios.
#
#   bash bench/run_all.sh                 full run (about 10-15 minutes on 2 cores)
#   bash bench/run_all.sh --quick         smoke run (1 repetition, small sizes, 60 training steps)
#   bash bench/run_all.sh --help          every option (repetitions, ranks, --only, --out, ...)
#
# Needs the programs built (launch, train_mnist, startup_worker, startup_worker_torch, allreduce_bench) in --build_dir
# (default: $DDL_BUILD_DIR, else <repo>/build) and Debian's python3-torch (/usr/bin/python3).
# Measure on a quiet machine: --max_load 1.0 --max_wait_s 600 waits for one first.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The reference (Debian's torch 1.13 and its torchrun), installed by name when missing.
if ! dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q 'install ok installed'; then
  echo "run_all: installing python3-torch (the reference)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-torch
fi
exec /usr/bin/python3 "$here/run_all.py" "$@"
