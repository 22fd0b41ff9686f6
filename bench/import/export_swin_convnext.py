#!/usr/bin/python3
"""Export torchvision's swin_t and convnext_tiny to ONNX for the `inspect` timing in bench/import/README.md.

    /usr/bin/python3 bench/import/export_swin_convnext.py /tmp/memplan-bench

Writes DIR/swin_t.onnx and DIR/convnext_tiny.onnx the way tests/models/export_zoo.py exports the zoo's
inference models: eval mode, opset 17, default constant folding, a dynamic "batch" axis on the input and the
logits, random (untrained) weights kept inline. memplan never reads the weights; they only make the file
realistic to skip. Needs Debian's python (torch 1.13, torchvision 0.14). Do not commit the .onnx files.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torchvision

MODELS = ["swin_t", "convnext_tiny"]
IMAGE_SIZE = 224  # torchvision's published input size for both


def export(name: str, directory: str) -> str:
    torch.manual_seed(0)
    module = getattr(torchvision.models, name)(weights=None).eval()
    path = os.path.join(directory, f"{name}.onnx")
    example = torch.randn(2, 3, IMAGE_SIZE, IMAGE_SIZE)
    with torch.no_grad():
        torch.onnx.export(module, (example,), path, opset_version=17, input_names=["input"],
                          output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
    return path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", help="folder to write swin_t.onnx and convnext_tiny.onnx into")
    args = parser.parse_args(argv)
    os.makedirs(args.directory, exist_ok=True)
    torch.set_num_threads(1)
    for name in MODELS:
        path = export(name, args.directory)
        print(f"{path}: {os.path.getsize(path):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
