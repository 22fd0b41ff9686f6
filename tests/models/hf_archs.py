"""Gemma 2, Gemma 3 (text) and Phi-3 decoders in plain PyTorch, for the config.json graphs' node-for-node test.

Each module follows its Hugging Face modeling code op for op with eager attention, in tests/models/llama.py's style
(shapes from the config, float32 throughout so that the modeling code's dtype casts are no-ops, no dropout since
every config here has 0.0):

Gemma 2 (transformers models/gemma2/modeling_gemma2.py) and Gemma 3 text (models/gemma3/modeling_gemma3.py):
  - the embedding times sqrt(hidden_size) (Gemma2Model.forward's normalizer; Gemma3TextScaledWordEmbedding);
  - RMSNorm scaling by (1 + weight) (Gemma2RMSNorm / Gemma3RMSNorm);
  - four norms per layer: input_layernorm, post_attention_layernorm (on the attention's output, before the
    residual add), pre_feedforward_layernorm, post_feedforward_layernorm (Gemma2DecoderLayer.forward);
  - MLP down_proj(gelu_tanh(gate_proj(x)) * up_proj(x)) (Gemma2MLP with hidden_activation gelu_pytorch_tanh);
  - attention scores times query_pre_attn_scalar ** -0.5 (Gemma2Attention.scaling), then for Gemma 2 the logit
    soft-cap cap * tanh(scores / cap) (eager_attention_forward), then the mask;
  - sliding-window attention on some layers: Gemma 2 on even layers (Gemma2DecoderLayer.is_sliding), Gemma 3 on
    layer_types' "sliding_attention" layers (five of every six); the sliding mask blocks a key unless
    query - sliding_window < key <= query (transformers masking_utils.sliding_window_overlay and
    causal_mask_function);
  - Gemma 3: q_norm and k_norm (Gemma3RMSNorm over head_dim) on q and k after their transpose, before rotary
    (Gemma3Attention.forward); sliding layers' rotary with rope_local_base_freq, full layers' with rope_theta and
    linear rope_scaling's factor (inv_freq / factor: modeling_rope_utils._compute_linear_scaling_rope_parameters);
  - the final logit soft-cap (Gemma2ForCausalLM.forward) where final_logit_softcapping is set; tied head.
Phi-3 (models/phi3/modeling_phi3.py):
  - one qkv_proj whose output is sliced into q, k, v (Phi3Attention.forward), one gate_up_proj whose output is
    chunked in two, up * silu(gate) (Phi3MLP.forward);
  - partial rotary (apply_rotary_pos_emb with rotary_dim = head_dim * partial_rotary_factor: q[..., :rotary_dim]
    rotated, the rest passed through), inv_freq over rotary_dim (compute_default_rope_parameters);
  - every layer windowed when sliding_window is set (Phi3Model.forward: create_sliding_window_causal_mask).
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

import llama


@dataclasses.dataclass(frozen=True)
class ArchConfig:
    """The config.json fields that shape the graph (names as in config.json)."""
    model_type: str  # gemma2 | gemma3_text | phi3
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    sliding_window: Optional[int] = None
    # Gemma
    query_pre_attn_scalar: Optional[float] = None
    attn_logit_softcapping: Optional[float] = None
    final_logit_softcapping: Optional[float] = None
    sliding_window_pattern: int = 6  # gemma3_text: layer l is full when (l + 1) % pattern == 0
    rope_local_base_freq: float = 10000.0  # gemma3_text's sliding layers
    rope_linear_factor: Optional[float] = None  # gemma3_text's full layers: rope_scaling {"rope_type": "linear"}
    attention_bias: bool = False
    # Phi-3
    partial_rotary_factor: float = 1.0

    @property
    def gemma(self) -> bool:
        return self.model_type in ("gemma2", "gemma3_text")

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    def is_sliding(self, layer: int) -> bool:
        if self.sliding_window is None:
            return False
        if self.model_type == "gemma2":
            return layer % 2 == 0
        if self.model_type == "gemma3_text":
            return (layer + 1) % self.sliding_window_pattern != 0
        return True

    def layer_types(self) -> list:
        return ["sliding_attention" if self.is_sliding(l) else "full_attention" for l in range(self.num_hidden_layers)]

    def parameter_count(self) -> int:
        """Hand count: embedding V·h; per layer q, k, v, o (fused or not, the same sizes), gate, up, down, two norms
        (Phi-3) or four (Gemma), Gemma 3's q_norm and k_norm over head_dim; final norm; lm_head unless tied."""
        h, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_attention_heads * hd, self.num_key_value_heads * hd
        layer = 2 * h * q + 2 * h * kv + 3 * h * f + (4 if self.gemma else 2) * h
        layer += (q + 2 * kv + h) if self.attention_bias else 0
        layer += 2 * hd if self.model_type == "gemma3_text" else 0
        return self.vocab_size * h * (1 if self.tie_word_embeddings else 2) + self.num_hidden_layers * layer + h


class GemmaRMSNorm(nn.Module):
    """Gemma2RMSNorm: x * rsqrt(mean(x^2) + eps) * (1 + weight)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        output = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return output * (1.0 + self.weight)


def sliding_additive_mask(seq: int, window: int, device) -> torch.Tensor:
    """(seq, seq): 0 where query - window < key <= query, -inf elsewhere."""
    positions = torch.arange(seq, device=device)
    keys, queries = positions.unsqueeze(0), positions.unsqueeze(1)
    blocked = (keys > queries) | (keys <= queries - window)
    return torch.zeros(seq, seq, device=device).masked_fill(blocked, float("-inf"))


def rotary_cos_sin(seq: int, dim: int, theta: float, factor: Optional[float], device):
    """llama.rotary_cos_sin over `dim` rotary channels, inv_freq divided by a linear rope_scaling factor."""
    inv_freq = llama.inverse_frequencies(dim, theta, device)
    if factor is not None:
        inv_freq = inv_freq / factor
    positions = torch.arange(seq, device=device).to(torch.float32)
    freqs = positions.unsqueeze(1) * inv_freq.unsqueeze(0)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.cfg = cfg
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h, q, kv = cfg.hidden_size, cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        if cfg.model_type == "phi3":  # Phi3Attention.__init__ registers o_proj before qkv_proj
            self.o_proj = nn.Linear(q, h, bias=cfg.attention_bias)
            self.qkv_proj = nn.Linear(h, q + 2 * kv, bias=False)
        else:
            self.q_proj = nn.Linear(h, q, bias=cfg.attention_bias)
            self.k_proj = nn.Linear(h, kv, bias=cfg.attention_bias)
            self.v_proj = nn.Linear(h, kv, bias=cfg.attention_bias)
            self.o_proj = nn.Linear(q, h, bias=cfg.attention_bias)
        if cfg.model_type == "gemma3_text":  # after o_proj in Gemma3Attention: their parameters come after o_proj's
            self.q_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
            self.k_norm = GemmaRMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.scaling = (cfg.query_pre_attn_scalar if cfg.gemma else cfg.head_dim) ** -0.5

    def rotary(self, x, cos, sin):
        rd = self.cfg.rotary_dim
        if rd == self.head_dim:
            return x * cos + llama.rotate_half(x, rd) * sin
        rot, rest = x[..., :rd], x[..., rd:]
        return torch.cat([rot * cos + llama.rotate_half(rot, rd) * sin, rest], dim=-1)

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        """With `cache`, also returns the (key, value) the cache holds after this call: `past`'s with the new
        tokens' concatenated on the sequence axis (llama.Attention's DynamicCache.update; every token kept)."""
        b, s = x.shape[0], x.shape[1]
        hd, q_size, kv_size = self.head_dim, self.heads * self.head_dim, self.kv_heads * self.head_dim
        if self.cfg.model_type == "phi3":
            qkv = self.qkv_proj(x)
            q, k, v = qkv[..., :q_size], qkv[..., q_size:q_size + kv_size], qkv[..., q_size + kv_size:]
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, s, self.heads, hd).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, hd).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, hd).transpose(1, 2)
        if self.cfg.model_type == "gemma3_text":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary(q, cos, sin), self.rotary(k, cos, sin)
        total = s
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
            total = k.shape[2]
        present = (k, v)
        n_rep = self.heads // self.kv_heads
        k = llama.repeat_kv(k, n_rep, b, self.kv_heads, total, hd)
        v = llama.repeat_kv(v, n_rep, b, self.kv_heads, total, hd)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        cap = self.cfg.attn_logit_softcapping
        if cap is not None:
            scores = torch.tanh(scores / cap) * cap
        probs = torch.softmax(scores + mask, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, q_size)
        if cache:
            return self.o_proj(context), present
        return self.o_proj(context)


class MLP(nn.Module):
    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.cfg = cfg
        h, f = cfg.hidden_size, cfg.intermediate_size
        if cfg.model_type == "phi3":
            self.gate_up_proj = nn.Linear(h, 2 * f, bias=False)
        else:
            self.gate_proj = nn.Linear(h, f, bias=False)
            self.up_proj = nn.Linear(h, f, bias=False)
        self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x):
        if self.cfg.model_type == "phi3":
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
            return self.down_proj(up * F.silu(gate))
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ArchConfig, layer: int):
        super().__init__()
        self.cfg = cfg
        norm = (lambda: GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps)) if cfg.gemma else \
            (lambda: llama.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps))
        # Gemma2DecoderLayer / Gemma3DecoderLayer / Phi3DecoderLayer.__init__'s order: self_attn, mlp,
        # input_layernorm, post_attention_layernorm, then Gemma's pre_feedforward_layernorm and
        # post_feedforward_layernorm (model.parameters()' order).
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = norm()
        self.post_attention_layernorm = norm()
        if cfg.gemma:
            self.pre_feedforward_layernorm = norm()
            self.post_feedforward_layernorm = norm()

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        attended = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, cache)
        present = None
        if cache:
            attended, present = attended
        if not self.cfg.gemma:  # Phi3DecoderLayer (resid_pdrop 0)
            x = x + attended
            x = x + self.mlp(self.post_attention_layernorm(x))
        else:
            x = x + self.post_attention_layernorm(attended)
            x = x + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(x)))
        return (x, present) if cache else x


class Decoder(nn.Module):
    """Gemma2ForCausalLM / Gemma3ForCausalLM / Phi3ForCausalLM without the cache: input_ids -> logits."""

    def __init__(self, cfg: ArchConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, l) for l in range(cfg.num_hidden_layers))
        self.norm = GemmaRMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if cfg.gemma else \
            llama.RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = llama.lm_head(cfg.hidden_size, cfg.vocab_size, self.embed_tokens, cfg.tie_word_embeddings)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        cfg, device = self.cfg, input_ids.device
        seq = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        if cfg.gemma:  # Gemma2Model.forward: hidden_states * torch.tensor(hidden_size ** 0.5, dtype)
            x = x * torch.tensor(cfg.hidden_size ** 0.5, dtype=x.dtype)
        sliding = [cfg.is_sliding(l) for l in range(cfg.num_hidden_layers)]
        factor = cfg.rope_linear_factor if cfg.model_type == "gemma3_text" else None
        cos, sin = rotary_cos_sin(seq, cfg.rotary_dim, cfg.rope_theta, factor, device)
        mask = llama.causal_additive_mask(seq, device) if not all(sliding) else None
        local = (cos, sin)
        if cfg.model_type == "gemma3_text" and any(sliding):
            local = rotary_cos_sin(seq, cfg.rotary_dim, cfg.rope_local_base_freq, None, device)
        window = sliding_additive_mask(seq, cfg.sliding_window, device) if any(sliding) else None
        for layer, slides in zip(self.layers, sliding):
            x = layer(x, *local, window) if slides else layer(x, cos, sin, mask)
        x = self.norm(x)
        logits = self.lm_head(x)
        cap = cfg.final_logit_softcapping
        if cap is not None:  # Gemma2ForCausalLM.forward
            logits = torch.tanh(logits / cap) * cap
        return logits


def rotary_at_positions(positions: torch.Tensor, dim: int, theta: float, factor: Optional[float]):
    """(batch, 1, new, dim) cos and sin at `positions` (position_ids.unsqueeze(-1) as float32, computed once for
    both of Gemma 3's tables): llama.rotary_from_positions over `dim` rotary channels, inv_freq divided by a linear
    rope_scaling factor."""
    inv_freq = llama.inverse_frequencies(dim, theta, positions.device)
    if factor is not None:
        inv_freq = inv_freq / factor
    freqs = positions * inv_freq.unsqueeze(0)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)


def cache_masks(attention_mask: torch.Tensor, new, window: Optional[int], full: bool):
    """llama.cache_mask's (batch, 1, new, past + new) causal mask with padded keys blocked (when `full`: some layer
    attends to every past token), and with a window also the sliding one, which blocks a key unless
    query - window < key <= query (transformers masking_utils sliding_window_overlay), the shared parts computed
    once."""
    total = attention_mask.shape[1]
    device = attention_mask.device
    query_positions = torch.arange(new, device=device) + (total - new)
    keys = torch.arange(total, device=device).unsqueeze(0)
    queries = query_positions.unsqueeze(1)
    future = keys > queries  # (new, total)
    padded = attention_mask[:, None, None, :] == 0  # (batch, 1, 1, total)
    lowest = torch.finfo(torch.float32).min
    mask = (future[None, None, :, :] | padded).to(torch.float32) * lowest if full else None
    if window is None:
        return mask, None
    old = keys <= queries - window
    return mask, ((future | old)[None, None, :, :] | padded).to(torch.float32) * lowest


class DecoderWithCache(Decoder):
    """The decoder with its KV cache as optimum exports it (llama.LlamaWithCache's inputs and outputs):
    forward(input_ids, attention_mask, position_ids, past_key_values.0.key, ...) -> (logits, present.0.key, ...),
    every layer's cache holding every token (the sliding layers masked to their window)."""

    def __init__(self, cfg: ArchConfig, past: bool):
        super().__init__(cfg)
        self.past = past

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past_kv):
        cfg = self.cfg
        x = self.embed_tokens(input_ids)
        if cfg.gemma:
            x = x * torch.tensor(cfg.hidden_size ** 0.5, dtype=x.dtype)
        sliding = [cfg.is_sliding(l) for l in range(cfg.num_hidden_layers)]
        factor = cfg.rope_linear_factor if cfg.model_type == "gemma3_text" else None
        positions = position_ids.unsqueeze(-1).to(torch.float32)
        cos, sin = rotary_at_positions(positions, cfg.rotary_dim, cfg.rope_theta, factor)
        local = (cos, sin)
        if cfg.model_type == "gemma3_text" and any(sliding):
            local = rotary_at_positions(positions, cfg.rotary_dim, cfg.rope_local_base_freq, None)
        mask, window = cache_masks(attention_mask, input_ids.shape[1], cfg.sliding_window if any(sliding) else None,
                                   not all(sliding))
        presents = []
        for l, (layer, slides) in enumerate(zip(self.layers, sliding)):
            past = (past_kv[2 * l], past_kv[2 * l + 1]) if self.past else None
            x, present = layer(x, *(local if slides else (cos, sin)), window if slides else mask, past, cache=True)
            presents.extend(present)
        x = self.norm(x)
        logits = self.lm_head(x)
        cap = cfg.final_logit_softcapping
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return (logits, *presents)
