#!/usr/bin/env bash
# Second README command: install what is missing, build, and pass all tests; then the same tests under ASan+UBSan.
# Usage: scripts/test.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)

scripts/build.sh
(cd build && ctest --output-on-failure -j "$jobs")

if [ "${1:-}" != "--no-sanitize" ]; then
  echo "== the same tests under AddressSanitizer + UndefinedBehaviorSanitizer =="
  BUILD_DIR=build-asan BUILD_TYPE=Debug scripts/build.sh -DMEMPLAN_SANITIZE=ON
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     MEMPLAN_SANITIZED=1 ctest --output-on-failure -j "$jobs" -LE no_sanitize)
fi
