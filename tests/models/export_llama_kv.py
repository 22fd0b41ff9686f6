#!/usr/bin/python3
"""Export the Llama-family decoder of tests/models/llama.py with a KV cache, in three serving styles.

    /usr/bin/python3 tests/models/export_llama_kv.py            # every export below (about a minute on 2 cores)
    /usr/bin/python3 tests/models/export_llama_kv.py --only llama_tiny_kv

  llama_tiny_kv          optimum's decoder_with_past_model.onnx: llama.LlamaWithCache(past=True), torch.onnx
                         (eval, constant folding); inputs input_ids, attention_mask, position_ids,
                         past_key_values.{i}.key/value; outputs logits, present.{i}.key/value
  llama_tiny_kv_prefill  optimum's decoder_model.onnx: LlamaWithCache(past=False), no past inputs, the same
                         outputs (the presents hold the prompt's keys and values)
  llama_tiny_kv_merged   optimum's decoder_model_merged.onnx, built from the two as optimum's merge_decoders
                         (optimum/onnx/graph_transformations.py) builds it: one If on a bool input
                         use_cache_branch of shape [1], then_branch the with-past graph, else_branch the
                         prefill graph, both without inputs; the initializers of both, deduplicated by value,
                         in the outer graph (scalars and 1-D int initializers stay in the branches, as
                         optimum keeps them); graph inputs the union of both (the past ones included: the
                         prefill step feeds them with past length 0)
  llama_tiny_gqa         ONNX Runtime GenAI's style (export_gqa.py): com.microsoft GroupQueryAttention
  llama3_1_8b_kv,        the real sizes of llama_tiny_kv, weight-less: two layers traced on the meta device and
  llama3_2_1b_kv         stitched to the full count (export_llama.py's pipeline; the per-layer past/present
                         graph inputs and outputs are cloned with their layer), checked at every run on
                         llama_tiny's config against torch.onnx's four-layer export

Dimension names: batch_size, sequence_length (new tokens), past_sequence_length, total_sequence_length
(past + new: the attention mask and the presents). optimum names the latter
"past_sequence_length + sequence_length"; a plain name is what `memplan --dim` can bind.

The tiny exports have weights (in <stem>.onnx.data, not committed); validate/ort/run_shapes.py runs them in
ONNX Runtime. Every tiny export is checked here against the PyTorch module it came from: a prefill of
the first tokens followed by a decode step over the rest must give the full sequence's logits.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import sys
from typing import Dict, List, Optional

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_llama  # noqa: E402
import export_zoo  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402

OPSET = 17
TRACE_BATCH, TRACE_NEW, TRACE_PAST = 2, 5, 3  # distinct, so that no two dynamic axes are confused


def names(layers: int, past: bool):
    past_names, present_names = llama.cache_names(layers)
    inputs = ["input_ids", "attention_mask", "position_ids"] + (past_names if past else [])
    outputs = ["logits"] + present_names
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "total_sequence_length"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    for n in (past_names if past else []):
        axes[n] = {0: "batch_size", 2: "past_sequence_length"}
    for n in present_names:
        axes[n] = {0: "batch_size", 2: "total_sequence_length" if past else "sequence_length"}
    return inputs, outputs, axes


def trace(module: llama.LlamaWithCache, export_params: bool) -> onnx.ModelProto:
    cfg, layers = module.cfg, len(module.layers)
    device = next(module.parameters()).device
    args = llama.make_cache_inputs(cfg, TRACE_BATCH, TRACE_NEW, TRACE_PAST if module.past else 0, layers, zoo.SEED, device=device,
                                   with_past=module.past)
    input_names, output_names, axes = names(layers, module.past)
    buffer = io.BytesIO()
    guard = export_llama.meta_constants_from_cpu(cfg) if device.type == "meta" else contextlib.nullcontext()
    module.eval()
    with guard:
        torch.onnx.export(module, args, buffer, opset_version=OPSET, input_names=input_names,
                          output_names=output_names, dynamic_axes=axes, export_params=export_params,
                          training=torch.onnx.TrainingMode.EVAL, do_constant_folding=True)
    return onnx.load_model_from_string(buffer.getvalue())


def tiny_module(past: bool) -> llama.LlamaWithCache:
    torch.manual_seed(zoo.SEED)
    module = llama.LlamaWithCache(llama.CONFIGS["llama_tiny"], past=past)
    zoo.fill_distinct(module)
    return module.eval()


def weightless(name: str, stem: str, layers: Optional[int] = None) -> onnx.ModelProto:
    cfg = llama.CONFIGS[name]
    layers = cfg.num_hidden_layers if layers is None else layers
    module = llama.LlamaWithCache(cfg, past=True, layers=min(export_llama.TRACED_LAYERS, layers), device="meta")
    model = trace(module, export_params=False)
    export_llama.params_to_initializers(model, names(layers, True)[0])
    if layers > export_llama.TRACED_LAYERS:
        export_llama.stitch(model, layers)
    export_llama.point_at_missing_data(model, stem)
    return model


def check_stitching(direct: onnx.ModelProto) -> None:
    """Stitching llama_tiny's two traced layers up to four = torch.onnx's four-layer export."""
    a, b = export_llama.canonical(direct), export_llama.canonical(weightless("llama_tiny", "llama_tiny_kv"))
    for part in ["nodes", "outputs", "initializers"]:
        if a[part] != b[part]:
            raise SystemExit(f"llama_tiny_kv: the stitched graph's {part} differ from torch.onnx's")
    inputs = [v.name for v in direct.graph.input if v.name not in {t.name for t in direct.graph.initializer}]
    stitched = weightless("llama_tiny", "llama_tiny_kv")
    if inputs != [v.name for v in stitched.graph.input] or \
            [o.name for o in direct.graph.output] != [o.name for o in stitched.graph.output]:
        raise SystemExit("llama_tiny_kv: the stitched graph's inputs or outputs differ from torch.onnx's")
    print(f"llama_tiny_kv: stitched from {export_llama.TRACED_LAYERS} layers = torch.onnx's {len(direct.graph.node)} nodes")


def check_against_full_sequence() -> None:
    """Prefill of 5 tokens then 3 new ones with the cache = the full 8-token forward (PyTorch, CPU)."""
    cfg = llama.CONFIGS["llama_tiny"]
    full = llama.Llama(cfg)
    full.load_state_dict(tiny_module(False).state_dict())
    prefill, decode = tiny_module(False), tiny_module(True)
    ids = torch.randint(0, cfg.vocab_size, (2, 8), generator=torch.Generator().manual_seed(zoo.SEED))
    positions = torch.arange(8).unsqueeze(0).expand(2, 8)
    with torch.no_grad():
        expected = full.eval()(ids)
        first = prefill(ids[:, :5], torch.ones(2, 5, dtype=torch.int64), positions[:, :5])
        second = decode(ids[:, 5:], torch.ones(2, 8, dtype=torch.int64), positions[:, 5:], *first[1:])
    got = torch.cat((first[0], second[0]), dim=1)
    if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
        raise SystemExit(f"llama_tiny_kv: prefill + decode differ from the full forward by {(got - expected).abs().max()}")
    if list(second[1].shape) != [2, cfg.num_key_value_heads, 8, cfg.head_dim]:
        raise SystemExit(f"llama_tiny_kv: present.0.key is {list(second[1].shape)}")
    print("llama_tiny_kv: prefill(5) + decode(3) with the cache = the 8-token forward")


# --------------------------------------------------------------------------------------------------
# optimum's merge_decoders


def tensor_key(t: TensorProto):
    return (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes())


def merge(prefill: onnx.ModelProto, with_past: onnx.ModelProto) -> onnx.ModelProto:
    """The merged decoder as optimum's merge_decoders builds it (see the module docstring)."""
    prefill, with_past = copy.deepcopy(prefill), copy.deepcopy(with_past)
    kept_in_branch = lambda t: len(t.dims) == 0 or (len(t.dims) == 1 and t.data_type in (TensorProto.INT32, TensorProto.INT64))
    shared: Dict = {}
    outer: List[TensorProto] = []
    for model, tag in [(with_past, "with_past"), (prefill, "no_past")]:
        renames = {}
        for t in model.graph.initializer:
            if kept_in_branch(t):
                continue
            key = tensor_key(t)
            if key not in shared:
                name = t.name if t.name not in {o.name for o in outer} else f"{tag}::{t.name}"
                shared[key] = name
                keep = copy.deepcopy(t)
                keep.name = name
                outer.append(keep)
            renames[t.name] = shared[key]
        for node in model.graph.node:
            node.input[:] = [renames.get(i, i) for i in node.input]
        branch_init = [t for t in model.graph.initializer if kept_in_branch(t)]
        del model.graph.initializer[:]
        model.graph.initializer.extend(branch_init)
    # optimum's _unify_onnx_outputs: the no-past graph's outputs take the with-past graph's types.
    del prefill.graph.output[:]
    prefill.graph.output.extend(copy.deepcopy(with_past.graph.output))
    branch = lambda m, name: helper.make_graph(list(m.graph.node), name, [], list(m.graph.output),
                                               initializer=list(m.graph.initializer))
    use_cache = helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])
    if_node = helper.make_node("If", ["use_cache_branch"], [o.name for o in with_past.graph.output],
                               name="optimum::if", then_branch=branch(with_past, "with_past"),
                               else_branch=branch(prefill, "no_past"))
    inputs = list(with_past.graph.input) + [v for v in prefill.graph.input
                                            if v.name not in {i.name for i in with_past.graph.input}]
    graph = helper.make_graph([if_node], "merged", inputs + [use_cache], list(with_past.graph.output),
                              initializer=outer)
    merged = helper.make_model(graph, producer_name="memplan tests/models/export_llama_kv.py (optimum merge_decoders)",
                               opset_imports=list(with_past.opset_import))
    merged.ir_version = with_past.ir_version
    onnx.checker.check_model(merged)
    return merged


REAL_POINTS = [(1, 128, 0), (2, 1, 127), (4, 16, 512)]  # (batch, new tokens, past)


def pytorch_shapes(name: str) -> Dict:
    """Every graph output's shape from the full-size module on the meta device (ATen's shape functions, no
    arithmetic) at REAL_POINTS: what the real-size exports must give (tests/import/kv_shapes_test.py)."""
    cfg = llama.CONFIGS[name]
    module = llama.LlamaWithCache(cfg, past=True, device="meta").eval()
    _, output_names, _ = names(cfg.num_hidden_layers, True)
    points = []
    with torch.no_grad():
        for b, n, p in REAL_POINTS:
            outs = module(*llama.make_cache_inputs(cfg, b, n, p, None, zoo.SEED, device="meta"))
            points.append({"dims": {"batch_size": b, "sequence_length": n, "past_sequence_length": p,
                                    "total_sequence_length": p + n},
                           "outputs": {k: list(v.shape) for k, v in zip(output_names, outs)}})
    return {"model": f"{name}_kv.onnx", "config_source": cfg.source, "points": points}


def save_tiny(model: onnx.ModelProto, out: str, stem: str) -> str:
    path = export_zoo.save(model, out, stem, inline=False)
    print(f"{path}: {os.path.getsize(path):,} bytes, {len(model.graph.node)} nodes", flush=True)
    return path


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="STEM")
    parser.add_argument("--out", default=HERE)
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    want = lambda stem: not args.only or stem in args.only
    if any(want(s) for s in ["llama_tiny_kv", "llama_tiny_kv_prefill", "llama_tiny_kv_merged"]):
        check_against_full_sequence()
        with_past = trace(tiny_module(True), export_params=True)
        prefill = trace(tiny_module(False), export_params=True)
        check_stitching(with_past)
        merged = merge(prefill, with_past)  # before saving: saving moves the weights out of the protos
        if want("llama_tiny_kv"):
            save_tiny(with_past, args.out, "llama_tiny_kv")
        if want("llama_tiny_kv_prefill"):
            save_tiny(prefill, args.out, "llama_tiny_kv_prefill")
        if want("llama_tiny_kv_merged"):
            save_tiny(merged, args.out, "llama_tiny_kv_merged")
    real = {}
    for name in ["llama3_1_8b", "llama3_2_1b"]:
        stem = f"{name}_kv"
        if want(stem):
            real[stem] = pytorch_shapes(name)
            model = weightless(name, stem)
            path = os.path.join(args.out, f"{stem}.onnx")
            onnx.save_model(model, path)
            print(f"{path}: {os.path.getsize(path):,} bytes, {len(model.graph.node)} nodes", flush=True)
    if real:
        path = os.path.join(args.out, "kv", "pytorch_shapes.json")
        recorded = {}
        if os.path.exists(path):
            with open(path) as f:
                recorded = json.load(f)
        recorded.update(real)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(dict(sorted(recorded.items())), f, indent=1)
            f.write("\n")
    if want("llama_tiny_gqa"):
        import export_gqa  # noqa: E402
        save_tiny(export_gqa.build(), args.out, "llama_tiny_gqa")
    return 0


if __name__ == "__main__":
    sys.exit(main())
