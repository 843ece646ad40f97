#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in ./build-fuzz and runs one of them for a
# bounded time on the corpus kept in tests/fuzz/corpus/NAME (read-only; new inputs go to a
# temporary folder). Exit status non-zero on any crash, leak or sanitizer report.
#   scripts/fuzz.sh NAME SECONDS        NAME: frame_decoder | env_contract
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="${1:?usage: fuzz.sh NAME SECONDS}"
seconds="${2:?usage: fuzz.sh NAME SECONDS}"
build="$root/build-fuzz"
corpus="$root/tests/fuzz/corpus/$name"
[ -d "$corpus" ] || { echo "fuzz.sh: no corpus folder $corpus" >&2; exit 2; }
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (scripts/setup.sh installs it)" >&2; exit 2; }
(
  flock 9
  cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDDL_FUZZ=ON -DWITH_TORCH=OFF -DWITH_TESTS=OFF -DWITH_NCCL=OFF >/dev/null
  cmake --build "$build" --target "${name}_fuzz" -j"$(nproc)" >/dev/null
) 9>"$root/.fuzz-build.lock"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$build/bin/${name}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$work/" -print_final_stats=1 "$work" "$corpus" 2>&1 | tail -n 25
status=${PIPESTATUS[0]}
if ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* >/dev/null 2>&1; then
  echo "fuzz.sh: $name found a failing input:" >&2; ls "$work" >&2
  exit 1
fi
exit "$status"
