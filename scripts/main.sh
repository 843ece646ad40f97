#!/usr/bin/env bash
# The README's main command: set up, build, and train the Paddle course's MNIST net
# data-parallel on two CPU workers, with per-rank logs in ./mylog. Extra arguments go to
# train_mnist. Builds only the two programs the job runs (launch, and train_mnist, which it
# starts); the test programs are built by scripts/test.sh. Same ./build folder and CMake options,
# so a later scripts/test.sh builds the rest there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
DDL_BUILD_TARGETS="launch train_mnist" bash "$root/scripts/build.sh"
cd "$root"
exec ./build/bin/launch --nproc_per_node=2 --log_dir ./mylog train_mnist "$@"
