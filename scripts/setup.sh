#!/usr/bin/env bash
# Installs the Debian 12 packages memplan builds and tests with. Idempotent: installs only what is missing.
# Usage: scripts/setup.sh [--test]   (--test adds what the test suite needs: ONNX test data, Python's onnx and torch;
# --zoo, what tests/models/export_zoo.py needs, is the same)
set -euo pipefail

# pybind11-dev, python3-dev, python3-venv, python3-setuptools: the Python module (python/) and its pip install.
# libmimalloc-dev: the command-line tool's allocator (cli/CMakeLists.txt).
build_pkgs=(cmake g++ make pkg-config libonnx-dev libprotobuf-dev protobuf-compiler libboost-graph-dev
            libcli11-dev nlohmann-json3-dev libfmt-dev libmimalloc-dev pybind11-dev python3-pybind11 python3-dev
            python3-venv python3-setuptools python3-wheel)
# python3-torch, python3-torchvision: the Hugging Face config tests (tests/import/hf_*_test.py) export
# tests/models/llama.py and its mixture-of-experts siblings with Debian's torch 1.13 at test time (through
# tests/models/export_zoo.py, which imports torchvision) and compare memplan's graph with it; the model zoo export
# script needs the same two.
test_pkgs=(libgtest-dev libgmock-dev libonnx-testdata python3-onnx python3-numpy python3-jsonschema python3-pytest
           clang libclang-rt-14-dev strace python3-torch python3-torchvision)

want=("${build_pkgs[@]}")
for a in "$@"; do
  case "$a" in
    --test | --zoo) want+=("${test_pkgs[@]}") ;;
    *) echo "setup.sh: unknown option '$a' (expected --test or --zoo)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup.sh: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
