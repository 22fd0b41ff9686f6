#!/usr/bin/env bash
# First README command: install what is missing, build, and run memplan on the bundled example model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
model=tests/models/gpt_tiny.onnx
echo
echo "\$ build/memplan inspect $model --batch 8 --dim seq=512"
build/memplan inspect "$model" --batch 8 --dim seq=512
echo
echo "\$ build/memplan estimate $model --batch 8 --dim seq=512 --runtime pytorch"
build/memplan estimate "$model" --batch 8 --dim seq=512 --runtime pytorch
