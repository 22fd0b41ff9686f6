#!/usr/bin/env bash
# The one GPU command (validate/gpu/README.md gives the exact device-tool call). Run validate/gpu/prepare.sh
# on the CPU machine first. Usage: validate/gpu/run_gpu.sh [OUT_DIR] [ground_truth.py options...]
# OUT_DIR defaults to $OUT (the device tool's output folder), else validate/results.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-validate/results}}
shift || true
mkdir -p "$out"
carry=.carry/validate
tag=$(date -u +%Y%m%d)-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z-' || echo gpu)
log=$out/log-$tag.txt
exec > >(tee "$log") 2>&1
echo "== $(date -u) on $(hostname); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader)"

# 1. The harness: the carried static binary, or a build here with nvcc from the carried headers.
bin=$carry/bin/memplan-validate
if ! "$bin" --version >/dev/null 2>&1; then
  echo "== carried memplan-validate does not run here; building it with nvcc"
  bin=/tmp/memplan-validate
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  "$nvcc" -O2 -std=c++20 -gencode=arch=compute_90,code=sm_90 -I. -I"$carry/include" \
    -DMEMPLAN_VERSION='"gpu-build"' -DMEMPLAN_VALIDATE_CUDA=1 \
    validate/plan.cc validate/replay.cc validate/cpu_device.cc validate/report.cc validate/devices.cc \
    validate/main.cc validate/cuda_device.cu -o "$bin" || { echo "== nvcc build failed"; bin=""; }
fi

# 2. The harness's own tests, CUDA ones included (a few seconds).
if [ -n "$bin" ] && [ -x "$carry/bin/validate_tests" ]; then
  echo "== validate_tests on the GPU"
  MEMPLAN_VALIDATE_PLANS=tests/validate/plans MEMPLAN_VALIDATE_BIN=$bin timeout 120 "$carry/bin/validate_tests" \
    --gtest_brief=1 2>&1 | tail -40
fi

# 3. PyTorch ground truth and memplan-validate on the zoo's plans; the script stops starting work at 400 s.
PYTHONUNBUFFERED=1 timeout 470 python3 validate/gpu/ground_truth.py --out "$out" --budget-s 400 \
  --plans "$carry/plans" ${bin:+--validate-bin "$bin"} "$@"
status=$?
echo "== ground_truth.py exit $status; files:"
ls -l "$out"
exit $status
