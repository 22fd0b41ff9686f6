#!/usr/bin/python3
"""gpt_oss config.json graphs (onnx_import/hf_gpt_oss.h) against torch.onnx.export of tests/models/hf_gpt_oss.py's
plain-PyTorch decoders at the same tiny configs, as hf_moe_test.py checks the other mixtures of experts: --graph train
(hf_gpt_oss.Decoder as export_llama.py exports it) node for node, memplan's answers (estimate, a training step,
inspect; with the config's --moe-routing) byte-identical on the export and on the config, the parameter count against
the hand count (GptOssConfig.parameter_count) and each expert's rows against the routing rule; --graph decode and
prefill (hf_gpt_oss.DecoderWithCache as export_llama_kv.py exports it, eval mode, constant folding) node for node:
their windowed layers are built for serve --engine vllm only (hf_config.h, read_config_model), so memplan's answers
on them are not compared.

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
import hf_gpt_oss  # noqa: E402
import hf_moe_test  # noqa: E402
import zoo  # noqa: E402

G = hf_gpt_oss.GptOssConfig
S, F = "sliding_attention", "full_attention"
# Made up, each reaching another path: GQA (2 query heads a kv head), yarn rope_scaling (truncate false, as the
# published configs), sliding then full layers, k = 2 of 4 experts; multi-head attention, the default rotary, a full
# layer first and two sliding ones, k = 3 of 4 (N·k not a multiple of E: unequal counts), another swiglu_limit.
CONFIGS = {
    "gpt_oss_gqa_yarn": G(hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, vocab_size=100, rope_theta=150000.0, rms_norm_eps=1e-5,
                          num_local_experts=4, num_experts_per_tok=2, sliding_window=4, layer_types=(S, F),
                          yarn=(32.0, 4096, 32.0, 1.0, False)),
    "gpt_oss_mha_k3": G(hidden_size=24, intermediate_size=20, num_hidden_layers=3, num_attention_heads=2,
                        num_key_value_heads=2, head_dim=12, vocab_size=80, rope_theta=10000.0, rms_norm_eps=1e-6,
                        num_local_experts=4, num_experts_per_tok=3, sliding_window=3, layer_types=(F, S, S),
                        swiglu_limit=5.5),
}
# --moe-routing worst on the first: experts 0 and 1 receive every token, 2 and 3 none.
WORST = ("gpt_oss_gqa_yarn",)


def config_json(cfg: hf_gpt_oss.GptOssConfig) -> dict:
    """The config.json transformers writes for a GptOssConfig (keys as on the Hub's openai/gpt-oss-20b)."""
    j = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True,
         "attention_dropout": 0.0, "head_dim": cfg.head_dim, "hidden_act": "silu", "hidden_size": cfg.hidden_size,
         "initializer_range": 0.02, "intermediate_size": cfg.intermediate_size, "layer_types": list(cfg.layer_types),
         "max_position_embeddings": base_test.MAX_POSITIONS, "num_attention_heads": cfg.num_attention_heads,
         "num_experts_per_tok": cfg.num_experts_per_tok, "experts_per_token": cfg.num_experts_per_tok,
         "num_hidden_layers": cfg.num_hidden_layers, "num_key_value_heads": cfg.num_key_value_heads,
         "num_local_experts": cfg.num_local_experts, "output_router_logits": False, "rms_norm_eps": cfg.rms_norm_eps,
         "rope_theta": cfg.rope_theta, "router_aux_loss_coef": 0.9, "sliding_window": cfg.sliding_window,
         "swiglu_limit": cfg.swiglu_limit, "tie_word_embeddings": cfg.tie_word_embeddings, "torch_dtype": "float32",
         "use_cache": True, "vocab_size": cfg.vocab_size, "rope_scaling": None}
    if cfg.yarn is not None:
        factor, original, fast, slow, truncate = cfg.yarn
        j["rope_scaling"] = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original,
                             "beta_fast": fast, "beta_slow": slow, "truncate": truncate}
        j["initial_context_length"] = original
    return j


def expert_rows(config_path: str, cfg: hf_gpt_oss.GptOssConfig, batch: int, seq: int) -> list:
    """hf_moe_test.expert_rows' check on layer 0's experts (gate_up's MatMul rows, in the experts' scope)."""
    tokens, k, experts = batch * seq, cfg.num_experts_per_tok, cfg.num_local_experts
    if cfg.routing == "worst":
        expected = [tokens if e < k else 0 for e in range(experts)]
    else:
        expected = [-(-(tokens * k - e) // experts) for e in range(experts)]
    out = subprocess.run([base_test.MEMPLAN, "inspect", config_path, "--graph", "train", "--batch", str(batch),
                          "--dim", f"seq={seq}", "--json", "--moe-routing", cfg.routing], capture_output=True, text=True)
    if out.returncode != 0:
        return [f"inspect {config_path}: exit {out.returncode}: {out.stderr}"]
    shapes = {t["name"]: t["shape"] for t in json.loads(out.stdout)["tensors"]}
    names = ["/layers.0/mlp/experts/MatMul"] + [f"/layers.0/mlp/experts/MatMul_{2 * e}" for e in range(1, experts)]
    got = [shapes.get(f"{n}_output_0", [None])[0] for n in names]
    return [] if got == expected else [f"{config_path}: experts' rows {got} at {tokens} tokens, the rule {expected}"]


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
                    module = hf_gpt_oss.Decoder(cfg)
                    zoo.fill_distinct(module)
                    exported = export_llama.trace(module.eval(), training=True, export_params=True)
                else:
                    module = hf_gpt_oss.DecoderWithCache(cfg, past=graph == "decode")
                    zoo.fill_distinct(module)
                    exported = export_llama_kv.trace(module.eval(), export_params=True)
                torch_path = os.path.join(tmp, f"{name}_{graph}_torch.onnx")
                onnx.save_model(exported, torch_path)
                label = f"{name} --graph {graph}"
                found = base_test.compare_graphs(label, exported, ours)
                if graph == "train":
                    found += hf_moe_test.compare_answers(label, torch_path, config_path, cfg.routing)
                    found += expert_rows(config_path, cfg, 2, 8) + expert_rows(config_path, cfg, 3, 5)
                    count = sum(int(np.prod(t.dims)) for t in ours.graph.initializer)
                    torch_count = sum(p.numel() for p in module.parameters())
                    if not count == torch_count == cfg.parameter_count():
                        found.append(f"{label}: {count:,} parameters in memplan's graph, {torch_count:,} in the "
                                     f"module, {cfg.parameter_count():,} by hand")
                print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
                errors += found
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
