"""Tiny decoders with a KV cache, built with onnx.helper, for `memplan serve` tests (tests/cli/test_serve.py).

Every number they lead to can be computed by hand: 2 layers, 2 attention heads (= 2 KV heads), head_dim 4,
hidden 8, vocab 16, float32. Each layer concatenates its past keys/values with the new ones on axis 2
(Concat, as Hugging Face's DynamicCache.update does with torch.cat) and attends over the result; no mask, no
scaling, no normalisation: only the tensors' shapes matter to memplan.

    weights: embed 16x8 + 2 layers x (Wq, Wk, Wv, Wo: 8x8) + lm_head 8x16 = 768 floats = 3072 bytes
    KV bytes per cached token and sequence: 2 (K, V) x 2 layers x 2 kv heads x 4 head_dim x 4 bytes = 128

Variants (written next to this script; run with Debian's python3, which has onnx):
    kv_tiny.onnx           optimum's names: past_key_values.{i}.key/value [batch, 2, past_sequence_length, 4]
                           in, present.{i}.key/value [batch, 2, past_sequence_length + sequence_length, 4] out
    kv_tiny_renamed.onnx   the same graph with other names (cache_in_{i}_{k,v} / cache_out_{i}_{k,v}, dims
                           "b", "cached", "new"): found by structure, not by name
    kv_tiny_two_dims.onnx  layer 0 caches along "past_a", layer 1 along "past_b": ambiguous without --kv-dim
    no_kv_tiny.onnx        the same model without a cache: present outputs only, no past inputs
    kv_tiny_merged.onnx    the cache before the head split: past/present [batch, tokens, hidden], Concat on axis 1
    kv_tiny_mask.onnx      kv_tiny with optimum's attention_mask [batch, "past_sequence_length + sequence_length"]
                           added to the scores: a dimension serve binds from the other two
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, HIDDEN, HEADS, HEAD_DIM, LAYERS = 16, 8, 2, 4, 2


def build(names, with_past=True, past_dims=None, with_mask=False, merged_cache=False):
    """names: dict of naming functions and dim names; past_dims: per layer past dim name; merged_cache: the cache
    holds keys and values before the head split, [batch, tokens, hidden]."""
    rng = np.random.default_rng(0)
    batch, new = names["batch"], names["new"]
    past_dims = past_dims or [names["past"]] * LAYERS
    inits, nodes, inputs, outputs = [], [], [], []

    def weight(name, shape):
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name))
        return name

    inits.append(numpy_helper.from_array(np.array([0, 0, HEADS, HEAD_DIM], dtype=np.int64), "split_heads"))
    inits.append(numpy_helper.from_array(np.array([0, 0, HIDDEN], dtype=np.int64), "merge_heads"))
    inputs.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64, [batch, new]))
    nodes.append(helper.make_node("Gather", [weight("embed", [VOCAB, HIDDEN]), "input_ids"], ["h0"]))
    h = "h0"
    if with_mask:  # optimum's attention_mask [batch, past + new], added to the scores as a bias [batch, 1, 1, past + new]
        total_dim = f"{names['past']} + {new}"
        inputs.append(helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [batch, total_dim]))
        inits.append(numpy_helper.from_array(np.array([1, 2], dtype=np.int64), "mask_axes"))
        nodes.append(helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT))
        nodes.append(helper.make_node("Unsqueeze", ["mask_f", "mask_axes"], ["mask_bias"]))
    for i in range(LAYERS):
        past = past_dims[i]
        heads = {}
        def split(x, p):  # [batch, tokens, hidden] -> [batch, heads, tokens, head_dim]
            nodes.append(helper.make_node("Reshape", [x, "split_heads"], [f"l{i}.{p}4"]))
            nodes.append(helper.make_node("Transpose", [f"l{i}.{p}4"], [f"l{i}.{p}t"], perm=[0, 2, 1, 3]))
            return f"l{i}.{p}t"
        for p in ("q", "k", "v"):
            nodes.append(helper.make_node("MatMul", [h, weight(f"l{i}.W{p}", [HIDDEN, HIDDEN])], [f"l{i}.{p}"]))
            if not merged_cache or p == "q":
                heads[p] = split(f"l{i}.{p}", p)
        for p in ("k", "v"):
            out = names["out"](i, p)
            if merged_cache:
                inp = names["in"](i, p)
                inputs.append(helper.make_tensor_value_info(inp, TensorProto.FLOAT, [batch, past, HIDDEN]))
                nodes.append(helper.make_node("Concat", [inp, f"l{i}.{p}"], [out], axis=1))
                outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, f"{past} + {new}", HIDDEN]))
                heads[p] = split(out, p)
                continue
            if with_past:
                inp = names["in"](i, p)
                inputs.append(helper.make_tensor_value_info(inp, TensorProto.FLOAT, [batch, HEADS, past, HEAD_DIM]))
                nodes.append(helper.make_node("Concat", [inp, heads[p]], [out], axis=2))
                total = f"{past} + {new}"
            else:
                nodes.append(helper.make_node("Identity", [heads[p]], [out]))
                total = new
            outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [batch, HEADS, total, HEAD_DIM]))
            heads[p] = out
        nodes.append(helper.make_node("Transpose", [heads["k"]], [f"l{i}.kT"], perm=[0, 1, 3, 2]))
        nodes.append(helper.make_node("MatMul", [heads["q"], f"l{i}.kT"], [f"l{i}.scores"]))
        scores = f"l{i}.scores"
        if with_mask:
            nodes.append(helper.make_node("Add", [scores, "mask_bias"], [f"l{i}.masked"]))
            scores = f"l{i}.masked"
        nodes.append(helper.make_node("Softmax", [scores], [f"l{i}.probs"], axis=-1))
        nodes.append(helper.make_node("MatMul", [f"l{i}.probs", heads["v"]], [f"l{i}.ctx"]))
        nodes.append(helper.make_node("Transpose", [f"l{i}.ctx"], [f"l{i}.ctxt"], perm=[0, 2, 1, 3]))
        nodes.append(helper.make_node("Reshape", [f"l{i}.ctxt", "merge_heads"], [f"l{i}.merged"]))
        nodes.append(helper.make_node("MatMul", [f"l{i}.merged", weight(f"l{i}.Wo", [HIDDEN, HIDDEN])], [f"l{i}.o"]))
        nodes.append(helper.make_node("Add", [h, f"l{i}.o"], [f"h{i + 1}"]))
        h = f"h{i + 1}"
    nodes.append(helper.make_node("MatMul", [h, weight("lm_head", [HIDDEN, VOCAB])], ["logits"]))
    outputs.insert(0, helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, new, VOCAB]))
    graph = helper.make_graph(nodes, "kv_tiny", inputs, outputs, inits)
    model = helper.make_model(graph, producer_name="make_kv_tiny.py", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


OPTIMUM = {"batch": "batch", "past": "past_sequence_length", "new": "sequence_length",
           "in": lambda i, p: f"past_key_values.{i}.{'key' if p == 'k' else 'value'}",
           "out": lambda i, p: f"present.{i}.{'key' if p == 'k' else 'value'}"}
RENAMED = {"batch": "b", "past": "cached", "new": "new",
           "in": lambda i, p: f"cache_in_{i}_{p}", "out": lambda i, p: f"cache_out_{i}_{p}"}


def main(out_dir):
    models = {
        "kv_tiny.onnx": build(OPTIMUM),
        "kv_tiny_renamed.onnx": build(RENAMED),
        "kv_tiny_two_dims.onnx": build(OPTIMUM, past_dims=["past_a", "past_b"]),
        "no_kv_tiny.onnx": build(OPTIMUM, with_past=False),
        "kv_tiny_mask.onnx": build(OPTIMUM, with_mask=True),
        "kv_tiny_merged.onnx": build(OPTIMUM, merged_cache=True),
    }
    for name, model in models.items():
        onnx.save(model, os.path.join(out_dir, name))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
