#!/usr/bin/env bash
# Run HERE (the CPU machine) before spending GPU time: puts everything the GPU run needs into .carry/validate/,
# a git-ignored folder the device tool carries (`carry: [".carry/validate"]`).
#   .carry/validate/bin/memplan-validate  static C++ runtime + cudart_static: needs only glibc and the driver
#   .carry/validate/bin/validate_tests    the gtest suite, whose CUDA tests run on the GPU
#   .carry/validate/include/{nlohmann,CLI} headers, to rebuild the harness there with nvcc if the binary fails
#   .carry/validate/plans/*.plan.json      `memplan plan` for the zoo at the GPU run's batch sizes
# Usage: validate/gpu/prepare.sh            (BUILD_DIR=build-carry by default; -j2)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-carry}
carry=.carry/validate
mkdir -p "$carry/bin" "$carry/include" "$carry/plans"

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMEMPLAN_CUDA=ON >/dev/null
cmake --build "$build" -j2 --target memplan-validate validate_tests
install -m 755 -s "$build/validate/memplan-validate" "$carry/bin/memplan-validate"
install -m 755 -s "$build/tests/validate/validate_tests" "$carry/bin/validate_tests"
rm -rf "$carry/include/nlohmann" "$carry/include/CLI"
cp -r /usr/include/nlohmann /usr/include/CLI "$carry/include/"

# Plans: the inference exports at the batch sizes ground_truth.py measures (GPU_SIZES there).
if cmake --build "$build" -j2 --target memplan >/dev/null 2>&1; then
  rm -f "$carry"/plans/*.plan.json
  for model in resnet18 resnet50 mobilenet_v2 efficientnet_b0 vit_b_16 gpt_tiny bert gpt; do
    onnx=tests/models/$model.onnx
    [ -f "$onnx" ] || { echo "prepare: no $onnx, no plan for $model"; continue; }
    case $model in gpt|gpt_tiny|bert) batches="2 8"; dims=(--dim seq=512) ;; *) batches="8 32"; dims=() ;; esac
    for b in $batches; do
      out=$carry/plans/$model-b$b.plan.json
      "$build/memplan" plan "$onnx" --batch "$b" "${dims[@]}" -o "$out" || echo "prepare: memplan plan failed for $model batch $b"
    done
  done
else
  echo "prepare: memplan does not build yet; no plans (put *.plan.json files into $carry/plans by hand)"
fi

# The carried binary must run here without CUDA: a quick CPU replay of each plan proves plan and binary.
for plan in tests/validate/plans/valid.json "$carry"/plans/*.plan.json; do
  [ -f "$plan" ] || continue
  "$carry/bin/memplan-validate" "$plan" --device cpu --mode arena >/dev/null || echo "prepare: CPU replay of $plan failed (exit $?)"
done
du -sh "$carry"
ls -l "$carry/bin" "$carry/plans"
