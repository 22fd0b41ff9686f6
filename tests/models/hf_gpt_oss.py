"""gpt-oss (transformers models/gpt_oss/modeling_gpt_oss.py, GptOssForCausalLM) in plain PyTorch, for the config.json
graphs' node-for-node test (--graph train, decode and prefill).

Followed op for op with eager attention, float32 throughout (GptOssRMSNorm's casts are no-ops then, as in
tests/models/llama.py), shapes from the config as hf_archs.py does:
  - GptOssAttention: q/k/v/o projections with biases (attention_bias), head_dim from the config, grouped-query
    attention (repeat_kv), scores * head_dim ** -0.5 plus the layer's mask, then eager_attention_forward's attention
    sinks: the per-head learned logit `sinks` reshaped to (1, heads, 1, 1), expanded to (batch, heads, new, 1),
    concatenated to the scores, the row maximum subtracted, softmax, the sink column dropped (probs[..., :-1]);
  - rotary as GptOssRotaryEmbedding / _apply_rotary_emb: cos and sin of positions x inv_freq over head_dim / 2
    (no concatenation), times attention_scaling, and the halves rotated as first * cos - second * sin,
    second * cos + first * sin (torch.chunk's halves taken as slices); yarn rope_scaling
    (modeling_rope_utils._compute_yarn_parameters) changes inv_freq's values and attention_scaling only;
  - layer_types: "sliding_attention" layers masked to sliding_window (hf_archs.sliding_additive_mask /
    cache_masks), "full_attention" layers causal;
  - GptOssMLP: GptOssTopKRouter (a Linear with bias over the (batch·seq, hidden) tokens, top-k on the logits,
    softmax over the k values) and GptOssExperts: per expert, its tokens gathered (hidden_states[token_idx]),
    gate_up = x @ gate_up_proj[e] + gate_up_proj_bias[e] ([E, H, 2I] parameters), gate = gate_up[..., ::2] and
    up = gate_up[..., 1::2], gate clamped above at swiglu_limit, up to [-limit, limit], glu = gate * sigmoid(gate *
    1.702), (up + 1) * glu @ down_proj[e] + down_proj_bias[e], times the routing weight, index_add_ back (the loop
    transformers runs in training, and in eval too since the batched all-experts path was removed: modular_gpt_oss.py
    at 0261a467).
Which tokens an expert receives is hf_moe.py's rule (balanced, or --moe-routing worst), the routing weight of a
(token, slot) pair its top-k softmax value.
Parameters are registered in the modeling code's order (GptOssDecoderLayer: self_attn, mlp, input_layernorm,
post_attention_layernorm; GptOssAttention: q, k, v, o, sinks).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_archs
import llama


@dataclasses.dataclass(frozen=True)
class GptOssConfig:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    num_local_experts: int
    num_experts_per_tok: int
    sliding_window: int
    layer_types: Tuple[str, ...]
    swiglu_limit: float = 7.0
    max_position_embeddings: int = 4096
    # yarn rope_scaling: (factor, original_max_position_embeddings, beta_fast, beta_slow, truncate); None: default
    yarn: Optional[Tuple[float, int, float, float, bool]] = None
    tie_word_embeddings: bool = False
    routing: str = "balanced"  # memplan's --moe-routing

    def parameter_count(self) -> int:
        """Hand count: embedding V·h; per layer q h·(n·hd) + n·hd, k and v h·(kv·hd) + kv·hd each, o (n·hd)·h + h,
        sinks n; router E·h + E; experts E·(h·2I + 2I + I·h + h); two norms 2h; final norm h; lm_head V·h unless
        tied."""
        h, hd, n, kv = self.hidden_size, self.head_dim, self.num_attention_heads, self.num_key_value_heads
        e, i = self.num_local_experts, self.intermediate_size
        attention = h * n * hd + n * hd + 2 * (h * kv * hd + kv * hd) + n * hd * h + h + n
        moe = e * h + e + e * (h * 2 * i + 2 * i + i * h + h)
        layer = attention + moe + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head


def yarn_inverse_frequencies(cfg: GptOssConfig) -> Tuple[torch.Tensor, float]:
    """modeling_rope_utils._compute_yarn_parameters (and _compute_default_rope_parameters without scaling):
    (inv_freq as a (1, head_dim / 2) tensor, attention_factor)."""
    dim, base = cfg.head_dim, cfg.rope_theta
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim)
    if cfg.yarn is None:
        return (1.0 / pos_freqs).unsqueeze(0), 1.0
    factor, original, beta_fast, beta_slow, truncate = cfg.yarn
    attention_factor = 0.1 * math.log(factor) + 1.0  # get_mscale(factor)

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_factor) + (1.0 / pos_freqs) * extrapolation_factor
    return inv_freq.unsqueeze(0), attention_factor


def apply_rotary(x, cos, sin, half: int):
    """_apply_rotary_emb: torch.chunk(x, 2, dim=-1)'s halves, rotated, concatenated."""
    first, second = x[..., :half], x[..., half:]
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg: GptOssConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h, q, kv = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        self.q_proj = nn.Linear(h, q, bias=True)
        self.k_proj = nn.Linear(h, kv, bias=True)
        self.v_proj = nn.Linear(h, kv, bias=True)
        self.o_proj = nn.Linear(q, h, bias=True)
        self.sinks = nn.Parameter(torch.empty(cfg.num_attention_heads))
        self.scaling = self.head_dim ** -0.5

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        b, s = x.shape[0], x.shape[1]
        hd, q_size = self.head_dim, self.heads * self.head_dim
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, s, self.heads, hd).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, hd).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, hd).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin, hd // 2), apply_rotary(k, cos, sin, hd // 2)
        total = s
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
            total = k.shape[2]
        present = (k, v)
        n_rep = self.heads // self.kv_heads
        k = llama.repeat_kv(k, n_rep, b, self.kv_heads, total, hd)
        v = llama.repeat_kv(v, n_rep, b, self.kv_heads, total, hd)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling + mask
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(b, self.heads, s, 1)  # query.shape's b and s, -1 as sizes
        combined = torch.cat([scores, sinks], dim=-1)
        combined = combined - combined.max(dim=-1, keepdim=True).values
        probs = F.softmax(combined, dim=-1, dtype=combined.dtype)
        context = torch.matmul(probs[..., :-1], v).transpose(1, 2).reshape(b, s, q_size)
        return (self.o_proj(context), present) if cache else self.o_proj(context)


class Router(nn.Module):
    """GptOssTopKRouter: (top-k softmax values) of F.linear(x, weight, bias)."""

    def __init__(self, cfg: GptOssConfig):
        super().__init__()
        self.top_k = cfg.num_experts_per_tok
        self.weight = nn.Parameter(torch.empty(cfg.num_local_experts, cfg.hidden_size))
        self.bias = nn.Parameter(torch.empty(cfg.num_local_experts))

    def forward(self, hidden_states):
        router_logits = F.linear(hidden_states, self.weight, self.bias)
        top_value, _ = torch.topk(router_logits, self.top_k, dim=-1)
        return F.softmax(top_value, dim=1, dtype=top_value.dtype)


class Experts(nn.Module):
    def __init__(self, cfg: GptOssConfig):
        super().__init__()
        e, h, i = cfg.num_local_experts, cfg.hidden_size, cfg.intermediate_size
        self.num_experts, self.top_k, self.hidden = e, cfg.num_experts_per_tok, h
        self.gate_up_proj = nn.Parameter(torch.empty(e, h, 2 * i))
        self.gate_up_proj_bias = nn.Parameter(torch.empty(e, 2 * i))
        self.down_proj = nn.Parameter(torch.empty(e, i, h))
        self.down_proj_bias = nn.Parameter(torch.empty(e, h))
        self.alpha, self.limit = 1.702, cfg.swiglu_limit
        self.worst = cfg.routing == "worst"

    def forward(self, hidden_states, routing_weights):
        next_states = torch.zeros_like(hidden_states)
        pair_weights = routing_weights.reshape(-1)  # hf_moe.py's pairs
        pairs = torch.arange(pair_weights.shape[0], device=hidden_states.device)
        pair_token = torch.div(pairs, self.top_k, rounding_mode="trunc")
        for e in range(self.num_experts):
            if not self.worst:
                picked = slice(e, None, self.num_experts)
            else:
                picked = slice(e, None, self.top_k) if e < self.top_k else slice(0, 0)
            token_idx = pair_token[picked]
            current_state = hidden_states[token_idx]
            gate_up = current_state @ self.gate_up_proj[e] + self.gate_up_proj_bias[e]
            gate, up = gate_up[..., ::2], gate_up[..., 1::2]
            gate = gate.clamp(min=None, max=self.limit)
            up = up.clamp(min=-self.limit, max=self.limit)
            glu = gate * torch.sigmoid(gate * self.alpha)
            out = ((up + 1) * glu) @ self.down_proj[e] + self.down_proj_bias[e]
            weighted_output = out * pair_weights[picked, None]
            next_states.index_add_(0, token_idx, weighted_output.to(hidden_states.dtype))
        return next_states


class MLP(nn.Module):
    def __init__(self, cfg: GptOssConfig):
        super().__init__()
        self.router = Router(cfg)
        self.experts = Experts(cfg)
        self.hidden = cfg.hidden_size

    def forward(self, x):
        hidden_states = x.view(-1, self.hidden)  # GptOssMLP.forward's view(-1, hidden_dim), the size from the config
        return self.experts(hidden_states, self.router(hidden_states)).view_as(x)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: GptOssConfig):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = llama.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = llama.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        attended = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, cache)
        present = None
        if cache:
            attended, present = attended
        x = x + attended
        x = x + self.mlp(self.post_attention_layernorm(x))
        return (x, present) if cache else x


class Decoder(nn.Module):
    """GptOssForCausalLM without the cache: input_ids -> logits."""

    def __init__(self, cfg: GptOssConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = llama.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = llama.lm_head(cfg.hidden_size, cfg.vocab_size, self.embed_tokens, cfg.tie_word_embeddings)
        self.inv_freq, self.attention_scaling = yarn_inverse_frequencies(cfg)

    def sliding(self):
        return [t == "sliding_attention" for t in self.cfg.layer_types]

    def head(self, x):
        x = self.norm(x)
        return self.lm_head(x)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        cfg, device = self.cfg, input_ids.device
        seq = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        positions = torch.arange(seq, device=device).to(torch.float32)
        freqs = positions.unsqueeze(1) * self.inv_freq
        cos, sin = freqs.cos() * self.attention_scaling, freqs.sin() * self.attention_scaling
        sliding = self.sliding()
        mask = llama.causal_additive_mask(seq, device) if not all(sliding) else None
        window = hf_archs.sliding_additive_mask(seq, cfg.sliding_window, device) if any(sliding) else None
        for layer, slides in zip(self.layers, sliding):
            x = layer(x, cos, sin, window if slides else mask)
        return self.head(x)


class DecoderWithCache(Decoder):
    """The decoder with its KV cache as optimum exports it (hf_archs.DecoderWithCache's inputs and outputs), every
    layer's cache holding every token (the sliding layers masked to their window)."""

    def __init__(self, cfg: GptOssConfig, past: bool):
        super().__init__(cfg)
        self.past = past

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past_kv):
        cfg = self.cfg
        x = self.embed_tokens(input_ids)
        freqs = position_ids.unsqueeze(-1).to(torch.float32) * self.inv_freq
        cos = (freqs.cos() * self.attention_scaling).unsqueeze(1)
        sin = (freqs.sin() * self.attention_scaling).unsqueeze(1)
        sliding = self.sliding()
        mask, window = hf_archs.cache_masks(attention_mask, input_ids.shape[1],
                                            cfg.sliding_window if any(sliding) else None, not all(sliding))
        presents = []
        for l, (layer, slides) in enumerate(zip(self.layers, sliding)):
            past = (past_kv[2 * l], past_kv[2 * l + 1]) if self.past else None
            x, present = layer(x, cos, sin, window if slides else mask, past, cache=True)
            presents.extend(present)
        return (self.head(x), *presents)
