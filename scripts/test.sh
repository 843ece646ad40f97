#!/usr/bin/env bash
# The README's test command: set up, build, run the whole suite through ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure --timeout 900
# ThreadSanitizer build of the torch-free libraries' tests in ./build-tsan (~4.5 min on 2 cores:
# build ~4 min, tests ~25 s; docs/testing.md).
bash "$root/scripts/tsan.sh"
