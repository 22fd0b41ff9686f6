#!/usr/bin/python3
"""A tiny deepseek_v3 with transformers 5's grouped_mm experts, one fp32 training step on the CPU, against memplan's
--experts-implementation grouped_mm (and the eager loop against --experts-implementation eager); the measurements go
to deepseek_truth.json, which tests/accuracy/accuracy.py gates.

    /usr/bin/python3 bench/cpu_ground_truth/grouped_mm_deepseek.py [--memplan build/memplan]

The model is tests/models/hf_deepseek.py's DeepseekV3 (multi-head latent attention, one dense layer, then sparse
layers: DeepseekV3TopkRouter's sigmoid and group-limited top-k, 8 routed experts in 4 groups, 2 kept, top-2, one
shared expert), whose graph memplan builds node for node from the config.json written beside this script
(deepseek_tiny.json; tests/import/hf_deepseek_test.py checks that equality for its configs). The grouped rows replace
each sparse layer's DeepseekMoE by transformers 5's DeepseekV3MoE: the router's top-k indices and float32 weights
(modeling_deepseek_v3.py DeepseekV3MoE.route_tokens_to_experts), DeepseekV3NaiveMoe's two 3-D parameters run by
grouped_mm_experts_forward (src/transformers/integrations/moe.py at 0261a46) with grouped_mm.py's stand-in for
torch._grouped_mm (torch 1.13 has none), then shared_experts on the block's input. Protocol and memplan's flags:
grouped_mm.py's (measure.py's warm-up step, set-to-none zero_grad, one profiled step with cross-entropy and SGD
momentum foreach; memplan --runtime ideal --torch 1.13, resident + live bytes at the peak, the batch included).
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "import"))
import grouped_mm  # noqa: E402  (its GroupedExperts, GroupedMm; measure's paths)
import measure  # noqa: E402
import zoo  # noqa: E402
import hf_deepseek  # noqa: E402
import hf_deepseek_test  # noqa: E402
import hf_moe  # noqa: E402
import llama  # noqa: E402

CFG = hf_deepseek.DeepseekConfig(
    llama.LlamaConfig("deepseek_tiny", "made up", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, vocab_size=256, rope_theta=10000.0,
                      rms_norm_eps=1e-6, tie_word_embeddings=False, head_dim_override=16),
    q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16, n_routed_experts=8,
    num_experts_per_tok=2, moe_intermediate_size=64, n_shared_experts=1, first_k_dense_replace=1, n_group=4,
    topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5)
CONFIG = os.path.join(HERE, "deepseek_tiny.json")
OUT = os.path.join(HERE, "deepseek_truth.json")


class GroupedDeepseekMoE(nn.Module):
    """DeepseekV3MoE of transformers 5: experts (DeepseekV3NaiveMoe under grouped_mm), gate, shared_experts."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg.base.hidden_size
        self.cfg, self.hidden_dim = cfg, h
        self.experts = grouped_mm.GroupedExperts(cfg.n_routed_experts, h, cfg.moe_intermediate_size)
        self.gate = hf_deepseek.TopkRouter(cfg)
        self.shared_experts = hf_moe.Expert(h, cfg.moe_intermediate_size * cfg.n_shared_experts, False)

    def route(self, hidden_states):
        """TopkRouter's weights with its top-k indices (route_tokens_to_experts returns both)."""
        c, gate = self.cfg, self.gate
        experts, groups = c.n_routed_experts, c.n_group
        scores = F.linear(hidden_states, gate.weight).sigmoid()
        choice = scores + gate.e_score_correction_bias.unsqueeze(0)
        group_scores = choice.view(-1, groups, experts // groups).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=c.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, groups, experts // groups).reshape(-1, experts)
        choice = choice.masked_fill(~score_mask.bool(), float("-inf"))
        topk_indices = torch.topk(choice, k=c.num_experts_per_tok, dim=-1, sorted=False)[1]
        weights = scores.gather(1, topk_indices)
        if c.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return topk_indices, weights * c.routed_scaling_factor

    def forward(self, x):
        hidden_states = x.view(-1, self.hidden_dim)
        topk_indices, topk_weights = self.route(hidden_states)
        routed = self.experts(hidden_states, topk_indices, topk_weights)
        return routed.view_as(x) + self.shared_experts(x)


def build(grouped: bool):
    torch.manual_seed(zoo.SEED)
    module = hf_deepseek.DeepseekV3(CFG)
    if grouped:
        for layer in module.layers:
            if isinstance(layer.mlp, hf_deepseek.DeepseekMoE):
                layer.mlp = GroupedDeepseekMoE(CFG)
    zoo.fill_distinct(module)
    return module.train()


def forward(m, inputs, use_checkpoint, **_):
    return m(inputs[0])


def measured_peak(grouped: bool, batch: int, seq: int) -> dict:
    """measure.py's protocol on the model: peak_bytes and its parts."""
    module = build(grouped)
    optimizer = measure.make_optimizer("momentum", list(module.parameters()))
    gen = torch.Generator().manual_seed(zoo.SEED + 2)
    inputs = llama.make_inputs(CFG.base, batch, seq, zoo.SEED)
    targets = torch.randint(0, CFG.base.vocab_size, (batch, seq), generator=gen)
    m = measure.profile_steady_step(
        module, optimizer, list(inputs) + [targets],
        lambda: measure.training_step(module, inputs, targets, optimizer, forward, False, "cross-entropy"))
    return {"model": "deepseek_tiny", "onnx": os.path.relpath(CONFIG, ROOT), "batch": batch, "seq": seq,
            "precision": "fp32", "experts_implementation": "grouped_mm" if grouped else "eager", "optimizer": "momentum",
            "optimizer_settings": measure.describe_optimizer(optimizer), "loss": "cross-entropy", "checkpoint": [], **m}


def memplan_peak(binary: str, experts: str, batch: int, seq: int) -> int:
    return measure.memplan_training_peak(binary, CONFIG, batch, seq, "--precision", "fp32", "--optimizer", "momentum",
                                         "--experts-implementation", experts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    with open(CONFIG, "w") as f:  # the file memplan reads, written from the same config
        json.dump(hf_deepseek_test.config_json(CFG), f, indent=2)
        f.write("\n")
    print(f"{'experts':>10} {'batch':>5} {'seq':>4} {'measured B':>11} {'memplan B':>10} {'error %':>8}")
    rows = []
    for batch in (2, 8):
        for experts in ("eager", "grouped_mm"):
            rows.append(measured_peak(experts == "grouped_mm", batch, 64))
            measured = rows[-1]["peak_bytes"]
            predicted = memplan_peak(a.memplan, experts, batch, 64)
            print(f"{experts:>10} {batch:>5} {64:>4} {measured:>11,} {predicted:>10,} "
                  f"{100 * (predicted - measured) / measured:+8.2f}")
    measure.write_measurements(OUT, "bench/cpu_ground_truth/grouped_mm_deepseek.py", rows)


if __name__ == "__main__":
    main()
