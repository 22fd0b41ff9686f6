#!/usr/bin/python3
"""deepseek_v3 config.json graphs (onnx_import/hf_deepseek.h; --graph train, decode and prefill) against
torch.onnx.export of tests/models/hf_deepseek.py's plain-PyTorch DeepSeek-V3 at tiny made-up configs, as
hf_moe_test.py checks the other mixtures of experts: node for node (op type, name, inputs, outputs, attributes,
Constant values), initializers, graph inputs/outputs (decode's past keys (b, heads, past, qk_nope + qk_rope) and
values (b, heads, past, v_head_dim)); memplan's JSON answers on both files byte-identical (estimate, inspect, a
training step; serve --engine eager on decode); the initializer count against the hand count
(hf_deepseek.DeepseekConfig.parameter_count); each expert's rows against the routing rule (hf_moe_test.expert_rows);
and malformed configs refused with one message, exit 2.

Needs MEMPLAN_BIN, HF_CONFIG_DUMP (set by ctest) and /usr/bin/python3 with torch 1.13 and onnx.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import export_llama  # noqa: E402
import export_llama_kv  # noqa: E402
import hf_config_test as base_test  # noqa: E402
import hf_deepseek  # noqa: E402
import hf_moe_test  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402

L = llama.LlamaConfig
D = hf_deepseek.DeepseekConfig
YARN = {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 64}
YARN_MSCALE = {"type": "yarn", "factor": 8.0, "mscale": 0.707, "mscale_all_dim": 0.707,
               "original_max_position_embeddings": 32}
# Made up, each reaching another path: q_lora_rank with the interleaved rope (the default), one dense layer, 8 experts
# in 4 groups (2 kept), k = 2, norm_topk_prob; q_proj (q_lora_rank null), the plain rope, yarn rope_scaling (mscale
# 1.0: attention_scaling 1), attention biases, a tied head, every layer sparse, 6 experts in 3 groups, k = 3, two
# shared experts, no normalisation; q_lora_rank with yarn whose mscale makes the scaling differ from 1.
CONFIGS = {
    "deepseek_lora_interleave": D(L("deepseek_lora_interleave", "made up", hidden_size=64, intermediate_size=96,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                    vocab_size=100, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                    head_dim_override=8),
                                  q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=12, qk_rope_head_dim=8,
                                  v_head_dim=10, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=20,
                                  n_shared_experts=1, first_k_dense_replace=1, n_group=4, topk_group=2,
                                  norm_topk_prob=True, routed_scaling_factor=2.5),
    "deepseek_qproj_yarn_bias_tied": D(L("deepseek_qproj_yarn_bias_tied", "made up", hidden_size=48,
                                         intermediate_size=80, num_hidden_layers=2, num_attention_heads=3,
                                         num_key_value_heads=3, vocab_size=90, rope_theta=10000.0, rms_norm_eps=1e-6,
                                         tie_word_embeddings=True, attention_bias=True, o_proj_bias=True,
                                         head_dim_override=6),
                                       q_lora_rank=None, kv_lora_rank=12, qk_nope_head_dim=10, qk_rope_head_dim=6,
                                       v_head_dim=14, n_routed_experts=6, num_experts_per_tok=3,
                                       moe_intermediate_size=16, n_shared_experts=2, first_k_dense_replace=0,
                                       n_group=3, topk_group=2, norm_topk_prob=False, routed_scaling_factor=1.0,
                                       rope_interleave=False, yarn=YARN),
    "deepseek_yarn_mscale": D(L("deepseek_yarn_mscale", "made up", hidden_size=64, intermediate_size=96,
                                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, vocab_size=100,
                                rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                head_dim_override=16),
                              q_lora_rank=32, kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=16,
                              v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                              n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1,
                              norm_topk_prob=True, routed_scaling_factor=2.5, yarn=YARN_MSCALE),
}
WORST = ("deepseek_lora_interleave", "deepseek_qproj_yarn_bias_tied")


def config_json(cfg: hf_deepseek.DeepseekConfig) -> dict:
    """The config.json transformers writes for a DeepseekV3Config (keys as in deepseek-ai/DeepSeek-V3's)."""
    b = cfg.base
    assert b.attention_bias == b.o_proj_bias and b.num_key_value_heads == b.num_attention_heads
    assert b.head_dim == cfg.qk_rope_head_dim, "the rotary tables' width is qk_rope_head_dim"
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": b.hidden_size,
            "intermediate_size": b.intermediate_size, "num_hidden_layers": b.num_hidden_layers,
            "num_attention_heads": b.num_attention_heads, "num_key_value_heads": b.num_key_value_heads,
            "vocab_size": b.vocab_size, "rope_theta": b.rope_theta, "rms_norm_eps": b.rms_norm_eps,
            "tie_word_embeddings": b.tie_word_embeddings, "hidden_act": "silu", "attention_bias": b.attention_bias,
            "attention_dropout": 0.0, "max_position_embeddings": cfg.max_position_embeddings,
            "torch_dtype": "float32", "q_lora_rank": cfg.q_lora_rank, "kv_lora_rank": cfg.kv_lora_rank,
            "qk_nope_head_dim": cfg.qk_nope_head_dim, "qk_rope_head_dim": cfg.qk_rope_head_dim,
            "v_head_dim": cfg.v_head_dim, "n_routed_experts": cfg.n_routed_experts,
            "num_experts_per_tok": cfg.num_experts_per_tok, "moe_intermediate_size": cfg.moe_intermediate_size,
            "n_shared_experts": cfg.n_shared_experts, "first_k_dense_replace": cfg.first_k_dense_replace,
            "moe_layer_freq": 1, "n_group": cfg.n_group, "topk_group": cfg.topk_group,
            "norm_topk_prob": cfg.norm_topk_prob, "routed_scaling_factor": cfg.routed_scaling_factor,
            "scoring_func": "sigmoid", "topk_method": "noaux_tc", "ep_size": 1, "num_nextn_predict_layers": 1,
            "rope_interleave": cfg.rope_interleave, "rope_scaling": cfg.yarn}


def trace_cache(module: hf_deepseek.DeepseekV3WithCache) -> onnx.ModelProto:
    """export_llama_kv.trace with DeepSeek's past shapes (eval mode, constant folding)."""
    layers = len(module.layers)
    args = hf_deepseek.cache_inputs(module.dcfg, export_llama_kv.TRACE_BATCH, export_llama_kv.TRACE_NEW,
                                    export_llama_kv.TRACE_PAST if module.past else 0, zoo.SEED, module.past)
    input_names, output_names, axes = export_llama_kv.names(layers, module.past)
    buffer = io.BytesIO()
    module.eval()
    torch.onnx.export(module, args, buffer, opset_version=export_llama_kv.OPSET, input_names=input_names,
                      output_names=output_names, dynamic_axes=axes, export_params=True,
                      training=torch.onnx.TrainingMode.EVAL, do_constant_folding=True)
    return onnx.load_model_from_string(buffer.getvalue())


def refusals(tmp: str) -> list:
    """Malformed configs: one message naming the key, exit 2."""
    good = config_json(CONFIGS["deepseek_lora_interleave"])
    cases = [({"kv_lora_rank": 0}, "kv_lora_rank"), ({"topk_group": 5}, "topk_group 5 is more than n_group 4"),
             ({"num_experts_per_tok": 9}, "num_experts_per_tok 9 is more than the 8 experts"),
             ({"n_group": 3}, "not a multiple of n_group 3"), ({"scoring_func": "softmax"}, "scoring_func"),
             ({"moe_layer_freq": 2}, "moe_layer_freq"), ({"num_key_value_heads": 2}, "num_key_value_heads 2"),
             ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling type"),
             ({"qk_rope_head_dim": 7}, "qk_rope_head_dim"), ({"first_k_dense_replace": 3}, "first_k_dense_replace"),
             ({"n_shared_experts": 0}, "n_shared_experts"), ({"made_up_key": 1}, "made_up_key"),
             # k = 2 of 12 experts in 4 groups of 3, one group kept: balanced gives token 1 experts 2 and 3, in
             # groups 0 and 1
             ({"n_routed_experts": 12, "num_experts_per_tok": 2, "topk_group": 1, "n_group": 4},
              "--moe-routing balanced gives a token the experts 2..3, in 2 groups")]
    errors = []
    for k, (change, expected) in enumerate(cases):
        path = os.path.join(tmp, f"bad_{k}.json")
        with open(path, "w") as f:
            json.dump({**good, **change}, f)
        out = subprocess.run([base_test.MEMPLAN, "inspect", path, "--graph", "train"], capture_output=True, text=True)
        lines = out.stderr.strip().splitlines()
        if out.returncode != 2 or len(lines) != 1 or expected not in out.stderr:
            errors.append(f"{change}: exit {out.returncode}, {out.stderr!r} (expected one line with {expected!r})")
    return errors


def main() -> int:
    torch.set_num_threads(1)
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = list(CONFIGS.items())
        runs += [(f"{name}_worst", dataclasses.replace(CONFIGS[name], routing="worst")) for name in WORST]
        for name, cfg in runs:
            config_path = os.path.join(tmp, f"{name}.json")
            with open(config_path, "w") as f:
                json.dump(config_json(cfg), f, indent=2)
            for graph in ("train", "decode", "prefill"):
                ours_path = os.path.join(tmp, f"{name}_{graph}_memplan.onnx")
                subprocess.run([base_test.DUMP, config_path, graph, ours_path, cfg.routing], check=True)
                ours = onnx.load(ours_path, load_external_data=False)
                torch.manual_seed(zoo.SEED)
                if graph == "train":
                    module = hf_deepseek.DeepseekV3(cfg)
                    zoo.fill_distinct(module)
                    exported = export_llama.trace(module.eval(), training=True, export_params=True)
                else:
                    module = hf_deepseek.DeepseekV3WithCache(cfg, past=graph == "decode")
                    zoo.fill_distinct(module)
                    exported = trace_cache(module)
                torch_path = os.path.join(tmp, f"{name}_{graph}_torch.onnx")
                onnx.save_model(exported, torch_path)
                label = f"{name} --graph {graph}"
                found = base_test.compare_graphs(label, exported, ours)
                found += hf_moe_test.compare_answers(label, torch_path, config_path, cfg.routing, graph,
                                                     cfg.base.tie_word_embeddings)
                if graph == "train":
                    found += hf_moe_test.expert_rows(config_path, cfg, 2, 8) + \
                        hf_moe_test.expert_rows(config_path, cfg, 3, 5)
                    count = sum(int(np.prod(t.dims)) for t in ours.graph.initializer)
                    torch_count = sum(t.numel() for t in list(module.parameters()) + list(module.buffers()))
                    if not count == torch_count == cfg.parameter_count():
                        found.append(f"{label}: {count:,} initializer values in memplan's graph, {torch_count:,} "
                                     f"in the module, {cfg.parameter_count():,} by hand")
                if graph == "prefill":
                    found += hf_moe_test.expert_rows(config_path, cfg, 3, 5, graph)
                print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
                errors += found
        found = refusals(tmp)
        print(f"malformed deepseek_v3 configs refused: {'OK' if not found else 'FAILED'}", flush=True)
        errors += found
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
