#!/usr/bin/python3
"""llama_tiny_gqa: llama_tiny's decoder (tests/models/llama.py) as ONNX Runtime GenAI's model builder writes a
Llama (onnxruntime-genai src/python/py/models/builder.py), with numpy weights; written by
export_llama_kv.py (--only llama_tiny_gqa).

The graph, per the builder:
  - input_ids [batch_size, sequence_length] -> Gather(embed_tokens) -> hidden;
  - each layer: SimplifiedLayerNormalization (ONNX Runtime registers it in the default domain) on the first
    layer, SkipSimplifiedLayerNormalization (com.microsoft) after, which adds the residual and hands the sum on
    (its output 3); q/k/v MatMul; com.microsoft GroupQueryAttention with do_rotary=1 and the cos/sin caches
    [max_length, head_dim / 2] as initializers; o_proj MatMul; SkipSimplifiedLayerNormalization; gate/up MatMul,
    SiLU as Sigmoid * x, Mul, down MatMul;
  - final SkipSimplifiedLayerNormalization, lm_head MatMul -> logits [batch_size, sequence_length, vocab];
  - GroupQueryAttention's seqlens_k (int32 [batch]) = ReduceSum(attention_mask, axis 1) - 1 and its
    total_sequence_length (int32 scalar) = Shape(attention_mask)[1] (the builder's attention-mask
    reformatting for GQA);
  - past_key_values.{i}.key/value [batch_size, kv_heads, past_sequence_length, head_dim] in,
    present.{i}.key/value [batch_size, kv_heads, total_sequence_length, head_dim] out. With
    past_present_share_buffer the runtime feeds a past buffer of the maximum length, and
    GroupQueryAttention's present is max(past length, total_sequence_length) long: the same buffer.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import llama  # noqa: E402

MAX_LENGTH = 64  # the cos/sin caches' rows: the longest total sequence the graph serves
OPSET = 17


def build(name: str = "llama_tiny", seed: int = 0) -> onnx.ModelProto:
    cfg = llama.CONFIGS[name]
    h, heads, kv, hd, ffn, vocab = (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                                    cfg.intermediate_size, cfg.vocab_size)
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def weight(wname, *shape, scale=0.05):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), wname))
        return wname

    def const(cname, value):
        inits.append(numpy_helper.from_array(np.asarray(value), cname))
        return cname

    def node(op, inputs, outputs, domain="", **attrs):
        nodes.append(helper.make_node(op, inputs, outputs, name=f"/{outputs[0] or op}", domain=domain, **attrs))
        return outputs[0]

    # The rotary caches: cos/sin of positions ⊗ inv_freq, positions 0..MAX_LENGTH-1 (the builder's make_rotary_embedding_caches).
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    freqs = np.outer(np.arange(MAX_LENGTH, dtype=np.float32), inv_freq)
    const("cos_cache", np.cos(freqs).astype(np.float32))
    const("sin_cache", np.sin(freqs).astype(np.float32))

    # attention_mask -> seqlens_k, total_sequence_length
    const("one_i64", np.array([1], dtype=np.int64))
    node("ReduceSum", ["attention_mask", "one_i64"], ["mask_sum"], keepdims=0)
    node("Sub", ["mask_sum", "one_i64"], ["mask_sum_minus_1"])
    node("Cast", ["mask_sum_minus_1"], ["seqlens_k"], to=TensorProto.INT32)
    node("Shape", ["attention_mask"], ["mask_shape"])
    const("index_1", np.array(1, dtype=np.int64))
    node("Gather", ["mask_shape", "index_1"], ["total_seq_len_i64"], axis=0)
    node("Cast", ["total_seq_len_i64"], ["total_sequence_length"], to=TensorProto.INT32)

    node("Gather", [weight("embed_tokens.weight", vocab, h), "input_ids"], ["embeddings"], axis=0)
    residual, pending = "embeddings", None  # pending: the output of the block before, not yet added
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}"

        def norm(tag, wname):
            nonlocal residual, pending
            if pending is None:
                return node("SimplifiedLayerNormalization", [residual, weight(wname, h, scale=1.0)], [f"{p}/{tag}"],
                            axis=-1, epsilon=cfg.rms_norm_eps)
            out = node("SkipSimplifiedLayerNormalization", [pending, residual, weight(wname, h, scale=1.0)],
                       [f"{p}/{tag}", "", "", f"{p}/{tag}/residual"], domain="com.microsoft", epsilon=cfg.rms_norm_eps)
            residual, pending = f"{p}/{tag}/residual", None
            return out

        x = norm("input_layernorm", f"{p}.input_layernorm.weight")
        q = node("MatMul", [x, weight(f"{p}.self_attn.q_proj.weight", h, heads * hd)], [f"{p}/q_proj"])
        k = node("MatMul", [x, weight(f"{p}.self_attn.k_proj.weight", h, kv * hd)], [f"{p}/k_proj"])
        v = node("MatMul", [x, weight(f"{p}.self_attn.v_proj.weight", h, kv * hd)], [f"{p}/v_proj"])
        attn = node("GroupQueryAttention",
                    [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value", "seqlens_k",
                     "total_sequence_length", "cos_cache", "sin_cache"],
                    [f"{p}/attn", f"present.{i}.key", f"present.{i}.value"], domain="com.microsoft",
                    num_heads=heads, kv_num_heads=kv, do_rotary=1, rotary_interleaved=0, local_window_size=-1)
        pending = node("MatMul", [attn, weight(f"{p}.self_attn.o_proj.weight", heads * hd, h)], [f"{p}/o_proj"])
        x = norm("post_attention_layernorm", f"{p}.post_attention_layernorm.weight")
        gate = node("MatMul", [x, weight(f"{p}.mlp.gate_proj.weight", h, ffn)], [f"{p}/gate_proj"])
        sig = node("Sigmoid", [gate], [f"{p}/gate_sigmoid"])
        silu = node("Mul", [gate, sig], [f"{p}/gate_silu"])
        up = node("MatMul", [x, weight(f"{p}.mlp.up_proj.weight", h, ffn)], [f"{p}/up_proj"])
        prod = node("Mul", [silu, up], [f"{p}/mlp_product"])
        pending = node("MatMul", [prod, weight(f"{p}.mlp.down_proj.weight", ffn, h)], [f"{p}/down_proj"])
    p = "final"
    out = node("SkipSimplifiedLayerNormalization", [pending, residual, weight("norm.weight", h, scale=1.0)],
               ["final/norm", "", "", "final/norm/residual"], domain="com.microsoft", epsilon=cfg.rms_norm_eps)
    node("MatMul", [out, weight("lm_head.weight", h, vocab)], ["logits"])

    kv_shape = lambda length: ["batch_size", kv, length, hd]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", vocab])]
    for i in range(cfg.num_hidden_layers):
        for part in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{part}", TensorProto.FLOAT,
                                                        kv_shape("past_sequence_length")))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{part}", TensorProto.FLOAT,
                                                         kv_shape("total_sequence_length")))
    graph = helper.make_graph(nodes, "llama_tiny_gqa", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, producer_name="memplan tests/models/export_gqa.py (ORT GenAI builder style)",
                              opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    # No onnx.checker: SimplifiedLayerNormalization in the default domain is ONNX Runtime's, not ONNX's
    # (the checker rejects it); ONNX Runtime itself loads and runs the graph (validate/ort/run_shapes.py).
    return model


if __name__ == "__main__":
    path = os.path.join(HERE, "llama_tiny_gqa.onnx")
    import export_zoo  # noqa: E402
    export_zoo.save(build(), HERE, "llama_tiny_gqa", inline=False)
    print(path)
