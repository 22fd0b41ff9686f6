#!/usr/bin/env bash
# Second README command: install what is missing, build, and pass all tests; install the Python module with pip
# into a fresh venv (the third command) and test it there; then the same tests under ASan+UBSan; then each
# libFuzzer target briefly (fuzz/run.sh).
# Usage: scripts/test.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)

scripts/build.sh -DMEMPLAN_BUILD_TESTS=ON  # ON: without GoogleTest the configure fails (AUTO would build no tests)
(cd build && ctest --output-on-failure -j "$jobs")

# The README's third command, offline (--no-index: pip may fetch nothing), into a fresh venv that sees Debian's
# torch; build/ is already built, so pip only packs it. Then the installed module and command are checked.
echo "== pip install --no-build-isolation --no-index . into a fresh venv =="
venv_dir=$(mktemp -d)
trap 'rm -rf "$venv_dir"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv_dir/venv"
timeout 900 "$venv_dir/venv/bin/pip" install --no-build-isolation --no-index -q .
src_dir=$PWD
(cd "$venv_dir" && MEMPLAN_SOURCE_DIR="$src_dir" PYTHONDONTWRITEBYTECODE=1 timeout 600 \
   venv/bin/python -m pytest -q -p no:cacheprovider "$src_dir/tests/python/test_installed.py")

if [ "${1:-}" != "--no-sanitize" ]; then
  echo "== the same tests under AddressSanitizer + UndefinedBehaviorSanitizer =="
  BUILD_DIR=build-asan BUILD_TYPE=Debug scripts/build.sh -DMEMPLAN_SANITIZE=ON -DMEMPLAN_CUDA=OFF \
    -DMEMPLAN_BUILD_TESTS=ON
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
     MEMPLAN_SANITIZED=1 ctest --output-on-failure -j "$jobs" -LE no_sanitize)

  # The brief fuzz runs build the project a third time (with clang); CI allows 90 minutes in all, so they
  # are skipped, with a message, when the steps above have already used 60 of them.
  if (( SECONDS - start < 3600 )); then
    echo "== fuzz targets, 10 s each (fuzz/run.sh; skipped without clang's libFuzzer runtime) =="
    fuzz/run.sh 10
  else
    echo "== fuzz targets skipped: $(( (SECONDS - start) / 60 )) minutes already used (run fuzz/run.sh 10 by hand) =="
  fi
fi
