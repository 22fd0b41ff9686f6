#!/usr/bin/env bash
# First README command: install what is missing, build, and run memplan on the bundled example model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only what a user runs: the CLI and the Python module (the tests are built by scripts/test.sh).
echo "Building build/memplan and the Python module (scripts/test.sh builds the tests)"
scripts/build.sh --target memplan_user
model=tests/models/gpt_tiny.onnx
echo
echo "\$ build/memplan inspect $model --batch 8 --dim seq=512"
build/memplan inspect "$model" --batch 8 --dim seq=512
echo
echo "\$ build/memplan estimate $model --batch 8 --dim seq=512 --runtime pytorch"
build/memplan estimate "$model" --batch 8 --dim seq=512 --runtime pytorch
