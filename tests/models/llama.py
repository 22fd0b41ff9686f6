"""A Llama-family decoder in plain PyTorch, and the published configurations the zoo exports it at.

The module follows Hugging Face transformers' modeling_llama.py / modeling_qwen2.py (LlamaForCausalLM,
Qwen2ForCausalLM) op for op, with eager attention, so that the ONNX graph shows what an eager training
step runs:

  - RMSNorm: x * rsqrt(mean(x^2, -1) + eps) * weight (LlamaRMSNorm; in float32 its casts are no-ops);
  - rotary position embeddings (LlamaRotaryEmbedding / apply_rotary_pos_emb / rotate_half):
    inv_freq = 1 / theta^(arange(0, head_dim, 2) / head_dim), computed in forward from constants
    (HF registers it as a non-persistent buffer: it is not a parameter and not in the checkpoint, and
    computing it here keeps it out of the initializers of the training export), freqs = positions ⊗ inv_freq,
    cos/sin of cat(freqs, freqs) shared by every layer, q·cos + rotate_half(q)·sin;
  - grouped-query attention: k and v have num_key_value_heads heads and are repeated to num_attention_heads
    as HF's repeat_kv does (x[:, :, None].expand(b, kv, n_rep, s, d).reshape(b, kv·n_rep, s, d));
    scores = q·kᵀ / √head_dim + causal mask, softmax (HF's runs in float32, as this module does), ·v, o_proj;
  - SwiGLU MLP: down_proj(silu(gate_proj(x)) * up_proj(x)), no biases;
  - pre-norm decoder layers, final RMSNorm, lm_head (untied unless the config ties it to embed_tokens);
  - attention_bias=True gives q/k/v projection biases (Qwen2; o_proj has none there either);
  - qk_norm=True gives Qwen3's q_norm and k_norm (RMSNorm over head_dim on q and k before rotary);
  - lora=LoraConfig(...) makes the targeted projections PEFT LoRA layers (LoraLinear) and freezes the rest.

Not modelled, because they change no shape and no memory of a training step: rope scaling ("llama3"
rope_type of Llama 3.1/3.2 rescales inv_freq's values), Mistral-7B-v0.1's sliding window of 4096 (a
different mask with the same seq × seq shape in eager attention), dropout (0.0 in every config here).
Llama is the full-sequence forward a training step or a prefill runs, without a KV cache.
LlamaWithCache is the same decoder with HF's DynamicCache as optimum's ONNX export spells it: inputs
input_ids (batch, new), attention_mask (batch, past + new) of ones and zeros, position_ids (batch, new) and,
with past=True, past_key_values.{i}.key / .value (batch, kv_heads, past, head_dim); outputs logits and
present.{i}.key / .value (batch, kv_heads, past + new, head_dim), the keys after rotary and before repeat_kv
(HF's cache stores them so). The mask is HF's 4-D causal mask with padding (_prepare_4d_causal_attention_mask):
query i sits at position past + i and sees key j <= past + i whose attention_mask is 1, the others get
float32's minimum added.

Parameter names are HF's (embed_tokens.weight, layers.N.self_attn.q_proj.weight, ..., lm_head.weight)
without the `model.` prefix, so that regexes written for PEFT targets (q_proj, v_proj, ...) match.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """The fields of a Hugging Face config.json that determine the graph (names as in config.json)."""
    name: str
    source: str  # where the numbers come from
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    attention_bias: bool = False  # q/k/v biases (Qwen2: always on)
    # HF LlamaConfig's other knobs, off in every config above: o_proj's bias (LlamaAttention takes
    # bias=config.attention_bias for all four projections), gate/up/down biases (mlp_bias), and a head_dim that is
    # not hidden_size / num_attention_heads (LlamaConfig.head_dim).
    o_proj_bias: bool = False
    mlp_bias: bool = False
    head_dim_override: Optional[int] = None
    # Qwen3 (transformers models/qwen3/modeling_qwen3.py, Qwen3Attention): q_norm and k_norm, RMSNorms over
    # head_dim, on q and k after their view to heads and before the transpose and rotary. Off in the zoo.
    qk_norm: bool = False

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.hidden_size // self.num_attention_heads

    def parameter_count(self) -> int:
        """Hand count from the config: embedding V·h; per layer q h·h, k and v h·(kv·hd) each, o h·h (plus
        q/k/v biases h + 2·kv·hd with attention_bias), gate/up/down 3·h·ffn, two RMSNorm weights 2h (and q_norm,
        k_norm 2·hd with qk_norm);
        final norm h; lm_head V·h unless tied."""
        h, ffn, kv = self.hidden_size, self.intermediate_size, self.num_key_value_heads * self.head_dim
        q = self.num_attention_heads * self.head_dim
        layer = 2 * h * q + 2 * h * kv + 3 * h * ffn + 2 * h
        if self.attention_bias:
            layer += q + 2 * kv
        layer += h if self.o_proj_bias else 0
        layer += 2 * ffn + h if self.mlp_bias else 0
        layer += 2 * self.head_dim if self.qk_norm else 0
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head


# Published configurations: each from the model's config.json on the Hugging Face Hub, as published by the
# model's authors (the URL in `source`). head_dim is hidden_size / num_attention_heads in every one.
CONFIGS: Dict[str, LlamaConfig] = {c.name: c for c in [
    LlamaConfig("llama3_2_1b", "https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json",
                hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=True),
    LlamaConfig("llama3_2_3b", "https://huggingface.co/meta-llama/Llama-3.2-3B/blob/main/config.json",
                hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
                num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=True),
    LlamaConfig("llama3_1_8b", "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
                hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False),
    LlamaConfig("mistral_7b", "https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json",
                hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                num_key_value_heads=8, vocab_size=32000, rope_theta=10000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False),
    LlamaConfig("llama3_1_70b", "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json",
                hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False),
    LlamaConfig("qwen2_7b", "https://huggingface.co/Qwen/Qwen2-7B/blob/main/config.json",
                hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
                num_key_value_heads=4, vocab_size=152064, rope_theta=1000000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=False, attention_bias=True),
    # The tiny sizes, for tests and the CPU ground truth: made up here, shaped like the real ones (GQA with
    # 2 query heads per kv head, ffn = 8/3·h rounded up to a multiple of 32, as Llama's reference code sizes
    # it with its multiple_of; untied head).
    LlamaConfig("llama_tiny", "made up (tests/models/llama.py)",
                hidden_size=128, intermediate_size=352, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=1000, rope_theta=10000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False),
    LlamaConfig("qwen2_tiny", "made up (tests/models/llama.py)",
                hidden_size=128, intermediate_size=352, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=1000, rope_theta=1000000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=False, attention_bias=True),
]}

def lm_head(hidden: int, vocab: int, embedding: nn.Embedding, tied: bool, device=None) -> nn.Linear:
    """The causal LM's output layer, nn.Linear(hidden, vocab, bias=False); tied, its weight is the embedding's
    Parameter (transformers' PreTrainedModel.tie_weights: output_embeddings.weight = input_embeddings.weight), so
    the export names its nodes /lm_head/... and reads the one initializer, embed_tokens.weight (torch.onnx keeps a
    shared parameter under its first name)."""
    head = nn.Linear(hidden, vocab, bias=False, device=device)
    if tied:
        head.weight = embedding.weight
    return head


@dataclasses.dataclass(frozen=True)
class LoraConfig:
    """The fields of PEFT's LoraConfig that shape the graph (peft/tuners/lora/config.py), with PEFT's
    defaults: r=8, lora_alpha=8, lora_dropout=0.0, and q_proj/v_proj, PEFT's default target modules for
    Llama (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING)."""
    r: int = 8
    lora_alpha: int = 8
    lora_dropout: float = 0.0
    target_modules: Tuple[str, ...] = ("q_proj", "v_proj")

    def parameter_count(self, cfg: LlamaConfig) -> int:
        """A: in·r and B: r·out for every targeted projection of every layer."""
        h, kv = cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim
        shapes = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
                  "gate_proj": (h, cfg.intermediate_size), "up_proj": (h, cfg.intermediate_size),
                  "down_proj": (cfg.intermediate_size, h)}
        per_layer = sum(self.r * (shapes[t][0] + shapes[t][1]) for t in self.target_modules)
        return cfg.num_hidden_layers * per_layer


LORA_DEFAULT = LoraConfig()
# PEFT's target_modules="all-linear" (peft/tuners/tuners_utils.py, _maybe_include_all_linear_layers): every
# nn.Linear but the output layer (lm_head), i.e. the seven projections of each decoder layer.
LORA_ALL_LINEAR = LoraConfig(target_modules=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))


# --------------------------------------------------------------------------------------------------
# The module


class LoraLinear(nn.Module):
    """PEFT's lora.Linear (peft/tuners/lora/layer.py): base_layer(x) + lora_B(lora_A(dropout(x))) * scaling,
    scaling = lora_alpha / r; dropout is nn.Identity at lora_dropout 0. The base layer is frozen; A and B
    train. Names: <proj>.base_layer.weight, <proj>.lora_A.weight, <proj>.lora_B.weight (PEFT inserts its
    adapter name, lora_A.default.weight, which a single-adapter export does not need)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, lora: LoraConfig, device=None):
        super().__init__()
        self.base_layer = nn.Linear(in_features, out_features, bias=bias, device=device)
        self.base_layer.requires_grad_(False)
        self.lora_dropout = nn.Dropout(lora.lora_dropout) if lora.lora_dropout > 0 else nn.Identity()
        self.lora_A = nn.Linear(in_features, lora.r, bias=False, device=device)
        self.lora_B = nn.Linear(lora.r, out_features, bias=False, device=device)
        self.scaling = lora.lora_alpha / lora.r

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def projection(name: str, in_features: int, out_features: int, bias: bool, device, lora: Optional[LoraConfig]):
    if lora is not None and name in lora.target_modules:
        return LoraLinear(in_features, out_features, bias, lora, device)
    return nn.Linear(in_features, out_features, bias=bias, device=device)


class RMSNorm(nn.Module):
    """LlamaRMSNorm: weight * x / sqrt(mean(x^2) + eps), in float32."""

    def __init__(self, hidden: int, eps: float, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, device=device))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def inverse_frequencies(head_dim: int, theta: float, device=None) -> torch.Tensor:
    """LlamaRotaryEmbedding's inv_freq (head_dim / 2 values). It depends on the config only, so the tracer
    folds it (and its unsqueeze) into one constant; export_llama.py computes that constant on the CPU
    when the module is traced on the meta device."""
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))


def rotary_cos_sin(seq: int, head_dim: int, theta: float, device) -> Tuple[torch.Tensor, torch.Tensor]:
    """(seq, head_dim) cos and sin tables of LlamaRotaryEmbedding for positions 0..seq-1."""
    inv_freq = inverse_frequencies(head_dim, theta, device)
    positions = torch.arange(seq, device=device).to(torch.float32)
    freqs = positions.unsqueeze(1) * inv_freq.unsqueeze(0)  # (seq, head_dim / 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


# Shapes: HF reads head_dim and the kv head count from tensor.shape in rotate_half and repeat_kv; here
# they come from the config (and batch, seq from the attention's input, as HF's attention does). The
# tensor ops are the same; the export only has fewer Shape/Gather/Unsqueeze nodes per layer, which keeps
# the 80-layer graphs small.


def rotate_half(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    half = head_dim // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x: torch.Tensor, n_rep: int, b, kv: int, s, d: int) -> torch.Tensor:
    """HF repeat_kv: (b, kv, s, d) -> (b, kv·n_rep, s, d)."""
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


def causal_additive_mask(seq: int, device) -> torch.Tensor:
    """(seq, seq): 0 where key <= query, -inf above the diagonal (as tests/models/zoo.py's GPT)."""
    positions = torch.arange(seq, device=device)
    future = positions.unsqueeze(0) > positions.unsqueeze(1)
    return torch.zeros(seq, seq, device=device).masked_fill(future, float("-inf"))


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, device=None, lora: Optional[LoraConfig] = None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        h, kv, q = cfg.hidden_size, cfg.num_key_value_heads * cfg.head_dim, cfg.num_attention_heads * cfg.head_dim
        self.q_proj = projection("q_proj", h, q, cfg.attention_bias, device, lora)
        self.k_proj = projection("k_proj", h, kv, cfg.attention_bias, device, lora)
        self.v_proj = projection("v_proj", h, kv, cfg.attention_bias, device, lora)
        self.o_proj = projection("o_proj", q, h, cfg.o_proj_bias, device, lora)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:  # Qwen3Attention defines them after o_proj: their parameters come after o_proj's
            self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, device)
            self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps, device)

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False, weights: bool = False):
        """With `cache`, also returns the (key, value) this call leaves in the cache: `past`'s, if given,
        with the new tokens' concatenated after them on the sequence axis (HF DynamicCache.update). With
        `weights`, also returns the probabilities, as transformers' eager attention returns attn_weights."""
        b, s = x.shape[0], x.shape[1]
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim)
        q = (self.q_norm(q) if self.qk_norm else q).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim)
        k = (self.k_norm(k) if self.qk_norm else k).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q, self.head_dim) * sin
        k = k * cos + rotate_half(k, self.head_dim) * sin
        total = s
        if past is not None:
            k, v = torch.cat((past[0], k), dim=2), torch.cat((past[1], v), dim=2)
            total = k.shape[2]
        present = (k, v)
        n_rep = self.heads // self.kv_heads
        k = repeat_kv(k, n_rep, b, self.kv_heads, total, self.head_dim)
        v = repeat_kv(v, n_rep, b, self.kv_heads, total, self.head_dim)
        # One name rebound at each step, as transformers' eager_attention_forward rebinds attn_weights
        # (src/transformers/models/llama/modeling_llama.py at 5dd4a63548857797727ae73eeb6a6e886ea02a3e): each
        # step's input is freed once the next exists, not held by a local until the forward returns. The ops, and
        # so the exported graph, are the same as with separate names.
        probs = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        probs = probs + mask
        probs = torch.softmax(probs, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        if cache:
            return self.o_proj(context), present
        if weights:
            return self.o_proj(context), probs
        return self.o_proj(context)


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig, device=None, lora: Optional[LoraConfig] = None):
        super().__init__()
        h, ffn = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = projection("gate_proj", h, ffn, cfg.mlp_bias, device, lora)
        self.up_proj = projection("up_proj", h, ffn, cfg.mlp_bias, device, lora)
        self.down_proj = projection("down_proj", ffn, h, cfg.mlp_bias, device, lora)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, device=None, lora: Optional[LoraConfig] = None):
        super().__init__()
        # LlamaDecoderLayer.__init__'s registration order (transformers models/llama/modeling_llama.py at
        # 002272831f; Mistral's, Qwen2's and Qwen3's decoder layers the same): self_attn, mlp, then both norms. It is
        # model.parameters()' order, which FSDP's flat parameter and DeepSpeed's flat groups follow, and torch.onnx's
        # initializers (the state dict's order) with it.
        self.self_attn = Attention(cfg, device, lora)
        self.mlp = MLP(cfg, device, lora)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)

    # LlamaDecoderLayer.forward (modeling_llama.py at 5dd4a63548857797727ae73eeb6a6e886ea02a3e) binds
    # `hidden_states, _ = self.self_attn(...)`: the eager attention's weights stay referenced by `_` until the layer
    # returns, through the MLP. True only where a truth measures that binding (bench/cpu_ground_truth/
    # moe_inference.py); the training truths were measured without it. The exported graph is the same either way.
    keeps_attention_weights = False

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        if not cache:
            return self.forward_no_cache(x, cos, sin, mask, self.mlp)
        attended, present = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, cache=True)
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x)), present

    def forward_no_cache(self, x, cos, sin, mask, mlp):
        if not self.keeps_attention_weights:
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
            return x + mlp(self.post_attention_layernorm(x))
        attended, _weights = self.self_attn(self.input_layernorm(x), cos, sin, mask, weights=True)
        x = x + attended
        del attended  # transformers rebinds hidden_states to the residual sum
        return x + mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """LlamaForCausalLM without the KV cache: input_ids (batch, seq) -> logits (batch, seq, vocab).
    `layers` overrides the config's layer count (the stitched exports trace two layers); device="meta"
    builds it without memory for the weights (an 8B or 70B module traces in seconds)."""

    def __init__(self, cfg: LlamaConfig, layers: Optional[int] = None, device=None, lora: Optional[LoraConfig] = None):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, device=device)
        count = cfg.num_hidden_layers if layers is None else layers
        self.layers = nn.ModuleList(DecoderLayer(cfg, device, lora) for _ in range(count))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, device)
        self.lm_head = lm_head(cfg.hidden_size, cfg.vocab_size, self.embed_tokens, cfg.tie_word_embeddings, device)
        if lora is not None:  # PEFT's mark_only_lora_as_trainable: everything but the adapters is frozen
            for name, parameter in self.named_parameters():
                parameter.requires_grad_(".lora_A." in name or ".lora_B." in name)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        return self.lm_head(x)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        seq = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        cos, sin = rotary_cos_sin(seq, self.cfg.head_dim, self.cfg.rope_theta, input_ids.device)
        mask = causal_additive_mask(seq, input_ids.device)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        x = self.norm(x)
        return self.lm_head(x)


def rotary_from_positions(position_ids: torch.Tensor, head_dim: int, theta: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """(batch, 1, new, head_dim) cos and sin at the given positions (LlamaRotaryEmbedding.forward with
    position_ids: inv_freq[None, :, None] @ position_ids[:, None, :], transposed; the same products)."""
    inv_freq = inverse_frequencies(head_dim, theta, position_ids.device)
    freqs = position_ids.unsqueeze(-1).to(torch.float32) * inv_freq.unsqueeze(0)  # (batch, new, head_dim / 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)


def cache_mask(attention_mask: torch.Tensor, new) -> torch.Tensor:
    """(batch, 1, new, past + new) additive mask: HF's causal mask offset by the past length, with the
    padded keys (attention_mask 0) blocked too; blocked entries get float32's minimum (as HF, not -inf,
    so that a fully padded row stays finite)."""
    total = attention_mask.shape[1]
    device = attention_mask.device
    query_positions = torch.arange(new, device=device) + (total - new)
    future = torch.arange(total, device=device).unsqueeze(0) > query_positions.unsqueeze(1)  # (new, total)
    padded = attention_mask[:, None, None, :] == 0  # (batch, 1, 1, total)
    blocked = future[None, None, :, :] | padded
    return blocked.to(torch.float32) * torch.finfo(torch.float32).min


class LlamaWithCache(Llama):
    """LlamaForCausalLM with the KV cache, as optimum exports it (decoder_model.onnx with past=False,
    decoder_with_past_model.onnx with past=True): forward(input_ids, attention_mask, position_ids,
    past_key_values.0.key, past_key_values.0.value, ...) -> (logits, present.0.key, present.0.value, ...)."""

    def __init__(self, cfg: LlamaConfig, past: bool, layers: Optional[int] = None, device=None):
        super().__init__(cfg, layers=layers, device=device)
        self.past = past

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past_kv):
        if len(past_kv) != (2 * len(self.layers) if self.past else 0):
            raise ValueError(f"expected {2 * len(self.layers) if self.past else 0} past tensors, got {len(past_kv)}")
        x = self.embed_tokens(input_ids)
        cos, sin = rotary_from_positions(position_ids, self.cfg.head_dim, self.cfg.rope_theta)
        mask = cache_mask(attention_mask, input_ids.shape[1])
        presents = []
        for i, layer in enumerate(self.layers):
            past = (past_kv[2 * i], past_kv[2 * i + 1]) if self.past else None
            x, present = layer(x, cos, sin, mask, past, cache=True)
            presents.extend(present)
        return (self.head(x), *presents)


def cache_names(layers: int) -> Tuple[list, list]:
    """optimum's names: past_key_values.{i}.key/value in, present.{i}.key/value out."""
    past = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    return past, [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]


def make_cache_inputs(cfg: LlamaConfig, batch: int, new: int, past: int, layers: Optional[int], seed: int,
                      device="cpu", with_past: bool = True) -> Tuple[torch.Tensor, ...]:
    """input_ids, attention_mask (ones), position_ids past..past+new-1, and the past tensors (random)."""
    gen = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, cfg.vocab_size, (batch, new), generator=gen)
    mask = torch.ones(batch, past + new, dtype=torch.int64)
    positions = torch.arange(past, past + new, dtype=torch.int64).unsqueeze(0).expand(batch, new).contiguous()
    count = cfg.num_hidden_layers if layers is None else layers
    kv = [torch.randn(batch, cfg.num_key_value_heads, past, cfg.head_dim, generator=gen)
          for _ in range(2 * count)] if with_past else []
    return tuple(t.to(device) for t in (ids, mask, positions, *kv))


def make_inputs(cfg: LlamaConfig, batch: int, seq: int, seed: int, device="cpu") -> Tuple[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + 1)
    return (torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen).to(device),)


def trainable_parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad)

