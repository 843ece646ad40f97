#!/usr/bin/env bash
# Packs the non-Torch build dependencies of the GPU build, taken from Debian 12's packages by name,
# plus the four MNIST IDX files, into one tar.gz that travels to a GPU machine with no network
# (scripts/gpu/run_gpu.sh unpacks and uses it; scripts/gpu/README.md says why each package is in).
#
# Usage: scripts/gpu/make_bundle.sh [--from-installed] [--no-data] [OUTPUT.tar.gz]
#   default           apt-get update + apt-get download of each package (no install), dpkg -x
#                     (Debian 12, as root, network to the Debian mirror)
#   --from-installed  copy the same packages' files from this machine's installed packages
#                     (dpkg -L), no network; every package must be installed
#   --no-data         leave the MNIST files out (enough for run_gpu.sh --dry-run)
#   OUTPUT            default <repo>/build-gpu-bundle/gpu-bundle.tar.gz
# Exit codes: 0 written; 1 the bundle is over the size limit or a check failed; 2 usage, a tool
# or a package missing, or a download failed.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly REPO_DIR
readonly LIMIT_BYTES=$((40 * 1024 * 1024))
# Headers + CMake configs, and the shared libraries they link at run time. Gloo's own runtime
# dependencies (hiredis, ibverbs and libnl, which ibverbs needs) come along because a CUDA image
# rarely has them; run_gpu.sh exposes a bundled .so only when the machine lacks that soname.
readonly PACKAGES=(
  libboost1.81-dev
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
  libcxxopts-dev
  nlohmann-json3-dev
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  zlib1g-dev zlib1g
  libgtest-dev
  # OpenSSL: the etcd client's TLS (launcher/coord/etcd_client.cpp).
  libssl-dev libssl3
)
readonly MNIST_FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte
                      t10k-labels-idx1-ubyte)

die() {
  local code="$1"
  shift
  echo "make_bundle: error: $*" >&2
  exit "${code}"
}

mode=download
with_data=1
output=""
while (($#)); do
  case "$1" in
    --from-installed) mode=installed ;;
    --no-data) with_data=0 ;;
    -h | --help)
      sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*) die 2 "unknown option '$1' (see --help)" ;;
    *)
      [[ -z "${output}" ]] || die 2 "more than one OUTPUT given: '${output}' and '$1'"
      output="$1"
      ;;
  esac
  shift
done
output="${output:-${REPO_DIR}/build-gpu-bundle/gpu-bundle.tar.gz}"

for tool in dpkg dpkg-query tar gzip sha256sum; do
  command -v "${tool}" >/dev/null 2>&1 || die 2 "'${tool}' not found in PATH"
done

WORK_DIR="$(mktemp -d "${TMPDIR:-/tmp}/make_bundle.XXXXXX")"
trap 'rm -rf "${WORK_DIR}"' EXIT
readonly STAGE="${WORK_DIR}/gpu-bundle"
mkdir -p "${STAGE}"
manifest="${STAGE}/MANIFEST"
{
  echo "# gpu-bundle: made by scripts/gpu/make_bundle.sh ($(date -u +%Y-%m-%dT%H:%M:%SZ), mode ${mode})"
  echo "# package version"
} >"${manifest}"

if [[ "${mode}" == download ]]; then
  command -v apt-get >/dev/null 2>&1 || die 2 "'apt-get' not found: the download mode needs Debian 12"
  echo "make_bundle: apt-get update"
  apt-get update -qq || die 2 "apt-get update failed"
  mkdir -p "${WORK_DIR}/debs"
  # apt drops root for the download when its user can reach the folder; else it warns.
  if id _apt >/dev/null 2>&1; then
    chmod 755 "${WORK_DIR}"
    chown _apt "${WORK_DIR}/debs"
  fi
  echo "make_bundle: apt-get download ${PACKAGES[*]}"
  (cd "${WORK_DIR}/debs" && apt-get download -qq "${PACKAGES[@]}") ||
    die 2 "apt-get download failed (see apt's message above)"
  for pkg in "${PACKAGES[@]}"; do
    deb="$(find "${WORK_DIR}/debs" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)"
    [[ -n "${deb}" ]] || die 2 "apt-get download produced no ${pkg}_*.deb"
    dpkg -x "${deb}" "${STAGE}"
    echo "${pkg} $(dpkg-deb -f "${deb}" Version)" >>"${manifest}"
  done
else
  for pkg in "${PACKAGES[@]}"; do
    status="$(dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null || true)"
    [[ "${status}" == *"install ok installed"* ]] ||
      die 2 "--from-installed: package ${pkg} is not installed (scripts/setup.sh installs the dev packages)"
    # Every regular file and symlink the package owns, with its path; one tar pipe for the lot
    # (the Boost package alone owns ~15,000 files). tar keeps relative symlinks as they are.
    dpkg-query -L "${pkg}" | while IFS= read -r path; do
      if [[ -L "${path}" || -f "${path}" ]]; then printf '%s\n' "${path#/}"; fi
    done >"${WORK_DIR}/files.list"
    tar -C / --no-recursion -cf - -T "${WORK_DIR}/files.list" | tar -C "${STAGE}" -xf - ||
      die 2 "copying the files of ${pkg} failed"
    echo "${pkg} $(dpkg-query -W -f='${Version}' "${pkg}")" >>"${manifest}"
  done
fi

# Only headers, CMake configs and libraries travel.
rm -rf "${STAGE}/usr/share/doc" "${STAGE}/usr/share/man" "${STAGE}/usr/share/lintian" \
       "${STAGE}/usr/src" "${STAGE}/usr/share/bug"
[[ -d "${STAGE}/usr/include/boost/asio" && -d "${STAGE}/usr/include/boost/process" ]] ||
  die 1 "the staged tree has no usr/include/boost/{asio,process}"

# Some links are absolute (zlib1g-dev's libz.so -> /lib/x86_64-linux-gnu/libz.so.1.2.13, which
# merged /usr keeps in /usr/lib): point each at its file inside the tree, relatively, or stop.
while IFS= read -r link; do
  target="$(readlink "${link}")"
  if [[ -e "${STAGE}${target}" ]]; then
    ln -sfnr "${STAGE}${target}" "${link}"
  elif [[ -e "${STAGE}/usr${target}" ]]; then
    ln -sfnr "${STAGE}/usr${target}" "${link}"
  else
    die 1 "${link#"${STAGE}"/} points to ${target}, which the bundle does not hold"
  fi
done < <(find "${STAGE}" -type l -lname '/*')

# Debian's GlooTargets-*.cmake names the library by absolute path (/usr/lib/libgloo.so.*); make it
# relative to the config's own prefix so the unpacked bundle works anywhere.
shopt -s nullglob
gloo_targets=("${STAGE}"/usr/share/cmake/Gloo/GlooTargets-*.cmake)
shopt -u nullglob
((${#gloo_targets[@]})) || die 1 "no usr/share/cmake/Gloo/GlooTargets-*.cmake in the staged tree"
sed -i 's#"/usr/lib/libgloo#"${_IMPORT_PREFIX}/lib/libgloo#g' "${gloo_targets[@]}"

# No CMake config may still point at the build machine's /usr, except the "/usr move" guards that
# compare against it (_realOrig) and only apply when the file really is under /usr.
leaks="$(grep -rn --include='*.cmake' -E '"/usr/(lib|include|share)' "${STAGE}/usr" |
         grep -v -E '_realOrig|PACKAGE_PREFIX_DIR "/usr"|_IMPORT_PREFIX "/usr/lib' || true)"
[[ -z "${leaks}" ]] || die 1 "CMake configs still name absolute /usr paths:"$'\n'"${leaks}"

if ((with_data)); then
  data_dir="${REPO_DIR}/data/mnist"
  missing=0
  for name in "${MNIST_FILES[@]}"; do [[ -f "${data_dir}/${name}" ]] || missing=1; done
  if ((missing)); then
    echo "make_bundle: MNIST files missing in ${data_dir}; running scripts/fetch_mnist.sh"
    bash "${REPO_DIR}/scripts/fetch_mnist.sh" || die 2 "scripts/fetch_mnist.sh failed"
  fi
  mkdir -p "${STAGE}/data/mnist"
  for name in "${MNIST_FILES[@]}"; do
    cp "${data_dir}/${name}" "${STAGE}/data/mnist/${name}"
    echo "data/mnist/${name} sha256:$(sha256sum "${data_dir}/${name}" | cut -d' ' -f1)" >>"${manifest}"
  done
else
  echo "# no MNIST data (--no-data)" >>"${manifest}"
fi

mkdir -p "$(dirname "${output}")"
tmp_out="${output}.tmp.$$"
tar -C "${WORK_DIR}" -czf "${tmp_out}" gpu-bundle
size="$(stat -c %s "${tmp_out}")"
if ((size > LIMIT_BYTES)); then
  rm -f "${tmp_out}"
  die 1 "the bundle is ${size} bytes ($((size / 1024 / 1024)) MiB), over the limit of ${LIMIT_BYTES} bytes (40 MiB)"
fi
mv -f "${tmp_out}" "${output}"
echo "make_bundle: wrote ${output}: ${size} bytes ($(awk -v s="${size}" 'BEGIN{printf "%.1f", s/1048576}') MiB, limit 40 MiB)"
