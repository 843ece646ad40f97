#!/usr/bin/env bash
# ThreadSanitizer run of the torch-free libraries' tests: builds them with -fsanitize=thread
# (CMake's SANITIZE=thread, LibTorch and NCCL off) in ./build-tsan and runs them through ctest.
# Exit status non-zero on any test failure or data-race report (halt_on_error). Third-party
# suppressions, if any, are in tests/tsan.supp with the reason for each.
#   scripts/tsan.sh [CTEST_REGEX]     default: the tests below
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-tsan"
# The transport, the stores, the launcher's units (options, plan, restart policy), the
# control-plane engine on memory and node 0's TCP store over real sockets (its etcd cases run in
# the main suite), the supervisor parts, and Gloo's mesh without LibTorch.
targets=(net_test store_suite_test store_tcp_test launcher_unit_test launcher_output_test
         launcher_watchdog_test launcher_group_stop_test env_contract_test gloo_lazy_test
         launcher_control_engine_test)
export GTEST_FILTER="${GTEST_FILTER:--*Etcd*}"
regex="${1:-^($(IFS='|'; echo "${targets[*]}"))\$}"
jobs="${TSAN_JOBS:-$(nproc)}"
started=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANITIZE=thread \
  -DWITH_TORCH=OFF -DWITH_NCCL=OFF >/dev/null
cmake --build "$build" --target "${targets[@]}" -j"$jobs" 2>&1 | grep -E "error|warning" || true
built=$(date +%s)
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$root/tests/tsan.supp"
cd "$build"
status=0
ctest -R "$regex" --output-on-failure --timeout 300 || status=$?
echo "tsan.sh: build $((built - started)) s, tests $(($(date +%s) - built)) s"
exit "$status"
