#!/usr/bin/env bash
# Builds memplan's libFuzzer targets (build-fuzz/, clang 14, ASan+UBSan) and runs each for SECONDS,
# then prints a table of executions, coverage (libFuzzer's cov: edges, ft: features) and findings.
#
# Usage: fuzz/run.sh SECONDS [TARGET...]     (default: every fuzz/targets/*.cc)
#   FUZZ_BUILD_DIR   build folder (default build-fuzz; scripts/test.sh passes its clang build-asan, configured
#                    with MEMPLAN_FUZZ, whose targets are built already)
#   FUZZ_JOBS        targets run at once (default 1; the campaign in bench/fuzz.md used 2)
#
# Seeds: the committed corpus (fuzz/corpus/), the committed regression inputs (fuzz/regressions/) and, when
# installed, every model of Debian's libonnx-testdata. New inputs go to BUILD/corpus/<target>/ (kept between
# runs, not committed). A finding (crash, sanitizer report, timeout, out-of-memory, leak) leaves its input in
# BUILD/artifacts/<target>/; minimize it with `BUILD/fuzz/fuzz_<target> -minimize_crash=1 -runs=10000 FILE`, commit it
# under fuzz/regressions/<target>/<what-went-wrong> and fix the bug.
# Exit status: 0 no finding, 1 a finding, 0 with "skipped" when clang's libFuzzer runtime is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# --probe: exit 0 where clang++ links a libFuzzer target (scripts/test.sh asks), 1 where not.
probe_fuzzer() {
  local dir
  dir=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$dir/p.cc"
  local ok=1
  if command -v clang++ >/dev/null && clang++ -fsanitize=fuzzer "$dir/p.cc" -o "$dir/p" 2>/dev/null; then ok=0; fi
  rm -rf "$dir"
  return $ok
}
if [ "${1:-}" = "--probe" ]; then probe_fuzzer; exit; fi

if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
seconds=$1
shift
build=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-1}

# clang with the libFuzzer runtime (Debian: clang-14 and libclang-rt-14-dev)?
if ! probe_fuzzer; then
  echo "fuzz/run.sh: skipped: clang++ with the libFuzzer runtime is not installed"
  exit 0
fi

if [ $# -gt 0 ]; then
  targets=("$@")
  explicit_targets=1
else
  targets=()
  for f in fuzz/targets/*.cc; do targets+=("$(basename "$f" .cc)"); done
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DMEMPLAN_FUZZ=ON -DMEMPLAN_BUILD_TESTS=OFF -DMEMPLAN_CUDA=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" >/dev/null
fi
cmake --build "$build" -j 2 --target "${targets[@]/#/fuzz_}" >/dev/null

# Every libonnx-testdata model as a seed, one file each (libFuzzer would also read the test data .pb files).
seeds="$build/seeds/testdata"
if [ ! -d "$seeds" ] && [ -d /usr/share/libonnx-testdata/data ]; then
  mkdir -p "$seeds"
  find /usr/share/libonnx-testdata/data -name model.onnx | while read -r m; do
    cp "$m" "$seeds/$(basename "$(dirname "$(dirname "$m")")")_$(basename "$(dirname "$m")").onnx"
  done
fi

# The seeds each target reads: model targets take models, the planner its own byte strings.
seed_dirs() {
  case $1 in
    planner_random) echo "fuzz/corpus/planner_random" ;;
    *) echo "fuzz/corpus/models $( [ -d "$seeds" ] && echo "$seeds")" ;;
  esac
  [ -d "fuzz/regressions/$1" ] && echo "fuzz/regressions/$1"
  true
}

run_target() {
  local t=$1
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t" "$build/logs"
  # -timeout: one input running 25 s is a hang. -rss_limit_mb/-malloc_limit_mb: 2 GiB in total or in one
  # allocation is an out-of-memory finding (weights are never materialized, so no input needs that).
  # shellcheck disable=SC2046
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" \
    "$build/corpus/$t" $(seed_dirs "$t") >"$build/logs/$t.log" 2>&1 || true
}

start=$(date +%s)
# What the binaries were built from (the build above), for the summary.
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- 2>/dev/null || commit="$commit + uncommitted changes"
stamp="$build/.run-start-$$"
touch "$stamp"
pids=()
for t in "${targets[@]}"; do
  run_target "$t" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$jobs" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done

# One summary per set of targets, so runs of different targets side by side do not overwrite each other.
if [ -n "${explicit_targets:-}" ]; then
  summary="$build/fuzz-summary-$(IFS=-; echo "${targets[*]}").md"
else
  summary="$build/fuzz-summary.md"
fi
{
  echo "fuzz/run.sh $seconds, $(date -u +%Y-%m-%dT%H:%MZ), built at $commit, wall $(( $(date +%s) - start )) s"
  echo
  echo "| target | seconds | executions | exec/s | cov | ft | corpus | findings |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$summary"
total=0
found=0
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
  # This run's findings, not earlier ones. libFuzzer also saves any unit slower than -report_slow_units (10 s) as
  # slow-unit-*: not a finding (a hang is -timeout's, 25 s, saved as timeout-*); on a loaded machine the first unit,
  # which builds ONNX's schema registry (about 1 s under ASan), can pass 10 s.
  n=$(find "$build/artifacts/$t" -type f -newer "$stamp" ! -name 'slow-unit-*' | wc -l)
  if grep -qE '^==[0-9]+==ERROR|memplan fuzz finding|deadly signal|-- timeout|out-of-memory' "$log"; then
    n=$((n > 0 ? n : 1))
  fi
  total=$((total + ${execs:-0}))
  found=$((found + n))
  echo "| $t | $seconds | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | $n |" >>"$summary"
done
echo "| total | | $total | | | | | $found |" >>"$summary"
cat "$summary"
if [ "$found" -gt 0 ]; then
  # A clean clone's CI keeps nothing but its output: print each finding's input (base64) and then its report, last
  # so that a log's tail shows it. Reproduce with `base64 -d > input && BUILD/fuzz/fuzz_<target> input`.
  for t in "${targets[@]}"; do
    for a in $(find "$build/artifacts/$t" -type f -newer "$stamp" ! -name 'slow-unit-*' | sort); do
      if [ "$(stat -c %s "$a")" -le 49152 ]; then
        echo "--- $t: input $(basename "$a"), base64 ---"
        base64 -w 160 "$a"
      else
        echo "--- $t: input $(basename "$a"): $(stat -c %s "$a") bytes, not printed ---"
      fi
    done
  done
  for t in "${targets[@]}"; do
    log="$build/logs/$t.log"
    first=$(grep -nE '^==[0-9]+==|memplan fuzz finding|deadly signal|-- timeout|out-of-memory' "$log" | head -1 | cut -d: -f1 || true)
    if [ -n "$first" ]; then
      echo "--- $t: report (from $log line $first) ---"
      sed -n "${first},$((first + 60))p" "$log"
    fi
  done
  echo "findings: see $build/logs/ and $build/artifacts/"
  rm -f "$stamp"
  exit 1
fi
rm -f "$stamp"
