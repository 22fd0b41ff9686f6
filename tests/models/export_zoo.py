#!/usr/bin/python3
"""Export the memplan model zoo to ONNX, reproducibly, and record what PyTorch says about each model.

    /usr/bin/python3 tests/models/export_zoo.py                  # all exports + expected_shapes.json
    /usr/bin/python3 tests/models/export_zoo.py --only gpt_tiny  # a subset (expected_shapes.json is merged)
    /usr/bin/python3 tests/models/export_zoo.py --inline-weights /tmp/zoo-inline   # benchmark inputs

Writes, next to this file:
  <name>.onnx            the graph; weights (floating-point initializers) live in <name>.onnx.data,
                         which .gitignore keeps out of git. Integer initializers and Constant nodes stay
                         inline: they hold shapes, axes and indices that shape inference must read.
  <name>.onnx.data       the weights (not committed)
  expected_shapes.json   per export: the output shapes the PyTorch module produces at batch 1 and 8
                         (x seq 128 and 512 for text models), its trainable-parameter and buffer counts.

Exports (see docs/zoo.md):
  inference  <model>.onnx for every zoo model: eval mode, opset 17, default constant folding
             (BatchNorm folded into Conv); gpt_tiny_op13.onnx and bert_op13.onnx at opset 13, where
             LayerNorm is exported decomposed (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add).
  training   <model>_train.onnx for the torchvision models, gpt, gpt_tiny and bert: train mode,
             TrainingMode.PRESERVE, no constant folding, so BatchNorm and every parameter survive.
"""
from __future__ import annotations

import argparse
import copy
import io
import json
import os
import sys
from typing import Dict, List, NamedTuple, Optional

import numpy as np
import onnx
import torch
import torchvision
from onnx import external_data_helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo  # noqa: E402

MAX_COMMITTED_BYTES = 1 << 20  # goal: every committed .onnx under 1 MiB
BATCHES = [1, 8]
SEQS = [128, 512]
FLOAT_TYPES = {
    onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE,
}


class Export(NamedTuple):
    file_stem: str
    model: str
    opset: int
    training: bool


def all_exports() -> List[Export]:
    exports = [Export(name, name, 17, False) for name in zoo.MODEL_NAMES]
    exports += [Export("gpt_tiny_op13", "gpt_tiny", 13, False), Export("bert_op13", "bert", 13, False)]
    for name in zoo.TORCHVISION_MODELS + ["gpt", "gpt_tiny", "bert"]:
        exports.append(Export(f"{name}_train", name, 17, True))
    return exports


def export_proto(spec: Export, built: zoo.ZooModel) -> onnx.ModelProto:
    module = built.module
    module.train(spec.training)
    for sub in module.modules():
        # torch 1.13 cannot export StochasticDepth's bernoulli_ (efficientnet_b0): keep it in eval mode,
        # where it is the identity. It has no parameters, so the counts are unaffected.
        if isinstance(sub, torchvision.ops.StochasticDepth):
            sub.eval()
    buffer = io.BytesIO()
    torch.onnx.export(
        module,
        built.example_inputs,
        buffer,
        opset_version=spec.opset,
        input_names=built.input_names,
        output_names=built.output_names,
        dynamic_axes=built.dynamic_axes,
        training=torch.onnx.TrainingMode.PRESERVE if spec.training else torch.onnx.TrainingMode.EVAL,
        do_constant_folding=not spec.training,
    )
    module.eval()
    return onnx.load_model_from_string(buffer.getvalue())


def externalize_weights(model: onnx.ModelProto, directory: str, location: str) -> None:
    """Move every floating-point initializer's bytes to `location`; keep integer tensors inline."""
    for tensor in model.graph.initializer:
        if tensor.data_type not in FLOAT_TYPES:
            continue
        if not tensor.HasField("raw_data"):
            tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor), tensor.name))
        external_data_helper.set_external_data(tensor, location)
    path = os.path.join(directory, location)
    if os.path.exists(path):
        os.remove(path)  # write_external_data_tensors appends
    external_data_helper.write_external_data_tensors(model, directory)


def save(model: onnx.ModelProto, directory: str, stem: str, inline: bool) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{stem}.onnx")
    if not inline:
        externalize_weights(model, directory, f"{stem}.onnx.data")
    onnx.save_model(model, path)
    return path


def configs(model: str) -> List[Dict[str, int]]:
    if zoo.is_text(model):
        return [{"batch": b, "seq": s} for b in BATCHES for s in SEQS]
    return [{"batch": b} for b in BATCHES]


def config_key(config: Dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in config.items())


def _run(module: torch.nn.Module, inputs, names: List[str]) -> Dict[str, List[int]]:
    with torch.no_grad():
        outputs = module(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return {name: list(out.shape) for name, out in zip(names, outputs)}


def measured_output_shapes(model: str, built: zoo.ZooModel) -> Dict[str, Dict[str, List[int]]]:
    """The output shapes PyTorch gives at each configuration.

    Each configuration runs on the meta device: every ATen op's own shape function, without arithmetic,
    so GPT at batch 8 x seq 512 takes no CPU time. The smallest configuration also runs for real on the
    CPU, and must agree with the meta run."""
    meta_module = copy.deepcopy(built.module).to("meta")
    shapes = {}
    for config in configs(model):
        inputs = zoo.make_inputs(model, config["batch"], config.get("seq", 128))
        shapes[config_key(config)] = _run(meta_module, tuple(t.to("meta") for t in inputs), built.output_names)
    smallest = configs(model)[0]
    real = _run(built.module, zoo.make_inputs(model, smallest["batch"], smallest.get("seq", 128)), built.output_names)
    if real != shapes[config_key(smallest)]:
        raise SystemExit(f"{model}: CPU run gives {real}, meta run {shapes[config_key(smallest)]}")
    return shapes


def graph_inputs(model: onnx.ModelProto) -> Dict[str, List]:
    initializers = {t.name for t in model.graph.initializer}
    result = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        result[value.name] = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in dims]
    return result


def record(spec: Export, model: onnx.ModelProto, built: zoo.ZooModel, shapes) -> Dict:
    outputs = [o.name for o in model.graph.output]
    if outputs != built.output_names:
        raise SystemExit(f"{spec.file_stem}: ONNX graph outputs {outputs} differ from {built.output_names}")
    return {
        "file": f"{spec.file_stem}.onnx",
        "model": spec.model,
        "opset": spec.opset,
        "mode": "train" if spec.training else "eval",
        "inputs": graph_inputs(model),
        "pytorch_trainable_parameters": zoo.trainable_parameter_count(built.module),
        "pytorch_buffer_elements": zoo.buffer_count(built.module),
        "torchvision_published_parameters": zoo.TORCHVISION_PUBLISHED_PARAMS.get(spec.model),
        "outputs": shapes,
    }


def export_inline(directory: str) -> None:
    """resnet50 and vit_b_16 with their weights inside the .onnx, for bench/ (not committed)."""
    for name in ["resnet50", "vit_b_16"]:
        built = zoo.build_model(name)
        path = save(export_proto(Export(name, name, 17, False), built), directory, name, inline=True)
        print(f"{path}: {os.path.getsize(path):,} bytes (inline weights)")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="STEM", help="export only these file stems")
    parser.add_argument("--inline-weights", metavar="DIR",
                        help="only export resnet50 and vit_b_16 with inline weights into DIR")
    parser.add_argument("--out", default=HERE, help="output folder (default: this folder)")
    parser.add_argument("--record-only", action="store_true",
                        help="do not export: re-measure expected_shapes.json for the .onnx files already in --out")
    args = parser.parse_args(argv)

    torch.set_num_threads(min(2, torch.get_num_threads()))
    if args.inline_weights:
        export_inline(args.inline_weights)
        return 0

    exports = [e for e in all_exports() if not args.only or e.file_stem in args.only]
    json_path = os.path.join(args.out, "expected_shapes.json")
    expected = {"generator": {}, "models": {}}
    if os.path.exists(json_path):
        with open(json_path) as f:
            expected = json.load(f)
    expected["generator"] = {
        "command": "/usr/bin/python3 tests/models/export_zoo.py",
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "seed": zoo.SEED,
    }

    shapes_by_model: Dict[str, Dict] = {}
    for spec in exports:
        built = zoo.build_model(spec.model)
        if args.record_only:
            model = onnx.load(os.path.join(args.out, f"{spec.file_stem}.onnx"), load_external_data=False)
        else:
            model = export_proto(spec, built)
        if spec.model not in shapes_by_model:
            shapes_by_model[spec.model] = measured_output_shapes(spec.model, built)
        expected["models"][spec.file_stem] = record(spec, model, built, shapes_by_model[spec.model])
        path = os.path.join(args.out, f"{spec.file_stem}.onnx")
        if not args.record_only:
            save(model, args.out, spec.file_stem, inline=False)
        size = os.path.getsize(path)
        print(f"{path}: {size:,} bytes, {len(model.graph.node)} nodes", flush=True)
        if size > MAX_COMMITTED_BYTES:
            print(f"warning: {path} exceeds {MAX_COMMITTED_BYTES} bytes", file=sys.stderr)
        write_expected(json_path, expected)  # after each export, so a later failure keeps the finished ones
    return 0


def write_expected(path: str, expected: Dict) -> None:
    expected["models"] = dict(sorted(expected["models"].items()))
    with open(path, "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
