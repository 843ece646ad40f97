#!/usr/bin/env bash
# Installs the build into a fresh prefix, builds tests/e2e/package/consumer against it with
# find_package(ddlaunch), and runs it as a 3-rank job under the installed `launch`.
# Usage: package_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
work="$(mktemp -d /tmp/ddl_package_test.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
# Only the headers a library lists are installed: a detail header must not be there.
test -f "$work/prefix/include/ddl/store/store.h"
test -f "$work/prefix/include/ddl/worker/runtime/rendezvous.h"
if test -e "$work/prefix/include/ddl/store/store_detail.h"; then
  echo "package_test: a private header was installed" >&2
  exit 1
fi
cmake -S "$src/tests/e2e/package/consumer" -B "$work/consumer" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || {
  cat "$work/configure.log" >&2
  exit 1
}
cmake --build "$work/consumer" > "$work/build.log" || {
  cat "$work/build.log" >&2
  exit 1
}
"$work/prefix/bin/launch" --quiet --nproc_per_node=3 --log_dir "$work/logs" "$work/consumer/consumer"
for rank in 0 1 2; do
  grep -q "rank $rank of 3: sum 6" "$work/logs/workerlog.$rank" || {
    echo "package_test: rank $rank did not report sum 6:" >&2
    cat "$work/logs/workerlog.$rank" >&2
    exit 1
  }
done
echo "package_test: the installed package built and ran a 3-rank job"
