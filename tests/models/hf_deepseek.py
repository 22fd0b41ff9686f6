"""DeepSeek-V3 (model_type deepseek_v3) in plain PyTorch, for the config.json graphs' node-for-node test
(tests/import/hf_moe_test.py; --graph train, decode and prefill).

Follows transformers models/deepseek_v3/modeling_deepseek_v3.py (commit 00b676f8) op for op where it shapes memory:
  - DeepseekV3Attention, multi-head latent attention: q = q_b_proj(q_a_layernorm(q_a_proj(x))) (q_proj(x) when
    q_lora_rank is null), viewed (b, s, heads, qk_nope + qk_rope) and split into its nope and rope parts;
    compressed = kv_a_proj_with_mqa(x) split into kv_lora_rank and the shared rope key (one head);
    kv_b_proj(kv_a_layernorm(latent)) viewed (b, s, heads, qk_nope + v_head_dim) and split into the nope keys and
    the values; the rope parts rotated (apply_rotary_pos_emb_interleave when rope_interleave, the default: each
    (b, h, s, d) viewed (.., d/2, 2), transposed and reshaped before rotate_half), the rope key expanded to every
    head, keys and queries cat(nope, rope); eager attention with scores * scaling (qk_head_dim^-0.5, times
    yarn_get_mscale(factor, mscale_all_dim)^2 under yarn rope_scaling); o_proj from heads x v_head_dim. The
    q_a_layernorm and kv_a_layernorm are DeepseekV3RMSNorm at its default eps 1e-6 (the config's rms_norm_eps is the
    layers' norms' only).
  - DeepseekV3RotaryEmbedding over qk_rope_head_dim (DeepseekV3Config.head_dim), cos and sin times its
    attention_scaling (1.0 but under yarn: modeling_rope_utils._compute_yarn_parameters), inv_freq yarn's when
    rope_scaling is yarn.
  - DeepseekV3MoE: the router DeepseekV3TopkRouter (weight (E, h) and the e_score_correction_bias buffer) on its
    own view of the block's input, in float32 whatever the model's type (modeling_deepseek_v3.py at f5a9ec5:
    F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)), written as two Casts, no-ops in a
    float32 export; the JIT merges the block's own view with the router's): sigmoid(x W^T); the group-limited choice (scores + bias viewed (N, n_group, E/n_group), each group's two best
    summed, topk_group groups kept, the others' scores masked to 0, top-k); the top-k weights gathered from the
    sigmoid scores, divided by their sum + 1e-20 when norm_topk_prob, times routed_scaling_factor; the experts
    (DeepseekV3MLP at moe_intermediate_size) by hf_moe.dispatch, the same static routing rule as the other mixtures
    of experts (hf_moe.py's docstring: which tokens an expert receives), accumulated as DeepseekV3MoE.moe does (at
    f5a9ec5): into torch.zeros_like(hidden_states, dtype=topk_weights.dtype), each weighted output added as it is
    (float32 by promotion in a half model), cast back once (.type(hidden_states.dtype)); plus shared_experts, one
    DeepseekV3MLP of moe_intermediate_size x n_shared_experts on the block's input.
  - Layers below first_k_dense_replace have the dense DeepseekV3MLP (intermediate_size).

Differences that change no tensor's size: sizes come from the config (heads, dims) instead of -1 and tensor.shape;
parameters are registered in the order the forward reads them (HF registers a layer's mlp before its norms and a
MoE's experts before its gate); the router's topk indices are computed but, as in hf_moe.py, the dispatch is
memplan's static rule (the group-limited choice constrains which rules a router can make: hf_deepseek_routing).
The HF cache (DynamicCache) holds each layer's decompressed keys (b, heads, s, qk_nope + qk_rope) and values
(b, heads, s, v_head_dim), after rotary and the expand: decoder_with_cache's past/present have those shapes.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import hf_moe
import llama


@dataclasses.dataclass(frozen=True)
class DeepseekConfig:
    # base: hidden_size, intermediate_size (the dense layers'), layers, heads (num_key_value_heads the same), vocab,
    # rope_theta, rms_norm_eps, tie; head_dim_override = qk_rope_head_dim (the rotary tables' width)
    base: llama.LlamaConfig
    q_lora_rank: Optional[int]
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    n_routed_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    n_shared_experts: int
    first_k_dense_replace: int
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    routed_scaling_factor: float
    rope_interleave: bool = True
    yarn: Optional[dict] = None  # rope_scaling {"type": "yarn", factor, beta_fast, beta_slow, mscale, mscale_all_dim,
    #                               original_max_position_embeddings}
    max_position_embeddings: int = 1 << 30
    routing: str = "balanced"

    model_type = "deepseek_v3"

    def sparse(self, layer: int) -> bool:
        return layer >= self.first_k_dense_replace

    @property
    def num_experts(self) -> int:  # hf_moe.MoeConfig's names, read by hf_moe_test.expert_rows
        return self.n_routed_experts

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def scaling(self) -> float:
        """DeepseekV3Attention.scaling."""
        s = self.qk_head_dim ** (-0.5)
        if self.yarn is not None and self.yarn.get("mscale_all_dim", 0):
            m = yarn_get_mscale(self.yarn["factor"], self.yarn["mscale_all_dim"])
            s = s * m * m
        return s

    def parameter_count(self) -> int:
        """Hand count (parameters and the routers' e_score_correction_bias buffers, all initializers): embedding V·h;
        per layer the attention (q: h·r_q + r_q + r_q·H·(nope+rope), or h·H·(nope+rope) without q_lora_rank;
        kv_a h·(r_kv + rope), its norm r_kv, kv_b r_kv·H·(nope + v), o H·v·h; with attention_bias the biases
        r_q + r_kv + rope + h), two norms 2h, and the MLP: dense
        3·h·I, sparse the router E·h + E, the experts E·3·h·I_e and the shared 3·h·I_e·n_shared; final norm h; the
        head V·h unless tied."""
        b = self.base
        h, heads, v = b.hidden_size, b.num_attention_heads, self.v_head_dim
        if self.q_lora_rank is None:
            q = h * heads * self.qk_head_dim
        else:
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * self.qk_head_dim
        attn = q + h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank
        attn += self.kv_lora_rank * heads * (self.qk_nope_head_dim + v) + heads * v * h
        if b.attention_bias:  # q_a_proj's (with q_lora_rank), kv_a_proj_with_mqa's and o_proj's biases
            attn += (self.q_lora_rank or 0) + self.kv_lora_rank + self.qk_rope_head_dim + h
        e, ie = self.n_routed_experts, self.moe_intermediate_size
        sparse = e * h + e + e * 3 * h * ie + 3 * h * ie * self.n_shared_experts
        total = b.vocab_size * h + h + (0 if b.tie_word_embeddings else b.vocab_size * h)
        for l in range(b.num_hidden_layers):
            total += attn + 2 * h + (sparse if self.sparse(l) else 3 * h * b.intermediate_size)
        return total


def yarn_get_mscale(scale: float = 1, mscale: float = 1) -> float:
    """modeling_deepseek_v3.yarn_get_mscale."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def rope_parameters(cfg: DeepseekConfig) -> Tuple[torch.Tensor, float]:
    """inv_freq and attention_scaling of DeepseekV3RotaryEmbedding over qk_rope_head_dim: the default rope, or yarn
    as modeling_rope_utils._compute_yarn_parameters computes them (transformers main: original_max_position_embeddings
    from rope_scaling; attention_factor get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are
    given, else get_mscale(factor); beta_fast 32 and beta_slow 1 by default)."""
    dim, base = cfg.qk_rope_head_dim, cfg.base.rope_theta
    if cfg.yarn is None:
        return llama.inverse_frequencies(dim, base), 1.0
    y = cfg.yarn
    factor = y["factor"]
    original = y.get("original_max_position_embeddings") or cfg.max_position_embeddings
    mscale, mscale_all_dim = y.get("mscale"), y.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        attention_factor = yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    else:
        attention_factor = yarn_get_mscale(factor)
    beta_fast, beta_slow = y.get("beta_fast") or 32, y.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
    return inv_freq, attention_factor


def interleaved(x: torch.Tensor, b, h: int, s, d: int) -> torch.Tensor:
    """apply_rotary_pos_emb_interleave's x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)."""
    return x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)


class MlaAttention(nn.Module):
    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        b = cfg.base
        h, heads = b.hidden_size, b.num_attention_heads
        self.cfg, self.heads = cfg, heads
        bias = b.attention_bias
        if cfg.q_lora_rank is None:
            self.q_proj = nn.Linear(h, heads * cfg.qk_head_dim, bias=False)
        else:
            self.q_a_proj = nn.Linear(h, cfg.q_lora_rank, bias=bias)
            self.q_a_layernorm = llama.RMSNorm(cfg.q_lora_rank, 1e-6)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, heads * cfg.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, cfg.kv_lora_rank + cfg.qk_rope_head_dim, bias=bias)
        self.kv_a_layernorm = llama.RMSNorm(cfg.kv_lora_rank, 1e-6)
        self.kv_b_proj = nn.Linear(cfg.kv_lora_rank, heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), bias=False)
        self.o_proj = nn.Linear(heads * cfg.v_head_dim, h, bias=bias)
        self.scaling = cfg.scaling()

    def rotate(self, q_rot, k_rot, b, s, cos, sin):
        """apply_rotary_pos_emb_interleave (rope_interleave) or apply_rotary_pos_emb on the rope parts."""
        heads, rope = self.heads, self.cfg.qk_rope_head_dim
        if self.cfg.rope_interleave:
            q_rot, k_rot = interleaved(q_rot, b, heads, s, rope), interleaved(k_rot, b, 1, s, rope)
        q_rot = q_rot * cos + llama.rotate_half(q_rot, rope) * sin
        k_rot = k_rot * cos + llama.rotate_half(k_rot, rope) * sin
        return q_rot, k_rot

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        c, heads = self.cfg, self.heads
        nope, rope, v_dim = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x) if c.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, s, heads, c.qk_head_dim).transpose(1, 2)
        q_pass, q_rot = torch.split(q, [nope, rope], dim=-1)
        compressed = self.kv_a_proj_with_mqa(x)
        k_pass, k_rot = torch.split(compressed, [c.kv_lora_rank, rope], dim=-1)
        k_pass = self.kv_b_proj(self.kv_a_layernorm(k_pass)).view(b, s, heads, nope + v_dim).transpose(1, 2)
        k_pass, value = torch.split(k_pass, [nope, v_dim], dim=-1)
        k_rot = k_rot.view(b, 1, s, rope)
        q_rot, k_rot = self.rotate(q_rot, k_rot, b, s, cos, sin)
        k_rot = k_rot.expand(b, heads, s, rope)
        query = torch.cat((q_pass, q_rot), dim=-1)
        key = torch.cat((k_pass, k_rot), dim=-1)
        if past is not None:  # DynamicCache.update: the decompressed keys and values
            key, value = torch.cat((past[0], key), dim=2), torch.cat((past[1], value), dim=2)
        present = (key, value)
        scores = torch.matmul(query, key.transpose(2, 3)) * self.scaling
        probs = torch.softmax(scores + mask, dim=-1)
        context = torch.matmul(probs, value).transpose(1, 2).reshape(b, s, heads * v_dim)
        if cache:
            return self.o_proj(context), present
        return self.o_proj(context)


class TopkRouter(nn.Module):
    """DeepseekV3TopkRouter: forward(hidden_states (N, h)) -> the (N, k) top-k weights (its topk_indices read
    only by the gather, the dispatch being hf_moe.dispatch's static rule)."""

    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.base.hidden_size))
        self.register_buffer("e_score_correction_bias", torch.zeros(cfg.n_routed_experts))

    def forward(self, hidden_states):
        c = self.cfg
        experts, groups = c.n_routed_experts, c.n_group
        # DeepseekV3TopkRouter.forward: the (b, s, h) states viewed (N, h), the logits in float32 whatever the model's
        # type: F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)).
        hidden_states = hidden_states.view(-1, c.base.hidden_size)
        scores = F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)).sigmoid()
        # get_topk_indices
        choice = scores + self.e_score_correction_bias.unsqueeze(0)
        group_scores = choice.view(-1, groups, experts // groups).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=c.topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores)
        group_mask.scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(-1, groups, experts // groups).reshape(-1, experts)
        choice = choice.masked_fill(~score_mask.bool(), 0.0)
        topk_indices = torch.topk(choice, k=c.num_experts_per_tok, dim=-1, sorted=False)[1]
        weights = scores.gather(1, topk_indices)
        if c.norm_topk_prob:
            weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
        return weights * c.routed_scaling_factor


class DeepseekMoE(nn.Module):
    Router = TopkRouter

    def __init__(self, cfg: DeepseekConfig):
        super().__init__()
        h = cfg.base.hidden_size
        self.cfg = cfg
        self.hidden_dim, self.num_experts, self.top_k = h, cfg.n_routed_experts, cfg.num_experts_per_tok
        self.worst = cfg.routing == "worst"
        # DeepseekV3MoE.__init__'s order: experts, gate (the router), shared_experts.
        self.experts = nn.ModuleList(hf_moe.Expert(h, cfg.moe_intermediate_size, False)
                                     for _ in range(cfg.n_routed_experts))
        self.gate = self.Router(cfg)
        self.shared_experts = hf_moe.Expert(h, cfg.moe_intermediate_size * cfg.n_shared_experts, False)

    # DeepseekV3MoE.moe's float32 accumulator; DeepseekV2MoE's first-release moe() casts each weighted output back.
    float32_accumulator = True

    def forward(self, x):
        # DeepseekV3MoE.forward and DeepseekV2MoE.forward: self.gate(hidden_states) on the (b, s, h) states (the gate
        # views them itself), then the block's own view, then moe().
        weights = self.gate(x)
        hidden_states = x.view(-1, self.hidden_dim)
        routed = hf_moe.dispatch(self, hidden_states, weights, weights_dtype_accumulator=self.float32_accumulator)
        return routed.view_as(x) + self.shared_experts(x)


class DeepseekDecoderLayer(nn.Module):
    Attention, MoE = MlaAttention, DeepseekMoE

    def __init__(self, cfg: DeepseekConfig, layer: int):
        super().__init__()
        b = cfg.base
        # DeepseekV3DecoderLayer.__init__'s order: self_attn, mlp, input_layernorm, post_attention_layernorm.
        self.self_attn = self.Attention(cfg)
        self.mlp = self.MoE(cfg) if cfg.sparse(layer) else llama.MLP(b)
        self.input_layernorm = llama.RMSNorm(b.hidden_size, b.rms_norm_eps)
        self.post_attention_layernorm = llama.RMSNorm(b.hidden_size, b.rms_norm_eps)

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        if not cache:
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
            return x + self.mlp(self.post_attention_layernorm(x))
        attended, present = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, cache=True)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), present


def tables(freqs: torch.Tensor, scaling: float, cache: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """DeepseekV3RotaryEmbedding.forward's cos and sin: emb = cat(freqs, freqs), times attention_scaling; with the
    cache (freqs (b, s, d/2)) each unsqueezed at 1 for the heads."""
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * scaling
    cos = cos.unsqueeze(1) if cache else cos
    sin = emb.sin() * scaling
    return cos, sin.unsqueeze(1) if cache else sin


class DeepseekV3(llama.Llama):
    """llama.Llama (embedding, mask, final norm, head) with DeepSeek-V3's layers and rotary tables."""
    Layer = DeepseekDecoderLayer
    tables = staticmethod(tables)

    def __init__(self, cfg: DeepseekConfig):
        super().__init__(cfg.base)
        self.dcfg = cfg
        self.layers = nn.ModuleList(self.Layer(cfg, l) for l in range(cfg.base.num_hidden_layers))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        inv_freq, scaling = rope_parameters(self.dcfg)
        positions = torch.arange(seq, device=input_ids.device).to(torch.float32)
        freqs = positions.unsqueeze(1) * inv_freq.unsqueeze(0)
        cos, sin = self.tables(freqs, scaling, False)
        mask = llama.causal_additive_mask(seq, input_ids.device)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head(x)


class DeepseekV3WithCache(llama.LlamaWithCache):
    """llama.LlamaWithCache (optimum's inputs and outputs) with DeepSeek-V3's layers: past_key_values.{i}.key
    (b, heads, past, qk_nope + qk_rope) and .value (b, heads, past, v_head_dim)."""
    Layer = DeepseekDecoderLayer
    tables = staticmethod(tables)

    def __init__(self, cfg: DeepseekConfig, past: bool):
        super().__init__(cfg.base, past=past)
        self.dcfg = cfg
        self.layers = nn.ModuleList(self.Layer(cfg, l) for l in range(cfg.base.num_hidden_layers))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past_kv):
        x = self.embed_tokens(input_ids)
        inv_freq, scaling = rope_parameters(self.dcfg)
        freqs = position_ids.unsqueeze(-1).to(torch.float32) * inv_freq.unsqueeze(0)
        cos, sin = self.tables(freqs, scaling, True)
        mask = llama.cache_mask(attention_mask, input_ids.shape[1])
        presents = []
        for i, layer in enumerate(self.layers):
            past = (past_kv[2 * i], past_kv[2 * i + 1]) if self.past else None
            x, present = layer(x, cos, sin, mask, past, cache=True)
            presents.extend(present)
        return (self.head(x), *presents)


def cache_inputs(cfg: DeepseekConfig, batch: int, new: int, past: int, seed: int, with_past: bool):
    """llama.make_cache_inputs with DeepSeek's past shapes."""
    args = llama.make_cache_inputs(cfg.base, batch, new, past, None, seed, with_past=False)
    if not with_past:
        return args
    gen = torch.Generator().manual_seed(seed + 2)
    heads = cfg.base.num_attention_heads
    kv = []
    for _ in range(cfg.base.num_hidden_layers):
        kv.append(torch.randn(batch, heads, past, cfg.qk_head_dim, generator=gen))
        kv.append(torch.randn(batch, heads, past, cfg.v_head_dim, generator=gen))
    return (*args, *kv)
