"""DeepSeek-V2 (model_type deepseek_v2: DeepSeek-V2, DeepSeek-V2-Lite) in plain PyTorch, for the config.json graphs'
node-for-node test (tests/import/hf_deepseek_v2_test.py). hf_deepseek.py's DeepSeek-V3 twin with what transformers'
models/deepseek_v2/modeling_deepseek_v2.py does otherwise (read at 0233e509 for the attention and rotary,
and the modular_deepseek_v2.py of its first release for DeepseekV2MoE / DeepseekV2MoEGate, whose per-expert
ModuleList this twin keeps, as hf_deepseek.py keeps DeepseekV3MoE's):
  - DeepseekV2Attention is DeepseekV3Attention's multi-head latent attention (q_proj when q_lora_rank is null, else
    q_a_proj, q_a_layernorm, q_b_proj; kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), but
    self.scaling = qk_head_dim^-0.5 whatever rope_scaling says (V3 multiplies yarn's mscale_all_dim squared in),
    and rotary is apply_rotary_emb: x.float().reshape(..., d/2, 2) viewed as complex, times freqs_cis
    (torch.polar(1, freqs) * attention_scaling, (b, s, d/2) unsqueezed at 1), view_as_real, flatten(3), type_as(x).
    torch.onnx.export (torch 1.13) cannot write complex tensors, so complex_rotary below computes the same values in
    real arithmetic: the pairs (x[2j], x[2j+1]) as (re, im), out = (re·cos - im·sin, re·sin + im·cos) stacked on a
    last axis of 2 and reshaped back to d; cos and sin are freqs_cis' real and imaginary parts (cos(freqs) and
    sin(freqs) times attention_scaling, no cat to d). The tensors it allocates are transformers': the float32 copy
    (x.float(): x itself in float32, as llama.py's casts), the rotated float32 result (the stack, (b, h, s, d/2, 2)
    as view_as_real's), the cast back (type_as: a no-op in float32); its products and sums are the complex
    multiply's temporaries.
  - DeepseekV2MoEGate: weight (E, h) only (no e_score_correction_bias); on the block's (b, s, h) states, viewed
    (N, h) in the gate, scores F.linear(x.type(torch.float32), W.type(torch.float32)).softmax(dim=-1,
    dtype=torch.float32) (no-ops in float32, but torch.onnx writes the casts); topk_method greedy: the top-k scores; group_limited_greedy: each group's maximum
    (view(N, n_group, E / n_group).max(-1)), topk_group groups kept, the others' scores masked to 0, top-k; the
    weights times routed_scaling_factor. norm_topk_prob is never read by transformers' gate (the remote code's is).
  - DeepseekV2DecoderLayer: layers below first_k_dense_replace dense (default 0), the others DeepseekV2MoE with
    shared_experts (n_shared_experts x moe_intermediate_size), registered experts, gate, shared_experts.
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_deepseek


@dataclasses.dataclass(frozen=True)
class DeepseekV2Config(hf_deepseek.DeepseekConfig):
    topk_method: str = "greedy"  # or group_limited_greedy (n_group, topk_group)

    model_type = "deepseek_v2"

    def scaling(self) -> float:
        """DeepseekV2Attention.scaling: no mscale."""
        return self.qk_head_dim ** (-0.5)

    def parameter_count(self) -> int:
        """hf_deepseek's hand count less the routers' e_score_correction_bias (E per sparse layer), which
        DeepseekV2MoEGate does not have."""
        sparse = sum(1 for l in range(self.base.num_hidden_layers) if self.sparse(l))
        return super().parameter_count() - sparse * self.n_routed_experts


def complex_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, b, h: int, s, d: int) -> torch.Tensor:
    """apply_rotary_emb's view_as_real(view_as_complex(x.float().reshape(.., d/2, 2)) * freqs_cis).flatten(3)
    .type_as(x) in real arithmetic (module docstring)."""
    pairs = x.reshape(b, h, s, d // 2, 2)
    re, im = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((re * cos - im * sin, re * sin + im * cos), dim=-1)
    return rotated.reshape(b, h, s, d)


class MlaAttentionV2(hf_deepseek.MlaAttention):
    def rotate(self, q_rot, k_rot, b, s, cos, sin):
        rope = self.cfg.qk_rope_head_dim
        return (complex_rotary(q_rot, cos, sin, b, self.heads, s, rope),
                complex_rotary(k_rot, cos, sin, b, 1, s, rope))


class MoeGate(nn.Module):
    """DeepseekV2MoEGate: forward(hidden_states (b, s, h)) -> the (N, k) top-k weights (its indices unused, the dispatch
    being hf_moe.dispatch's static rule, as in hf_deepseek.py)."""

    def __init__(self, cfg: DeepseekV2Config):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.base.hidden_size))

    def forward(self, hidden_states):
        c = self.cfg
        experts, groups = c.n_routed_experts, c.n_group
        # The (b, s, h) states viewed (N, h) here, the logits and scores in float32 whatever the model's type:
        # F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)).softmax(dim=-1,
        # dtype=torch.float32), as TopkRouter (hf_deepseek.py) does for V3.
        hidden_states = hidden_states.view(-1, c.base.hidden_size)
        logits = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        scores = logits.softmax(dim=-1, dtype=torch.float32)
        if c.topk_method == "greedy":
            weights = torch.topk(scores, k=c.num_experts_per_tok, dim=-1, sorted=False)[0]
        else:  # group_limited_greedy
            group_scores = scores.view(-1, groups, experts // groups).max(dim=-1).values
            group_idx = torch.topk(group_scores, k=c.topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores)
            group_mask.scatter_(1, group_idx, 1)
            score_mask = group_mask.unsqueeze(-1).expand(-1, groups, experts // groups).reshape(-1, experts)
            tmp_scores = scores.masked_fill(~score_mask.bool(), 0.0)
            weights = torch.topk(tmp_scores, k=c.num_experts_per_tok, dim=-1, sorted=False)[0]
        return weights * c.routed_scaling_factor


class DeepseekV2MoE(hf_deepseek.DeepseekMoE):
    Router = MoeGate
    float32_accumulator = False


class DeepseekV2DecoderLayer(hf_deepseek.DeepseekDecoderLayer):
    Attention, MoE = MlaAttentionV2, DeepseekV2MoE


def tables(freqs: torch.Tensor, scaling: float, cache: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """freqs_cis = torch.polar(ones, freqs) * attention_scaling as its real and imaginary parts (b, s, d/2) (with the
    cache unsqueezed at 1: apply_rotary_emb's freqs_cis.unsqueeze(1))."""
    cos = freqs.cos() * scaling
    cos = cos.unsqueeze(1) if cache else cos
    sin = freqs.sin() * scaling
    return cos, sin.unsqueeze(1) if cache else sin


class DeepseekV2(hf_deepseek.DeepseekV3):
    Layer = DeepseekV2DecoderLayer
    tables = staticmethod(tables)


class DeepseekV2WithCache(hf_deepseek.DeepseekV3WithCache):
    Layer = DeepseekV2DecoderLayer
    tables = staticmethod(tables)
