#!/usr/bin/env bash
# Compiler launcher that times each compile: set CMAKE_CXX_COMPILER_LAUNCHER to this file (the environment
# variable of that name works for a fresh build folder) and CI_TIME_LOG to a file; each compile appends
# "user_s sys_s wall_s object" to it. bench/ci_time.md sums these per target and per file.
out=unknown
prev=
for a in "$@"; do
  [ "$prev" = -o ] && out=$a
  prev=$a
done
exec /usr/bin/time -a -o "${CI_TIME_LOG:-/dev/null}" -f "%U %S %e $out" "$@"
