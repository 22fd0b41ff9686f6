#!/usr/bin/env bash
# Second README command: install what is missing, build, and pass all tests; install the Python module with pip
# into a fresh venv (the third command) and test it there; then the same tests under ASan+UBSan; then each
# libFuzzer target briefly (fuzz/run.sh).
# Usage: scripts/test.sh [--no-sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
jobs=$(nproc 2>/dev/null || echo 2)

# Each step's CPU seconds (user+sys of everything it ran, from bash's `times`) and wall seconds, printed as it
# ends and again as a table at the end: CPU seconds do not depend on what else shares the machine
# (bench/ci_time.md compares them).
stage_table=()
times_file=$(mktemp)
trap 'rm -f "$times_file"' EXIT
children_cpu() {  # sets cpu_now; `times` must run in this shell (a subshell has no children yet)
  times >"$times_file"
  cpu_now=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/)
                           printf "%.1f", u[1]*60 + u[2] + s[1]*60 + s[2] }' "$times_file")
}
stage() {
  local name=$1 cpu0 wall0=$SECONDS cpu
  shift
  children_cpu
  cpu0=$cpu_now
  "$@"
  children_cpu
  cpu=$(awk -v a="$cpu_now" -v b="$cpu0" 'BEGIN { printf "%.0f", a - b }')
  stage_table+=("$(printf '%-28s %8s %8s' "$name" "$cpu" "$((SECONDS - wall0))")")
  echo "== $name: $cpu CPU s, $((SECONDS - wall0)) s wall =="
}
stage_summary() {
  printf '%-28s %8s %8s\n' "step" "CPU s" "wall s"
  printf '%s\n' "${stage_table[@]}"
  echo "total wall: $((SECONDS - start)) s"
}

stage setup scripts/setup.sh --test
# ON: without GoogleTest the configure fails (AUTO would build no tests)
# -g1: line tables only (file:line in stack traces and sanitizer reports), not the full debug info of
# RelWithDebInfo/Debug, which cost a quarter of the compile time (bench/ci_time.md) and no test reads.
# NDEBUG as RelWithDebInfo has it; the code GCC generates does not depend on -g.
stage build scripts/build.sh -DMEMPLAN_BUILD_TESTS=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
stage ctest bash -c "cd build && ctest --output-on-failure -j $jobs"

# The README's third command, offline (--no-index: pip may fetch nothing), into a fresh venv that sees Debian's
# torch; build/ is already built, so pip only packs it. Then the installed module and command are checked.
echo "== pip install --no-build-isolation --no-index . into a fresh venv =="
venv_dir=$(mktemp -d)
trap 'rm -rf "$venv_dir" "$times_file"' EXIT
/usr/bin/python3 -m venv --system-site-packages "$venv_dir/venv"
stage pip_install timeout 900 "$venv_dir/venv/bin/pip" install --no-build-isolation --no-index -q .
src_dir=$PWD
stage pytest_installed bash -c "cd '$venv_dir' && MEMPLAN_SOURCE_DIR='$src_dir' PYTHONDONTWRITEBYTECODE=1 \
   timeout 600 \
   venv/bin/python -m pytest -q -p no:cacheprovider '$src_dir/tests/python/test_installed.py'"

if [ "${1:-}" != "--no-sanitize" ]; then
  echo "== the same tests under AddressSanitizer + UndefinedBehaviorSanitizer =="
  # With clang's libFuzzer runtime (scripts/setup.sh --test installs it) one clang build serves the sanitized tests
  # and the fuzz targets: MEMPLAN_FUZZ adds libFuzzer's coverage instrumentation (fuzzer-no-link) to every library
  # and builds fuzz/targets beside the tests, so fuzz/run.sh finds them built in build-asan instead of building the
  # project a third time. Without it, gcc builds the tests and the fuzz step is skipped.
  sanitizer_build=(-DMEMPLAN_SANITIZE=ON -DMEMPLAN_CUDA=OFF -DMEMPLAN_BUILD_TESTS=ON "-DCMAKE_CXX_FLAGS_DEBUG=-O1 -g1")
  if fuzz/run.sh --probe; then
    export CC=clang CXX=clang++
    sanitizer_build+=(-DMEMPLAN_FUZZ=ON)
  fi
  # -O1: AddressSanitizer's documented setting for reasonable speed (clang's AddressSanitizer.rst); the suite then
  # runs in 0.4 of -O0's CPU time for 1.4 times its build (bench/ci_time.md); -g1 as above
  BUILD_DIR=build-asan BUILD_TYPE=Debug stage build_asan scripts/build.sh "${sanitizer_build[@]}"
  stage ctest_asan bash -c "cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 MEMPLAN_SANITIZED=1 \
     ctest --output-on-failure -j $jobs -LE no_sanitize"

  # CI allows 90 minutes in all: the brief fuzz runs are skipped, with a message, past 60 of them.
  if (( SECONDS - start < 3600 )); then
    echo "== fuzz targets, 10 s each (fuzz/run.sh; skipped without clang's libFuzzer runtime) =="
    FUZZ_BUILD_DIR=build-asan stage fuzz fuzz/run.sh 10
  else
    echo "== fuzz targets skipped: $(( (SECONDS - start) / 60 )) minutes already used (run fuzz/run.sh 10 by hand) =="
  fi
fi
stage_summary
