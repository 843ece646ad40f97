#!/usr/bin/env bash
# Configures and builds the project into ./build (Release). Extra arguments go to cmake.
# DDL_BUILD_TARGETS="a b": build only these targets (and what they need), as scripts/main.sh
# does; unset or empty: every target, the tests included (scripts/test.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release "$@"
targets=()
if [[ -n "${DDL_BUILD_TARGETS:-}" ]]; then
  read -ra names <<< "$DDL_BUILD_TARGETS"
  targets=(--target "${names[@]}")
fi
cmake --build "$root/build" -j"$(nproc)" ${targets[@]+"${targets[@]}"}
