"""Mixture-of-experts decoders in plain PyTorch, for the config.json graphs' node-for-node test (mixtral, qwen2_moe,
qwen3_moe, --graph train, decode and prefill).

Attention, norms, rotary and the head are tests/models/llama.py's (Mixtral's attention is Mistral's, Qwen2-MoE's
Qwen2's with q/k/v biases, Qwen3-MoE's Qwen3's with q_norm / k_norm). The MLP of a sparse layer follows the
modeling code's sparse block op for op (transformers models/mixtral/modeling_mixtral.py MixtralSparseMoeBlock and
MixtralBlockSparseTop2MLP; qwen2_moe/modeling_qwen2_moe.py Qwen2MoeSparseMoeBlock; qwen3_moe/modeling_qwen3_moe.py
Qwen3MoeSparseMoeBlock):
  router_logits = gate(x) over the (batch·seq, hidden) tokens; softmax in float32; top-k; divided by their sum when
  the config normalizes (Mixtral always, Qwen by norm_topk_prob); cast to the hidden dtype; a zeros accumulator;
  per expert, the tokens routed to it gathered (hidden_states[None, top_x].reshape(-1, hidden)), its SwiGLU MLP
  (Mixtral w2(silu(w1(x)) * w3(x)), Qwen down_proj(silu(gate_proj(x)) * up_proj(x))), times each token's routing
  weight, index_add_ back; Qwen2-MoE adds its shared expert times sigmoid(shared_expert_gate(x)).

One change, the one that makes the graph's shapes static: which tokens an expert receives. The modeling code finds
them with torch.where over a one-hot of the top-k choices, whose length depends on the router's values. Here the
(token, slot) pairs are dealt to the experts in turn ("balanced" routing, memplan's rule): pair p = token·k + slot
goes to expert p mod E, so expert e receives the pairs e, e + E, e + 2E, ...: ceil((N·k − e) / E) of them for N
tokens, i.e. N·k / E rounded up for the first (N·k mod E) experts and down for the rest; every pair is routed once.
A router can choose exactly this (k <= E: a token's k pairs go to k distinct experts), so it is a routing the
modeling code can meet, with the same tensors at the same sizes. "worst" routing (memplan's --moe-routing worst):
every token picks experts 0..k-1 (slot j to expert j), each receiving all N tokens, the most one expert can (top-k
picks distinct experts; the modeling code drops none), the other experts none (an empty slice [0:0]). In both,
what is gone is the one-hot mask (E, k, N) and torch.where's index pair, which are int64 bookkeeping rather than
activations. The routing weight of a pair is the
top-k weight of that (token, slot).

decoder_with_cache is the same decoder with the KV cache as llama.LlamaWithCache holds it (optimum's
decoder_model.onnx / decoder_with_past_model.onnx, the config.json's --graph prefill / decode): only the attention
changes; the sparse block routes the new tokens' batch·new (token, slot) pairs by the same rule.

Decoder layer l is sparse unless it is in mlp_only_layers or (l + 1) % decoder_sparse_step != 0 (Qwen2-MoE, Qwen3-MoE);
a dense layer has the model's dense MLP (intermediate_size).
"""
from __future__ import annotations

import dataclasses
from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

import llama


@dataclasses.dataclass(frozen=True)
class MoeConfig:
    model_type: str  # mixtral | qwen2_moe | qwen3_moe
    base: llama.LlamaConfig  # attention, norms, vocabulary; intermediate_size: the dense MLP's (Mixtral: experts')
    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int  # an expert's width (Mixtral: intermediate_size)
    norm_topk_prob: bool = True
    shared_expert_intermediate_size: int = 0  # qwen2_moe
    decoder_sparse_step: int = 1
    mlp_only_layers: Tuple[int, ...] = ()
    routing: str = "balanced"  # memplan's --moe-routing: balanced | worst (module docstring)

    def sparse(self, layer: int) -> bool:
        return layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0

    def parameter_count(self) -> int:
        """Hand count: the dense model's count with each sparse layer's MLP (3·h·f) replaced by the router h·E, the
        experts E·3·h·f_e, and Qwen2-MoE's shared expert 3·h·f_s and its gate h."""
        h, base = self.base.hidden_size, self.base.parameter_count()
        moe = h * self.num_experts + self.num_experts * 3 * h * self.moe_intermediate_size
        if self.shared_expert_intermediate_size:
            moe += 3 * h * self.shared_expert_intermediate_size + h
        sparse = sum(self.sparse(l) for l in range(self.base.num_hidden_layers))
        return base + sparse * (moe - 3 * h * self.base.intermediate_size)


class Expert(nn.Module):
    """MixtralBlockSparseTop2MLP (w1, w2, w3, registered in that order) or Qwen2MoeMLP (gate_proj, up_proj,
    down_proj)."""

    def __init__(self, h: int, f: int, mixtral: bool):
        super().__init__()
        self.mixtral = mixtral
        if mixtral:
            self.w1 = nn.Linear(h, f, bias=False)
            self.w2 = nn.Linear(f, h, bias=False)
            self.w3 = nn.Linear(h, f, bias=False)
        else:
            self.gate_proj = nn.Linear(h, f, bias=False)
            self.up_proj = nn.Linear(h, f, bias=False)
            self.down_proj = nn.Linear(f, h, bias=False)

    def forward(self, x):
        if self.mixtral:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoeBlock(nn.Module):
    def __init__(self, cfg: MoeConfig):
        super().__init__()
        h = cfg.base.hidden_size
        self.hidden_dim, self.num_experts, self.top_k = h, cfg.num_experts, cfg.num_experts_per_tok
        self.norm_topk_prob = cfg.model_type == "mixtral" or cfg.norm_topk_prob
        # MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock.__init__'s order: the router (gate),
        # the experts, then Qwen2-MoE's shared_expert and shared_expert_gate.
        self.gate = nn.Linear(h, cfg.num_experts, bias=False)
        mixtral = cfg.model_type == "mixtral"
        self.experts = nn.ModuleList(Expert(h, cfg.moe_intermediate_size, mixtral) for _ in range(cfg.num_experts))
        self.worst = cfg.routing == "worst"
        self.shared = cfg.model_type == "qwen2_moe"
        if self.shared:
            self.shared_expert = Expert(h, cfg.shared_expert_intermediate_size, False)
            self.shared_expert_gate = nn.Linear(h, 1, bias=False)

    def forward(self, x):
        hidden_states = x.view(-1, self.hidden_dim)
        router_logits = self.gate(hidden_states)
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
        routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        routing_weights = routing_weights.to(hidden_states.dtype)
        final_hidden_states = dispatch(self, hidden_states, routing_weights)
        if self.shared:
            shared_expert_output = self.shared_expert(hidden_states)
            shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
            final_hidden_states = final_hidden_states + shared_expert_output
        return final_hidden_states.view_as(x)


def dispatch(block: nn.Module, hidden_states: torch.Tensor, routing_weights: torch.Tensor,
             weights_dtype_accumulator: bool = False) -> torch.Tensor:
    """The sparse block's expert loop on (N, hidden) tokens and their (N, k) routing weights, by the block's rule
    (module docstring: balanced or worst); `block` has experts, num_experts, top_k, hidden_dim and worst. Shared by
    hf_deepseek.py's DeepseekV3MoE, which passes `weights_dtype_accumulator`: DeepseekV3MoE.moe's accumulator
    (torch.zeros_like(hidden_states, dtype=topk_weights.dtype)), each weighted output added without a cast, and the
    sum cast back once (final_hidden_states.type(hidden_states.dtype))."""
    if weights_dtype_accumulator:
        final_hidden_states = torch.zeros_like(hidden_states, dtype=routing_weights.dtype)
    else:
        final_hidden_states = torch.zeros_like(hidden_states)
    # Balanced routing (module docstring): pair p = token·k + slot goes to expert p mod E.
    pair_weights = routing_weights.reshape(-1)
    pairs = torch.arange(pair_weights.shape[0], device=hidden_states.device)
    pair_token = torch.div(pairs, block.top_k, rounding_mode="trunc")
    for expert_idx, expert_layer in enumerate(block.experts):
        if not block.worst:
            picked = slice(expert_idx, None, block.num_experts)
        else:
            picked = slice(expert_idx, None, block.top_k) if expert_idx < block.top_k else slice(0, 0)
        top_x = pair_token[picked]
        current_state = hidden_states[None, top_x].reshape(-1, block.hidden_dim)
        current_hidden_states = expert_layer(current_state) * pair_weights[picked, None]
        if not weights_dtype_accumulator:
            current_hidden_states = current_hidden_states.to(hidden_states.dtype)
        final_hidden_states.index_add_(0, top_x, current_hidden_states)
    if weights_dtype_accumulator:
        return final_hidden_states.type(hidden_states.dtype)
    return final_hidden_states


class MoeDecoderLayer(nn.Module):
    keeps_attention_weights = False  # llama.DecoderLayer's: the weights held until the layer returns when True

    def __init__(self, cfg: MoeConfig, layer: int):
        super().__init__()
        base = cfg.base
        # MixtralDecoderLayer / Qwen2MoeDecoderLayer / Qwen3MoeDecoderLayer.__init__'s order: self_attn, the MLP
        # (block_sparse_moe or mlp), input_layernorm, post_attention_layernorm (model.parameters()' order).
        self.self_attn = llama.Attention(base)
        self.mlp_name = "block_sparse_moe" if cfg.model_type == "mixtral" else "mlp"
        setattr(self, self.mlp_name, SparseMoeBlock(cfg) if cfg.sparse(layer) else llama.MLP(base))
        self.input_layernorm = llama.RMSNorm(base.hidden_size, base.rms_norm_eps)
        self.post_attention_layernorm = llama.RMSNorm(base.hidden_size, base.rms_norm_eps)

    def forward(self, x, cos, sin, mask, past=None, cache: bool = False):
        """llama.DecoderLayer.forward's two forms: without `cache` the output, with it (output, present)."""
        if not cache:
            return llama.DecoderLayer.forward_no_cache(self, x, cos, sin, mask, getattr(self, self.mlp_name))
        attended, present = self.self_attn(self.input_layernorm(x), cos, sin, mask, past, cache=True)
        x = x + attended
        return x + getattr(self, self.mlp_name)(self.post_attention_layernorm(x)), present


def decoder(cfg: MoeConfig) -> llama.Llama:
    """llama.Llama (embedding, rotary, mask, final norm, head) with the MoE layers."""
    module = llama.Llama(cfg.base)
    module.layers = nn.ModuleList(MoeDecoderLayer(cfg, l) for l in range(cfg.base.num_hidden_layers))
    return module


def decoder_with_cache(cfg: MoeConfig, past: bool) -> llama.LlamaWithCache:
    """llama.LlamaWithCache (optimum's inputs and outputs: past=True decode, past=False prefill) with the MoE
    layers."""
    module = llama.LlamaWithCache(cfg.base, past=past)
    module.layers = nn.ModuleList(MoeDecoderLayer(cfg, l) for l in range(cfg.base.num_hidden_layers))
    return module
