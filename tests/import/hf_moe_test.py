#!/usr/bin/python3
"""Mixture-of-experts config.json graphs (onnx_import/hf_moe.h: mixtral, qwen2_moe, qwen3_moe; --graph train, decode
and prefill) against torch.onnx.export of tests/models/hf_moe.py's plain-PyTorch decoders at the same tiny configs
(train: hf_moe.decoder as export_llama.py exports it; decode / prefill: hf_moe.decoder_with_cache as
export_llama_kv.py exports optimum's decoders, eval mode and constant folding): node for node (op type, name, inputs,
outputs, attributes, Constant values), initializers and graph inputs/outputs, as hf_config_test.py compares the dense
ones; memplan's JSON answers on both files byte-identical but for the file's own fields (for decode, serve --engine
eager too, with the config's --moe-routing); the parameter count against the hand count (hf_moe.MoeConfig.parameter_count); and each expert's token
count in the graph (train, and prefill on its new tokens) against the routing rule computed here (balanced:
ceil((N·k − e) / E) for N = batch·seq tokens; worst, --moe-routing worst, for three of them: N for experts 0..k-1, 0
for the rest).

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
import export_llama_kv  # noqa: E402
import hf_config_test as base_test  # noqa: E402
import hf_moe  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402

L = llama.LlamaConfig
M = hf_moe.MoeConfig
# Made up, each reaching another path: Mixtral with grouped-query attention and k = 2 (the pooled int 2 of
# RMSNorm's pow); Mixtral with k = 3 of 5 experts (k's own pooled Constant, N·k not a multiple of E: unequal
# counts) and a tied head; Qwen2-MoE with its shared expert, unnormalized top-k and a dense layer (mlp_only_layers);
# Qwen2-MoE with decoder_sparse_step 2 (dense, sparse, dense, sparse) and norm_topk_prob; Qwen3-MoE with q_norm /
# k_norm, a head_dim of its own and norm_topk_prob; Qwen3-MoE with k = 1 and multi-head attention.
CONFIGS = {
    "mixtral_gqa": M("mixtral", L("mixtral_gqa", "made up", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=200, rope_theta=1e6,
                                  rms_norm_eps=1e-5, tie_word_embeddings=False), 4, 2, 96),
    "mixtral_k3_tied": M("mixtral", L("mixtral_k3_tied", "made up", hidden_size=48, intermediate_size=80,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                      vocab_size=120, rope_theta=1e6, rms_norm_eps=1e-5, tie_word_embeddings=True),
                         5, 3, 80),
    "qwen2_moe_shared_dense0": M("qwen2_moe", L("qwen2_moe_shared_dense0", "made up", hidden_size=64,
                                                intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                                                num_key_value_heads=4, vocab_size=200, rope_theta=1e6,
                                                rms_norm_eps=1e-6, tie_word_embeddings=False, attention_bias=True),
                                 4, 2, 40, norm_topk_prob=False, shared_expert_intermediate_size=96,
                                 mlp_only_layers=(0,)),
    "qwen2_moe_step2_norm": M("qwen2_moe", L("qwen2_moe_step2_norm", "made up", hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                             vocab_size=150, rope_theta=1e6, rms_norm_eps=1e-6,
                                             tie_word_embeddings=False, attention_bias=True),
                              6, 3, 32, norm_topk_prob=True, shared_expert_intermediate_size=64, decoder_sparse_step=2),
    "qwen3_moe_gqa_head_dim": M("qwen3_moe", L("qwen3_moe_gqa_head_dim", "made up", hidden_size=64,
                                               intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                               num_key_value_heads=2, vocab_size=200, rope_theta=1e6,
                                               rms_norm_eps=1e-6, tie_word_embeddings=False, head_dim_override=32,
                                               qk_norm=True), 4, 2, 48, norm_topk_prob=True),
    "qwen3_moe_k1_mha": M("qwen3_moe", L("qwen3_moe_k1_mha", "made up", hidden_size=48, intermediate_size=96,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                         vocab_size=100, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=False,
                                         head_dim_override=16, qk_norm=True), 3, 1, 40, norm_topk_prob=False),
}

# --moe-routing worst on three of them: Mixtral (k = 2 of 4: two experts get every token, two none), Qwen2-MoE with
# its shared expert and a dense layer, Qwen3-MoE with k = 1.
WORST = ("mixtral_gqa", "qwen2_moe_shared_dense0", "qwen3_moe_k1_mha")

DENSE = {"mixtral": "mistral", "qwen2_moe": "qwen2", "qwen3_moe": "qwen3"}


def moe_config_json(cfg: hf_moe.MoeConfig) -> dict:
    """The config.json transformers writes for a MixtralConfig / Qwen2MoeConfig / Qwen3MoeConfig (keys as on the
    Hub)."""
    j = base_test.config_json(DENSE[cfg.model_type], cfg.base)
    j["model_type"] = cfg.model_type
    j["architectures"] = [{"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                           "qwen3_moe": "Qwen3MoeForCausalLM"}[cfg.model_type]]
    j.update(num_experts_per_tok=cfg.num_experts_per_tok, output_router_logits=False, router_aux_loss_coef=0.001)
    if cfg.model_type == "mixtral":
        assert cfg.moe_intermediate_size == cfg.base.intermediate_size, "Mixtral's experts are intermediate_size wide"
        j.update(num_local_experts=cfg.num_experts, router_jitter_noise=0.0)
    else:
        j.update(num_experts=cfg.num_experts, moe_intermediate_size=cfg.moe_intermediate_size,
                 norm_topk_prob=cfg.norm_topk_prob, decoder_sparse_step=cfg.decoder_sparse_step,
                 mlp_only_layers=list(cfg.mlp_only_layers))
    if cfg.model_type == "qwen2_moe":
        j["shared_expert_intermediate_size"] = cfg.shared_expert_intermediate_size
    return j


def expert_rows(config_path: str, cfg: hf_moe.MoeConfig, batch: int, seq: int, graph: str = "train") -> list:
    """Each expert's gathered tokens in memplan's shapes (inspect: the rows of its first projection's output, in the
    first sparse layer) against the balanced rule computed here: ceil((N·k − e) / E) for N = batch·seq (prefill:
    seq new tokens a sequence, nothing cached)."""
    tokens, k, experts = batch * seq, cfg.num_experts_per_tok, cfg.num_experts
    if cfg.routing == "worst":  # experts 0..k-1 every token, the rest none
        expected = [tokens if e < k else 0 for e in range(experts)]
    else:
        expected = [-(-(tokens * k - e) // experts) for e in range(experts)]
    assert sum(expected) == tokens * k
    dims = (["--batch", str(batch), "--dim", f"seq={seq}"] if graph == "train" else
            ["--dim", f"batch_size={batch}", "--dim", f"sequence_length={seq}", "--dim", f"total_sequence_length={seq}"])
    out = subprocess.run([base_test.MEMPLAN, "inspect", config_path, "--graph", graph, *dims, "--json",
                          "--moe-routing", cfg.routing], capture_output=True, text=True)
    if out.returncode != 0:
        return [f"inspect {config_path}: exit {out.returncode}: {out.stderr}"]
    shapes = {t["name"]: t["shape"] for t in json.loads(out.stdout)["tensors"]}
    layer = next(l for l in range(cfg.base.num_hidden_layers) if cfg.sparse(l))
    block, first = ("block_sparse_moe", "w1") if cfg.model_type == "mixtral" else ("mlp", "gate_proj")
    got = [shapes.get(f"/layers.{layer}/{block}/experts.{e}/{first}/MatMul_output_0", [None])[0]
           for e in range(experts)]
    return [] if got == expected else [f"{config_path}: experts' rows {got} at {tokens} tokens, the rule {expected}"]


def compare_answers(label: str, onnx_path: str, config_path: str, routing: str, graph: str = "train",
                    tied: bool = False) -> list:
    """hf_config_test.compare_answers' runs for `graph` (train: estimate, a training step, inspect; decode: estimate,
    inspect, serve --engine eager; prefill: estimate, inspect) on the export and on the config with its
    --moe-routing. A tied config's folded graph records its tie, which the export states by shape (as there)."""
    errors = []
    for run in base_test.GRAPHS[graph][1]:
        claim = ["--tied-embeddings", "shape"] if tied and graph != "train" and run[0] in ("estimate", "serve") else []
        a = base_test.answer(onnx_path, run, claim)
        b = base_test.answer(config_path, run, ["--graph", graph, "--moe-routing", routing])
        if a != b:
            diff = [f"{x} | {y}" for x, y in zip(a.splitlines(), b.splitlines()) if x != y][:3]
            errors.append(f"{label}: memplan {' '.join(run)} differs: {diff}")
    return errors


def main() -> int:
    torch.set_num_threads(1)
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = [(name, cfg) for name, cfg in CONFIGS.items()]
        runs += [(f"{name}_worst", dataclasses.replace(CONFIGS[name], routing="worst")) for name in WORST]
        for name, cfg in runs:
            config_path = os.path.join(tmp, f"{name}.json")
            with open(config_path, "w") as f:
                json.dump(moe_config_json(cfg), f, indent=2)
            ours_path = os.path.join(tmp, f"{name}_train_memplan.onnx")
            subprocess.run([base_test.DUMP, config_path, "train", ours_path, cfg.routing], check=True)
            ours = onnx.load(ours_path, load_external_data=False)
            torch.manual_seed(zoo.SEED)
            module = hf_moe.decoder(cfg)
            zoo.fill_distinct(module)
            exported = export_llama.trace(module.eval(), training=True, export_params=True)
            torch_path = os.path.join(tmp, f"{name}_train_torch.onnx")
            onnx.save_model(exported, torch_path)
            label = f"{name} --graph train"
            found = base_test.compare_graphs(label, exported, ours)
            found += compare_answers(label, torch_path, config_path, cfg.routing)
            found += expert_rows(config_path, cfg, 2, 8) + expert_rows(config_path, cfg, 3, 5)
            count = sum(int(np.prod(t.dims)) for t in ours.graph.initializer)
            torch_count = sum(p.numel() for p in module.parameters())
            if not count == torch_count == cfg.parameter_count():
                found.append(f"{label}: {count:,} parameters in memplan's graph, {torch_count:,} in the module, "
                             f"{cfg.parameter_count():,} by hand")
            print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
            errors += found
            for graph in ("decode", "prefill"):
                ours_path = os.path.join(tmp, f"{name}_{graph}_memplan.onnx")
                subprocess.run([base_test.DUMP, config_path, graph, ours_path, cfg.routing], check=True)
                ours = onnx.load(ours_path, load_external_data=False)
                torch.manual_seed(zoo.SEED)
                module = hf_moe.decoder_with_cache(cfg, past=graph == "decode")
                zoo.fill_distinct(module)
                exported = export_llama_kv.trace(module.eval(), export_params=True)
                torch_path = os.path.join(tmp, f"{name}_{graph}_torch.onnx")
                onnx.save_model(exported, torch_path)
                label = f"{name} --graph {graph}"
                found = base_test.compare_graphs(label, exported, ours)
                found += compare_answers(label, torch_path, config_path, cfg.routing, graph,
                                         cfg.base.tie_word_embeddings)
                if graph == "prefill":  # the routing rule on the new tokens, as in training
                    found += expert_rows(config_path, cfg, 3, 5, graph)
                print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
                errors += found
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
