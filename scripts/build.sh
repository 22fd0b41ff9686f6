#!/usr/bin/env bash
# Configures and builds memplan into BUILD_DIR (default: build). `--target NAME` (repeatable) builds only those
# targets (scripts/quickstart.sh: memplan_user, the CLI and the Python module); without it, everything, tests
# included. Other arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
configure=()
targets=()
while (($#)); do
  case "$1" in
    --target)
      (($# >= 2)) || { echo "build.sh: --target needs a target name" >&2; exit 2; }
      targets+=(--target "$2"); shift 2 ;;
    *) configure+=("$1"); shift ;;
  esac
done
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} "${configure[@]}" >/dev/null
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
