#!/usr/bin/env bash
# The GPU path in one shot, on a CUDA machine with PyTorch installed and no network: unpacks the
# bundle from scripts/gpu/make_bundle.sh, configures the project against the LibTorch inside the
# installed PyTorch with CUDA + NCCL, builds it, then
#   1. runs the NCCL communicator tests on every visible GPU,
#   2. trains MNIST with `launch --selected_gpus=<all> ... train_mnist --device gpu`,
#   3. trains the same with PyTorch DDP (bench/ddp_gpu_reference.py) on the same GPUs,
# and prints one summary table (also $OUT/gpu_summary.txt when OUT is set, with the whole log in
# $OUT/gpu_run.log). Stops at the first broken step and names it.
#
# Usage: scripts/gpu/run_gpu.sh [--dry-run] [BUNDLE.tar.gz]     (run from anywhere)
#   --dry-run   unpack + configure + build only (DRY_RUN_TARGETS); no GPU needed
# Environment (all optional):
#   BUNDLE           the bundle (default <repo>/build-gpu-bundle/gpu-bundle.tar.gz)
#   BUILD_DIR        build folder (default <repo>/build-gpu); logs and the unpacked bundle go to
#                    BUILD_DIR/gpu-run
#   TORCH_PREFIX     CMake prefix of LibTorch, or the folder holding TorchConfig.cmake
#                    (default: python's torch.utils.cmake_prefix_path)
#   PYTHON           python with torch (default python3)
#   WITH_NCCL        ON (default) | AUTO | OFF, passed to CMake
#   NCCL_ROOT        folder with include/nccl.h and lib/libnccl.so*; default: the nvidia-nccl
#                    Python package torch loads, else the CUDA toolkit's
#   CUDA_HOME        CUDA toolkit (default: from nvcc on PATH, else /usr/local/cuda)
#   CUDA_ARCHS       CMAKE_CUDA_ARCHITECTURES for torch's enable_language(CUDA) (default 90)
#   DRY_RUN_TARGETS  targets a dry run builds (default "launch")
#   NCCL_TESTS       "target:gtest_filter ..." (default: the tests/worker/comm targets named *nccl*,
#                    else comm_test:Nccl*)
#   EPOCHS (2), MIN_ACCURACY (0.9), JOBS (nproc), OUT
#   CONFIGURE_TIMEOUT (240), BUILD_TIMEOUT (480), STEP_TIMEOUT (other steps: 120-240) in seconds
# Exit codes: 0 all steps passed; 1 a step failed (named on stderr); 2 usage.
set -euo pipefail

REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly REPO_DIR

dry_run=0
bundle_arg=""
while (($#)); do
  case "$1" in
    --dry-run) dry_run=1 ;;
    -h | --help)
      sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "run_gpu: unknown option '$1' (see --help)" >&2
      exit 2
      ;;
    *)
      if [[ -n "${bundle_arg}" ]]; then
        echo "run_gpu: more than one bundle given: '${bundle_arg}' and '$1'" >&2
        exit 2
      fi
      bundle_arg="$1"
      ;;
  esac
  shift
done

BUNDLE="$(realpath -m "${bundle_arg:-${BUNDLE:-${REPO_DIR}/build-gpu-bundle/gpu-bundle.tar.gz}}")"
BUILD_DIR="$(realpath -m "${BUILD_DIR:-${REPO_DIR}/build-gpu}")"
readonly RUN_DIR="${BUILD_DIR}/gpu-run"
readonly LOG_DIR="${RUN_DIR}/logs"
readonly PYTHON="${PYTHON:-python3}"
readonly WITH_NCCL="${WITH_NCCL:-ON}"
readonly EPOCHS="${EPOCHS:-2}"
readonly MIN_ACCURACY="${MIN_ACCURACY:-0.9}"
readonly JOBS="${JOBS:-$(nproc)}"
readonly CUDA_ARCHS="${CUDA_ARCHS:-90}"
readonly DRY_RUN_TARGETS="${DRY_RUN_TARGETS:-launch}"
readonly STARTED_AT="${SECONDS}"

CURRENT_STEP="setup"
SUMMARY=()    # "step|result" rows, printed at the end (also after a failure)
STEP_LOGS=("${LOG_DIR}/run_gpu.log")  # this script's messages, then each step's log in order

# Messages go to the console and, once LOG_DIR exists, to LOG_DIR/run_gpu.log.
say() {
  echo "run_gpu: $*"
  if [[ -d "${LOG_DIR}" ]]; then echo "run_gpu: $*" >>"${LOG_DIR}/run_gpu.log"; fi
}

row() { SUMMARY+=("$1|$2"); }

write_summary() {
  local status="$1"
  {
    echo "== ddlaunch GPU path summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $((SECONDS - STARTED_AT)) s) =="
    local r
    for r in "${SUMMARY[@]}"; do
      printf '%-28s %s\n' "${r%%|*}" "${r#*|}"
    done
    if [[ -n "${TRAIN_TABLE:-}" ]]; then
      echo
      printf '%s\n' "${TRAIN_TABLE}"
    fi
    echo
    echo "status: ${status}"
  } >"${RUN_DIR}/gpu_summary.txt"
  echo
  cat "${RUN_DIR}/gpu_summary.txt"
  if [[ -n "${OUT:-}" ]]; then
    mkdir -p "${OUT}"
    cp "${RUN_DIR}/gpu_summary.txt" "${OUT}/gpu_summary.txt"
    # Every step's log, in order, as one file.
    local f
    for f in "${STEP_LOGS[@]}"; do
      echo "===== ${f##*/}"
      cat "${f}" 2>/dev/null || true
    done >"${OUT}/gpu_run.log"
  fi
}

FAIL_REPORTED=0
fail() {
  local reason="$1"
  FAIL_REPORTED=1
  row "${CURRENT_STEP}" "FAILED: ${reason}"
  write_summary "FAILED at step '${CURRENT_STEP}'"
  echo "run_gpu: FAILED at step '${CURRENT_STEP}': ${reason}" >&2
  exit 1
}

# Anything else that stops the script (set -e) is reported the same way.
on_exit() {
  local rc="$1" line="$2"
  if ((rc != 0 && !FAIL_REPORTED)) && [[ -d "${LOG_DIR}" ]]; then
    FAIL_REPORTED=1
    row "${CURRENT_STEP}" "FAILED: exit status ${rc} at run_gpu.sh line ${line}"
    write_summary "FAILED at step '${CURRENT_STEP}'" || true
    echo "run_gpu: FAILED at step '${CURRENT_STEP}' (exit ${rc}, run_gpu.sh line ${line})" >&2
  fi
}

# run_step NAME TIMEOUT_S CMD...: runs CMD with a timeout, its output to the console and to
# LOG_DIR/NAME.log; any failure stops the script with the step named.
run_step() {
  local name="$1" limit="$2"
  shift 2
  CURRENT_STEP="${name}"
  say "[${name}] $* (timeout ${limit}s)"
  local rc=0
  STEP_LOGS+=("${LOG_DIR}/${name}.log")
  set +e
  timeout --kill-after=15 "${limit}" "$@" 2>&1 | tee "${LOG_DIR}/${name}.log"
  rc="${PIPESTATUS[0]}"
  set -e
  if ((rc == 124 || rc == 137)); then
    fail "timed out after ${limit}s (log: ${LOG_DIR}/${name}.log)"
  elif ((rc != 0)); then
    echo "----- last lines of ${LOG_DIR}/${name}.log" >&2
    tail -n 25 "${LOG_DIR}/${name}.log" >&2
    fail "exit status ${rc} (log: ${LOG_DIR}/${name}.log)"
  fi
}

trap 'on_exit $? ${LINENO}' EXIT

rm -rf "${RUN_DIR}"
mkdir -p "${LOG_DIR}"
say "$( ((dry_run)) && echo 'dry run: ' )bundle ${BUNDLE}, build ${BUILD_DIR}, repo ${REPO_DIR}"

# --- 1. unpack ---------------------------------------------------------------------------------
CURRENT_STEP="unpack"
[[ -f "${BUNDLE}" ]] || fail "no bundle at ${BUNDLE} (make it with scripts/gpu/make_bundle.sh on a networked Debian 12 machine)"
run_step unpack "${STEP_TIMEOUT:-120}" tar -xzf "${BUNDLE}" -C "${RUN_DIR}"
readonly PREFIX="${RUN_DIR}/gpu-bundle/usr"
[[ -f "${RUN_DIR}/gpu-bundle/MANIFEST" && -d "${PREFIX}/include/boost" ]] ||
  fail "${BUNDLE} is not a gpu bundle (no gpu-bundle/MANIFEST or usr/include/boost)"

# Runtime libraries: where this machine has a soname the bundle carries (zlib, ibverbs, fmt...),
# the machine's own wins, so nothing here shadows a newer system library; Gloo always comes from
# the bundle because its headers must match. What stays in the bundle goes on LD_LIBRARY_PATH so
# libgloo's own dependencies resolve at link and run time.
CURRENT_STEP="runtime-libs"
# system_path SONAME: where this machine's loader finds SONAME (x86-64), or nothing.
system_path() { awk -v n="$1" '$1 == n && /x86-64/ && !p { p = $NF } END { if (p) print p }' <<<"${ld_cache}"; }
if command -v ldconfig >/dev/null 2>&1 || [[ -x /sbin/ldconfig ]]; then
  PATH="${PATH}:/sbin:/usr/sbin"
  ld_cache="$(ldconfig -p)"
  used_system=()
  for dir in "${PREFIX}/lib" "${PREFIX}/lib/x86_64-linux-gnu"; do
    for path in "${dir}"/lib*.so.*; do
      base="${path##*/}"
      [[ -e "${path}" && "${base}" != libgloo.* ]] || continue
      # Names the loader knows are sonames (libz.so.1); libz.so.1.2.13 is not one.
      sys="$(system_path "${base}")"
      [[ -n "${sys}" ]] || continue
      # Every file or link here that is this library (the real file CMake configs name, the
      # soname link, the dev link) now points at the system's copy.
      real="$(readlink -f "${path}")"
      for other in "${dir}"/*; do
        if [[ "$(readlink -f "${other}")" == "${real}" ]]; then ln -sfn "${sys}" "${other}"; fi
      done
      used_system+=("${base}")
    done
  done
  kept="$(find "${PREFIX}/lib" -maxdepth 2 -type f -name 'lib*.so.*' -printf '%f ')"
  say "runtime libraries from this machine: ${used_system[*]:-none}; from the bundle: ${kept:-none}"
else
  say "ldconfig not found: every bundled runtime library is used"
fi
export LD_LIBRARY_PATH="${PREFIX}/lib:${PREFIX}/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
{
  echo "# Sourced to run what ${BUILD_DIR} built: the bundle's runtime libraries."
  echo "export LD_LIBRARY_PATH='${LD_LIBRARY_PATH}'"
} >"${RUN_DIR}/env.sh"
row unpack "ok: ${BUNDLE##*/} -> ${RUN_DIR}/gpu-bundle ($(grep -c -v -E '^(#|data/)' "${RUN_DIR}/gpu-bundle/MANIFEST") packages)"

# --- 2. toolchain: LibTorch, CUDA, NCCL --------------------------------------------------------
CURRENT_STEP="toolchain"
torch_info=""
if [[ -z "${TORCH_PREFIX:-}" ]] || ((!dry_run)); then
  command -v "${PYTHON}" >/dev/null 2>&1 || fail "'${PYTHON}' not found (set PYTHON to the python that has torch)"
  torch_info="$("${PYTHON}" - <<'PY' 2>&1
import torch, torch.utils
print("prefix", torch.utils.cmake_prefix_path)
print("version", torch.__version__)
print("cuda", torch.version.cuda)
print("cxx11abi", int(torch.compiled_with_cxx11_abi()))
import os
print("lib", os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
PY
)" || fail "python could not import torch: ${torch_info}"
fi
torch_field() { awk -v k="$1" '$1 == k { print $2 }' <<<"${torch_info}"; }
TORCH_PREFIX="${TORCH_PREFIX:-$(torch_field prefix)}"
[[ -d "${TORCH_PREFIX}" ]] || fail "TORCH_PREFIX '${TORCH_PREFIX}' is not a folder"
if [[ -n "${torch_info}" && "$(torch_field cxx11abi)" != 1 ]]; then
  fail "torch $(torch_field version) was built with the old C++ ABI (_GLIBCXX_USE_CXX11_ABI=0); the bundle's Gloo, spdlog and fmt use the new one, so they cannot link together"
fi
cmake_torch=()
if [[ -f "${TORCH_PREFIX}/TorchConfig.cmake" ]]; then
  cmake_torch=(-DTorch_DIR="${TORCH_PREFIX}")
  prefix_path="${PREFIX}"
else
  prefix_path="${PREFIX};${TORCH_PREFIX}"
fi

if [[ -z "${CUDA_HOME:-}" ]]; then
  if command -v nvcc >/dev/null 2>&1; then
    CUDA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
  elif [[ -d /usr/local/cuda ]]; then
    CUDA_HOME=/usr/local/cuda
  fi
fi
cmake_cuda=()
if [[ -n "${CUDA_HOME:-}" ]]; then
  export CUDA_HOME
  export PATH="${CUDA_HOME}/bin:${PATH}"
  if [[ -x "${CUDA_HOME}/bin/nvcc" ]] && ((!dry_run)); then
    # Torch 2.x's CMake config enables the CUDA language and checks nvcc against the toolkit.
    cmake_cuda+=(-DCMAKE_CUDA_COMPILER="${CUDA_HOME}/bin/nvcc" -DCUDAToolkit_ROOT="${CUDA_HOME}"
                 -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS}")
  fi
elif ((!dry_run)); then
  fail "no CUDA toolkit: set CUDA_HOME or put nvcc on PATH"
fi

# The nvidia-* Python packages (namespace package `nvidia`): NCCL, cuDNN and cuSPARSELt as the
# installed torch loads them.
nvidia_dirs=()
if command -v "${PYTHON}" >/dev/null 2>&1; then
  mapfile -t nvidia_dirs < <("${PYTHON}" -c 'import nvidia; print("\n".join(nvidia.__path__))' 2>/dev/null || true)
fi
find_in_nvidia() {  # find_in_nvidia NAME_GLOB: first match under the nvidia packages
  ((${#nvidia_dirs[@]})) || return 0
  find "${nvidia_dirs[@]}" -name "$1" \( -type f -o -type l \) 2>/dev/null | sort | awk 'NR == 1'
}
nccl_include="" nccl_lib="" nccl_from=""
if [[ -n "${NCCL_ROOT:-}" ]]; then
  nccl_include="${NCCL_ROOT}/include"
  nccl_lib="$(find "${NCCL_ROOT}" -maxdepth 2 -name 'libnccl.so*' \( -type f -o -type l \) | sort | awk 'NR == 1')"
  nccl_from="NCCL_ROOT"
else
  l="$(find_in_nvidia 'libnccl.so*')"
  if [[ -n "${l}" ]]; then
    # The library torch loads; its header from the package, else from the toolkit or /usr.
    nccl_lib="${l}" nccl_from="python nvidia-nccl package"
    h="$(find_in_nvidia nccl.h)"
    for candidate in "${h}" "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h" /usr/include/nccl.h; do
      if [[ -n "${candidate}" && -f "${candidate}" ]]; then
        nccl_include="$(dirname "${candidate}")"
        break
      fi
    done
    [[ -n "${nccl_include}" ]] || fail "NCCL: ${l} has no nccl.h beside it, in the toolkit or in /usr/include"
    NCCL_ROOT="$(dirname "$(dirname "${l}")")"
  fi
fi
cmake_nccl=(-DWITH_NCCL="${WITH_NCCL}")
if [[ -n "${nccl_lib}" ]]; then
  [[ -f "${nccl_include}/nccl.h" ]] || fail "NCCL from ${nccl_from}: no nccl.h in ${nccl_include}"
  # Preset the cache entries cmake/Dependencies.cmake fills, so this NCCL wins over the toolkit's.
  cmake_nccl+=(-DNCCL_ROOT="${NCCL_ROOT}" -DDDL_NCCL_INCLUDE_DIR="${nccl_include}"
               -DDDL_NCCL_LIBRARY="${nccl_lib}")
else
  nccl_from="CUDA toolkit (CUDA_HOME=${CUDA_HOME:-unset}) as cmake/Dependencies.cmake finds it"
fi
h="$(find_in_nvidia cudnn.h)"
l="$(find_in_nvidia 'libcudnn.so*')"
[[ -n "${h}" && -n "${l}" ]] && cmake_cuda+=(-DCUDNN_INCLUDE_PATH="$(dirname "${h}")" -DCUDNN_LIBRARY_PATH="${l}")
h="$(find_in_nvidia cusparseLt.h)"
l="$(find_in_nvidia 'libcusparseLt.so*')"
[[ -n "${h}" && -n "${l}" ]] && cmake_cuda+=(-DCUSPARSELT_INCLUDE_PATH="$(dirname "${h}")" -DCUSPARSELT_LIBRARY_PATH="${l}")
if [[ -n "${torch_info}" ]]; then
  row toolchain "torch $(torch_field version) (CUDA $(torch_field cuda), cxx11 ABI), $(c++ --version | awk 'NR == 1'), cmake $(cmake --version | awk 'NR == 1 { print $3 }')"
  # Torch's wheels carry their own Gloo inside libtorch_cpu.so; where it exports gloo:: symbols,
  # they and the bundle's libgloo.so.0 define the same names (scripts/gpu/README.md, "Risks").
  torch_lib="$(torch_field lib)"
  if [[ -f "${torch_lib}" ]] && command -v nm >/dev/null 2>&1; then
    gloo_syms="$(nm -DC --defined-only "${torch_lib}" 2>/dev/null | grep -c ' gloo::' || true)"
    row "torch's own gloo" "${gloo_syms} gloo:: symbols exported by ${torch_lib##*/}"
  fi
else
  row toolchain "LibTorch at ${TORCH_PREFIX}, $(c++ --version | awk 'NR == 1'), cmake $(cmake --version | awk 'NR == 1 { print $3 }')"
fi
say "NCCL from ${nccl_from}${nccl_lib:+: ${nccl_lib}}"

# --- 3. configure + check that the bundle's packages were the ones found -----------------------
run_step configure "${CONFIGURE_TIMEOUT:-240}" cmake -S "${REPO_DIR}" -B "${BUILD_DIR}" -DCMAKE_BUILD_TYPE=Release \
  -DWITH_TESTS=ON -DCMAKE_PREFIX_PATH="${prefix_path}" "${cmake_torch[@]}" "${cmake_cuda[@]}" \
  "${cmake_nccl[@]}"
CURRENT_STEP="configure-check"
cache() { awk -v k="$1" 'index($0, k ":") == 1 && !v { v = substr($0, index($0, "=") + 1) } END { print v }' "${BUILD_DIR}/CMakeCache.txt"; }
for var in Gloo_DIR spdlog_DIR fmt_DIR cxxopts_DIR nlohmann_json_DIR GTest_DIR ZLIB_INCLUDE_DIR; do
  value="$(cache "${var}")"
  [[ "${value}" == "${PREFIX}"/* ]] || fail "${var} is '${value}', not inside the bundle ${PREFIX}"
done
boost="$(cache Boost_DIR)"
[[ "${boost}" == "${PREFIX}"/* ]] || boost="$(cache Boost_INCLUDE_DIR)"
[[ "${boost}" == "${PREFIX}"/* ]] || fail "Boost was found at '${boost}', not inside the bundle ${PREFIX}"
have_nccl="$(grep -c '^-- NCCL: /' "${LOG_DIR}/configure.log" || true)"
if [[ "${WITH_NCCL}" == ON && "${have_nccl}" == 0 ]]; then
  fail "WITH_NCCL=ON but the configure log does not report NCCL"
fi
row configure "ok: ${BUILD_DIR}; deps from the bundle; NCCL $( ((have_nccl)) && cache DDL_NCCL_LIBRARY || echo 'not built')"

# --- 4. build ----------------------------------------------------------------------------------
nccl_tests=()
if [[ -n "${NCCL_TESTS:-}" ]]; then
  read -r -a nccl_tests <<<"${NCCL_TESTS}"
elif [[ -f "${REPO_DIR}/tests/worker/comm/CMakeLists.txt" ]]; then
  mapfile -t nccl_tests < <(grep -o -i -E 'NAME +[A-Za-z0-9_]*nccl[A-Za-z0-9_]*' \
                              "${REPO_DIR}/tests/worker/comm/CMakeLists.txt" | awk '{ print $2 ":*" }')
  ((${#nccl_tests[@]})) || nccl_tests=("comm_test:Nccl*")
fi
if ((dry_run)); then
  read -r -a targets <<<"${DRY_RUN_TARGETS}"
else
  targets=(launch train_mnist)
  for t in "${nccl_tests[@]}"; do targets+=("${t%%:*}"); done
fi
build_started="${SECONDS}"
run_step build "${BUILD_TIMEOUT:-480}" cmake --build "${BUILD_DIR}" -j"${JOBS}" --target "${targets[@]}"
for t in "${targets[@]}"; do
  if [[ -f "${BUILD_DIR}/bin/${t}" ]] && ! [[ -x "${BUILD_DIR}/bin/${t}" ]]; then
    CURRENT_STEP=build
    fail "${BUILD_DIR}/bin/${t} is not executable"
  fi
done
row build "ok: ${targets[*]} ($((SECONDS - build_started)) s, -j${JOBS})"

if ((dry_run)); then
  CURRENT_STEP=finished
  write_summary "dry run passed (unpack, configure, build)"
  exit 0
fi

# --- 5. GPUs -----------------------------------------------------------------------------------
CURRENT_STEP="gpus"
gpu_info="$("${PYTHON}" -c '
import torch
n = torch.cuda.device_count()
print(n)
print(", ".join(torch.cuda.get_device_name(i) for i in range(n)))
nccl = torch.cuda.nccl.version() if n else ()
print(".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl)
' 2>&1)" || fail "torch could not query the GPUs: ${gpu_info}"
gpu_count="$(sed -n 1p <<<"${gpu_info}")"
if ! [[ "${gpu_count}" =~ ^[0-9]+$ ]] || ((gpu_count == 0)); then
  fail "torch sees no CUDA device (${gpu_info})"
fi
gpu_ids="$(seq -s, 0 $((gpu_count - 1)))"
row gpus "${gpu_count}: $(sed -n 2p <<<"${gpu_info}") (torch's NCCL $(sed -n 3p <<<"${gpu_info}"))"

# --- 6. NCCL communicator tests ----------------------------------------------------------------
for entry in "${nccl_tests[@]}"; do
  exe="${entry%%:*}"
  filter="${entry#*:}"
  [[ "${filter}" == "${entry}" ]] && filter='*'
  run_step "nccl-${exe}" "${STEP_TIMEOUT:-180}" "${BUILD_DIR}/bin/${exe}" --gtest_filter="${filter}" --gtest_color=no
  log="${LOG_DIR}/nccl-${exe}.log"
  passed="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "${log}" | tail -n 1)"
  skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "${log}" | tail -n 1)"
  [[ -n "${passed}" && "${passed}" != 0 ]] || fail "${exe} --gtest_filter=${filter} ran no test"
  skip_names="$(sed -n 's/^\[  SKIPPED \] \([A-Za-z][A-Za-z0-9_./]*\).*/\1/p' "${log}" | sort -u | tr '\n' ' ')"
  row "nccl tests (${exe})" "${passed} passed, ${skipped:-0} skipped${skip_names:+ (${skip_names% })}; filter ${filter}"
done

# --- 7. train MNIST: ddlaunch, then PyTorch DDP ------------------------------------------------
DATA_DIR="${RUN_DIR}/gpu-bundle/data/mnist"
[[ -f "${DATA_DIR}/train-images-idx3-ubyte" ]] || DATA_DIR="${REPO_DIR}/data/mnist"
CURRENT_STEP="train-data"
[[ -f "${DATA_DIR}/train-images-idx3-ubyte" ]] ||
  fail "no MNIST files in the bundle or in ${REPO_DIR}/data/mnist (make the bundle without --no-data)"

# summary_of LOG: the JSON summary line of rank 0 in LOG, re-printed as "key value" lines.
summary_of() {
  "${PYTHON}" - "$1" <<'PY'
import json, sys
found = None
for line in open(sys.argv[1], errors="replace"):
    line = line.strip()
    start = line.find("{")
    if start < 0:
        continue
    try:
        d = json.loads(line[start:])
    except ValueError:
        continue
    if isinstance(d, dict) and "test_accuracy" in d and d.get("rank", 0) == 0:
        found = d
if found is None:
    sys.exit("no JSON summary line of rank 0 in " + sys.argv[1])
for k in ("world", "epochs", "steps", "train_seconds", "images_per_sec", "test_accuracy", "device"):
    print(k, found.get(k))
PY
}
field() { awk -v k="$1" '$1 == k { print $2 }' <<<"$2"; }
check_run() {  # check_run NAME SUMMARY
  local acc device
  acc="$(field test_accuracy "$2")"
  device="$(field device "$2")"
  [[ "${device}" == cuda* ]] || fail "$1 trained on '${device}', not on a GPU"
  awk -v a="${acc}" -v m="${MIN_ACCURACY}" 'BEGIN { exit !(a >= m) }' ||
    fail "$1 reached test accuracy ${acc}, below MIN_ACCURACY=${MIN_ACCURACY}"
}

cd "${RUN_DIR}"
run_step train-ddlaunch "${STEP_TIMEOUT:-240}" "${BUILD_DIR}/bin/launch" --selected_gpus="${gpu_ids}" \
  --log_dir "${RUN_DIR}/mylog" train_mnist --device gpu --epochs "${EPOCHS}" --save= \
  --data_dir "${DATA_DIR}"
CURRENT_STEP=train-ddlaunch
ours="$(summary_of "${RUN_DIR}/mylog/workerlog.0" 2>&1)" || fail "${ours}"
check_run "ddlaunch train_mnist" "${ours}"

run_step train-torch-ddp "${STEP_TIMEOUT:-240}" "${PYTHON}" -m torch.distributed.run --standalone \
  --nproc_per_node="${gpu_count}" "${REPO_DIR}/bench/ddp_gpu_reference.py" --device gpu \
  --epochs "${EPOCHS}" --data_dir "${DATA_DIR}"
CURRENT_STEP=train-torch-ddp
theirs="$(summary_of "${LOG_DIR}/train-torch-ddp.log" 2>&1)" || fail "${theirs}"
check_run "PyTorch DDP" "${theirs}"

CURRENT_STEP=summary
TRAIN_TABLE="$(
  "${PYTHON}" - "${EPOCHS}" <<PY
import sys
epochs = int(sys.argv[1])
def parse(text):
    return dict(line.split(" ", 1) for line in text.strip().splitlines())
rows = [("ddlaunch train_mnist", parse("""${ours}""")), ("PyTorch DDP (torchrun)", parse("""${theirs}"""))]
print(f"MNIST, {epochs} epochs, batch 100 per GPU, SGD lr 0.01, whole dataset on the GPU")
print(f"| {'trainer':<24} | GPUs | steps | s/epoch | images/s | test acc |")
print(f"|{'-' * 26}|------|-------|---------|----------|----------|")
for name, d in rows:
    spe = float(d["train_seconds"]) / max(int(d["epochs"]), 1)
    print(f"| {name:<24} | {d['world']:>4} | {d['steps']:>5} | {spe:7.3f} | {float(d['images_per_sec']):8.0f} | {float(d['test_accuracy']):8.4f} |")
per_epoch = [float(d["train_seconds"]) / max(int(d["epochs"]), 1) for _, d in rows]
ratio = per_epoch[0] / per_epoch[1]
print(f"ratio ddlaunch / DDP epoch time: {ratio:.3f} "
      f"(ddlaunch {'faster' if ratio < 1 else 'slower'} by {abs(1 - ratio) * 100:.1f}%)")
PY
)" || fail "could not build the table: ${TRAIN_TABLE:-}"
CURRENT_STEP=finished
write_summary "all steps passed"
