#!/usr/bin/python3
"""moe_tiny (measure.py's MOE_TINY) with transformers 5's grouped_mm experts, one fp32 training step on the CPU,
against memplan's --experts-implementation grouped_mm: not gated.

    /usr/bin/python3 bench/cpu_ground_truth/grouped_mm.py [--memplan build/memplan]

torch 1.13 has no torch._grouped_mm (transformers asks for torch >= 2.9), so each layer's experts run
grouped_mm_experts_forward (src/transformers/integrations/moe.py at 0261a46) with a stand-in autograd.Function for
_grouped_mm whose forward allocates one [S, N] result (each group's product written into its rows with matmul(out=))
and saves what derivatives.yaml's _grouped_mm formulas read (self, mat2, offs: pytorch/pytorch at d327a78), and whose
backward allocates grad_self [S, K] and grad_mat2 [G, K, N] only. Everything else is the modeling code's own ops.
The rest of the decoder is hf_moe.py's (the router, attention, norms), as memplan's config.json graph is.
Protocol: measure.py's (README.md): a warm-up step, zero_grad(set_to_none=True), one profiled step (forward,
cross-entropy, backward, SGD momentum foreach), measured = baseline + the peak of the allocation events (peak_bytes);
memplan: --runtime ideal --torch 1.13 --zero-grad set-to-none --optimizer momentum, resident + the live bytes at
the peak (the batch included, as the measured baseline includes it), as tests/accuracy/accuracy.py compares them. Both rows, the eager
loop (hf_moe.py as it is) and grouped_mm, against memplan's --runtime ideal estimate with the same settings.
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import measure  # noqa: E402
import zoo  # noqa: E402  (tests/models, on measure's path)
import hf_moe  # noqa: E402


class GroupedMm(torch.autograd.Function):
    """torch._grouped_mm(a [S, K], b [G, K, N], offs [G] int32) -> [S, N], its memory only."""

    @staticmethod
    def forward(ctx, a, b, offs):
        out = a.new_empty((a.shape[0], b.shape[2]))
        start = 0
        for g, end in enumerate(offs.tolist()):
            if end > start:
                torch.matmul(a[start:end], b[g], out=out[start:end])
            start = end
        ctx.save_for_backward(a, b, offs)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, offs = ctx.saved_tensors
        grad_a = a.new_zeros(a.shape)
        grad_b = b.new_zeros(b.shape)
        start = 0
        for g, end in enumerate(offs.tolist()):
            if end > start:
                torch.matmul(grad[start:end], b[g].t(), out=grad_a[start:end])
                torch.matmul(a[start:end].t(), grad[start:end], out=grad_b[g])
            start = end
        return grad_a, grad_b, None


class GroupedExperts(nn.Module):
    """Qwen3MoeExperts of transformers 5: gate_up_proj [E, 2I, H], down_proj [E, H, I], grouped_mm forward."""

    def __init__(self, e, h, i):
        super().__init__()
        self.num_experts = e
        self.gate_up_proj = nn.Parameter(torch.empty(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.empty(e, h, i))

    def forward(self, hidden_states, top_k_index, top_k_weights):
        num_top_k, num_tokens = top_k_index.size(-1), hidden_states.size(0)
        final_hidden_states = torch.zeros_like(hidden_states)
        expert_ids = top_k_index.reshape(-1)
        token_idx = torch.arange(num_tokens).unsqueeze(1).expand(-1, num_top_k).reshape(-1)
        perm = torch.argsort(expert_ids, stable=True)
        inv_perm = torch.argsort(perm, stable=True)
        sample_weights = top_k_weights.reshape(-1)
        current_hidden_states = hidden_states[token_idx]
        expert_ids_g = expert_ids[perm]
        sample_weights_g = sample_weights[perm]
        current_states_g = current_hidden_states[perm]
        num_tokens_per_expert = torch.histc(expert_ids_g.float(), bins=self.num_experts, min=0,
                                            max=self.num_experts - 1)
        offsets = torch.cumsum(num_tokens_per_expert, dim=0, dtype=torch.int32)
        gate_up_out = GroupedMm.apply(current_states_g, self.gate_up_proj.transpose(-2, -1), offsets)
        gate, up = gate_up_out.chunk(2, dim=-1)
        hidden_after_activation = F.silu(gate) * up
        out_per_sample_g = GroupedMm.apply(hidden_after_activation, self.down_proj.transpose(-2, -1), offsets)
        out_per_sample_g = out_per_sample_g * sample_weights_g.unsqueeze(-1)
        out_per_sample = out_per_sample_g[inv_perm]
        final_hidden_states.index_add_(0, token_idx, out_per_sample.to(final_hidden_states.dtype))
        return final_hidden_states


class GroupedBlock(nn.Module):
    """Qwen3MoeSparseMoeBlock of transformers 5 (experts, then gate), the router as hf_moe.py's."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg.base.hidden_size
        self.hidden_dim, self.top_k = h, cfg.num_experts_per_tok
        self.experts = GroupedExperts(cfg.num_experts, h, cfg.moe_intermediate_size)
        self.gate = nn.Linear(h, cfg.num_experts, bias=False)

    def forward(self, x):
        hidden_states = x.view(-1, self.hidden_dim)
        routing_weights = F.softmax(self.gate(hidden_states), dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        return self.experts(hidden_states, selected_experts, routing_weights).view_as(x)


def build(grouped: bool):
    module = measure.STEPS["moe_tiny"].build("moe_tiny")  # seeded, distinct values; writes moe_tiny.json
    if grouped:
        torch.manual_seed(zoo.SEED)
        for layer in module.layers:
            layer.mlp = GroupedBlock(measure.MOE_TINY)
        zoo.fill_distinct(module)
    return module.train()


def measured_peak(grouped: bool, batch: int, seq: int) -> int:
    steps = measure.STEPS["moe_tiny"]
    module = build(grouped)
    optimizer = measure.make_optimizer("momentum", list(module.parameters()))
    gen = torch.Generator().manual_seed(zoo.SEED + 2)
    inputs = steps.inputs("moe_tiny", batch, seq)
    targets = torch.randint(0, steps.vocab("moe_tiny"), (batch, seq), generator=gen)
    m = measure.profile_steady_step(
        module, optimizer, list(inputs) + [targets],
        lambda: measure.training_step(module, inputs, targets, optimizer, steps.forward, False, "cross-entropy"))
    return m["peak_bytes"]


def memplan_peak(binary: str, experts: str, batch: int, seq: int) -> int:
    return measure.memplan_training_peak(binary, measure.MOE_TINY_CONFIG, batch, seq, "--precision", "fp32",
                                         "--optimizer", "momentum", "--experts-implementation", experts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    print(f"{'experts':>10} {'batch':>5} {'seq':>4} {'measured B':>11} {'memplan B':>10} {'error %':>8}")
    for batch in (2, 8):
        for experts in ("eager", "grouped_mm"):
            measured = measured_peak(experts == "grouped_mm", batch, 64)
            predicted = memplan_peak(a.memplan, experts, batch, 64)
            print(f"{experts:>10} {batch:>5} {64:>4} {measured:>11,} {predicted:>10,} "
                  f"{100 * (predicted - measured) / measured:+8.2f}")


if __name__ == "__main__":
    main()
