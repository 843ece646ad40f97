#!/usr/bin/env bash
# ctest gpu_dry_run: make a bundle from the installed Debian packages (no network), then run
# scripts/gpu/run_gpu.sh --dry-run against it and Debian's LibTorch in a temporary build folder,
# and check what it built: `launch` runs, and gpu_bundle_probe loads every bundled library.
set -euo pipefail
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
readonly REPO_DIR
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_dry_run.XXXXXX")"
trap 'rm -rf "${WORK}"' EXIT

fail() {
  echo "gpu_dry_run: FAIL: $*" >&2
  exit 1
}

# The MNIST files go in when fetched (as scripts/test.sh does), so the size check sees the real
# bundle; without them the dry run needs none.
data_flag=(--no-data)
[[ -f "${REPO_DIR}/data/mnist/train-images-idx3-ubyte" ]] && data_flag=()
bash "${REPO_DIR}/scripts/gpu/make_bundle.sh" --from-installed "${data_flag[@]}" \
  "${WORK}/gpu-bundle.tar.gz" || fail "make_bundle.sh --from-installed failed"

torch_prefix="${TORCH_PREFIX:-}"
if [[ -z "${torch_prefix}" && -f /usr/lib/x86_64-linux-gnu/cmake/Torch/TorchConfig.cmake ]]; then
  torch_prefix=/usr/lib/x86_64-linux-gnu/cmake/Torch
fi
[[ -n "${torch_prefix}" ]] || fail "no LibTorch: set TORCH_PREFIX (Debian's is /usr/lib/x86_64-linux-gnu/cmake/Torch)"

BUNDLE="${WORK}/gpu-bundle.tar.gz" BUILD_DIR="${WORK}/build" TORCH_PREFIX="${torch_prefix}" \
  WITH_NCCL=AUTO DRY_RUN_TARGETS="launch gpu_bundle_probe" JOBS="${JOBS:-2}" OUT="${WORK}/out" \
  bash "${REPO_DIR}/scripts/gpu/run_gpu.sh" --dry-run || fail "run_gpu.sh --dry-run failed"

grep -q '^status: dry run passed' "${WORK}/out/gpu_summary.txt" ||
  fail "no 'dry run passed' status in \$OUT/gpu_summary.txt"
# Each program's output is read whole before it is matched: `cmd | grep -q` under pipefail fails
# when grep stops reading first and the program dies of SIGPIPE.
version="$("${WORK}/build/bin/launch" --version)" || fail "the built launch does not run"
[[ "${version}" == ddlaunch\ * ]] || fail "the built launch does not run: ${version}"
# shellcheck source=/dev/null
source "${WORK}/build/gpu-run/env.sh"
probe="$("${WORK}/build/bin/gpu_bundle_probe" --name dry-run)" || fail "gpu_bundle_probe failed: ${probe}"
[[ "${probe}" == *'"ok":true'* ]] || fail "gpu_bundle_probe printed ${probe}"
libraries="$(ldd "${WORK}/build/bin/gpu_bundle_probe")"
[[ "${libraries}" == *"libgloo.so.0 => ${WORK}/build/gpu-run/gpu-bundle/usr/lib/"* ]] ||
  fail "gpu_bundle_probe does not load libgloo from the bundle: $(grep gloo <<<"${libraries}")"
echo "gpu_dry_run: PASS (${probe})"
