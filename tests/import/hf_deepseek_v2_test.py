#!/usr/bin/python3
"""deepseek_v2 config.json graphs (onnx_import/hf_deepseek.h; --graph train, decode and prefill) against
torch.onnx.export of tests/models/hf_deepseek_v2.py's plain-PyTorch DeepSeek-V2 at tiny made-up configs, as
hf_deepseek_test.py checks deepseek_v3: node for node, initializers, graph inputs/outputs, memplan's answers on both
files byte-identical, the initializer count against the hand count (hf_deepseek_v2.DeepseekV2Config.parameter_count),
each expert's rows against the routing rule; the twin's real-valued rotary against transformers' complex one; and
malformed or contradictory configs refused with one message, exit 2.

Needs MEMPLAN_BIN, HF_CONFIG_DUMP (set by ctest) and /usr/bin/python3 with torch 1.13 and onnx.
"""
from __future__ import annotations

import dataclasses
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
import hf_config_test as base_test  # noqa: E402
import hf_deepseek_test  # noqa: E402
import hf_deepseek_v2  # noqa: E402
import hf_moe_test  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402

L = llama.LlamaConfig
D = hf_deepseek_v2.DeepseekV2Config
YARN = {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 32}
# Made up, each reaching another path: V2-Lite-like (q_proj, q_lora_rank null; greedy over 8 experts, k = 3; one
# dense layer; two shared experts; yarn rope_scaling with DeepSeek-V2-Lite's mscale 0.707, which DeepseekV2Attention's
# scaling ignores); V2-like (q_lora_rank; group_limited_greedy, 8 experts in 4 groups, 2 kept, k = 2;
# routed_scaling_factor 16 as DeepSeek-V2's; attention biases and a tied head; every layer sparse).
CONFIGS = {
    "deepseek_v2_lite_greedy": D(L("deepseek_v2_lite_greedy", "made up", hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                   vocab_size=100, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                   head_dim_override=8),
                                 q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=12, qk_rope_head_dim=8,
                                 v_head_dim=10, n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=20,
                                 n_shared_experts=2, first_k_dense_replace=1, n_group=1, topk_group=1,
                                 norm_topk_prob=False, routed_scaling_factor=1.0, rope_interleave=False, yarn=YARN,
                                 topk_method="greedy"),
    "deepseek_v2_grouped_lora": D(L("deepseek_v2_grouped_lora", "made up", hidden_size=48, intermediate_size=80,
                                    num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3,
                                    vocab_size=90, rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                    attention_bias=True, o_proj_bias=True, head_dim_override=6),
                                  q_lora_rank=24, kv_lora_rank=12, qk_nope_head_dim=10, qk_rope_head_dim=6,
                                  v_head_dim=14, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                                  n_shared_experts=1, first_k_dense_replace=0, n_group=4, topk_group=2,
                                  norm_topk_prob=False, routed_scaling_factor=16.0, rope_interleave=False,
                                  topk_method="group_limited_greedy"),
}
WORST = ("deepseek_v2_lite_greedy", "deepseek_v2_grouped_lora")


def config_json(cfg: hf_deepseek_v2.DeepseekV2Config) -> dict:
    """The config.json of a DeepseekV2Config (keys as in deepseek-ai/DeepSeek-V2-Lite's and DeepSeek-V2's)."""
    j = hf_deepseek_test.config_json(cfg)
    for key in ("rope_interleave", "num_nextn_predict_layers"):
        del j[key]
    j.update({"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "scoring_func": "softmax",
              "topk_method": cfg.topk_method, "aux_loss_alpha": 0.001, "seq_aux": True})
    return j


def rotary_matches_complex() -> list:
    """complex_rotary against apply_rotary_emb's complex arithmetic (transformers modeling_deepseek_v2.py)."""
    gen = torch.Generator().manual_seed(zoo.SEED)
    x, freqs = torch.randn(2, 3, 5, 8, generator=gen), torch.randn(2, 5, 4, generator=gen)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs).unsqueeze(1)
    expected = torch.view_as_real(torch.view_as_complex(x.float().reshape(2, 3, 5, 4, 2)) * freqs_cis).flatten(3)
    got = hf_deepseek_v2.complex_rotary(x, freqs.cos().unsqueeze(1), freqs.sin().unsqueeze(1), 2, 3, 5, 8)
    diff = (got - expected).abs().max().item()
    return [] if diff < 1e-5 else [f"complex_rotary differs from apply_rotary_emb by {diff}"]


def refusals(tmp: str) -> list:
    """Malformed or contradictory configs: one message naming the key, exit 2."""
    good = config_json(CONFIGS["deepseek_v2_grouped_lora"])
    cases = [({"norm_topk_prob": True}, "norm_topk_prob"), ({"topk_method": "noaux_tc"}, "topk_method"),
             ({"scoring_func": "sigmoid"}, "scoring_func"), ({"rope_interleave": True}, "rope_interleave"),
             ({"num_nextn_predict_layers": 1}, "num_nextn_predict_layers"), ({"topk_group": 5}, "topk_group 5"),
             ({"n_group": 3}, "not a multiple of n_group 3"), ({"moe_layer_freq": 2}, "moe_layer_freq"),
             ({"head_dim": 6}, "head_dim"), ({"q_lora_rank": 0}, "q_lora_rank")]
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
    errors = rotary_matches_complex()
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
                    module = hf_deepseek_v2.DeepseekV2(cfg)
                    zoo.fill_distinct(module)
                    exported = export_llama.trace(module.eval(), training=True, export_params=True)
                else:
                    module = hf_deepseek_v2.DeepseekV2WithCache(cfg, past=graph == "decode")
                    zoo.fill_distinct(module)
                    exported = hf_deepseek_test.trace_cache(module)
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
                print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
                errors += found
        found = refusals(tmp)
        print(f"malformed deepseek_v2 configs refused: {'OK' if not found else 'FAILED'}", flush=True)
        errors += found
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
