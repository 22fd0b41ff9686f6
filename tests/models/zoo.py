"""The memplan model zoo: PyTorch modules whose ONNX exports are the project's real-model fixtures.

`build_model(name)` returns a `ZooModel` (module, example inputs, dynamic axes, input and output names)
for every model in `MODEL_NAMES`. The torchvision models use `weights=None`; the GPT-style decoder and
BERT-style encoder are written here in plain PyTorch so that their ONNX graphs show the patterns memplan
must recognise: attention as MatMul / scale / mask Add / Softmax / MatMul, exact (erf) GELU, LayerNorm,
tied input/output embeddings, learned positional embeddings, dynamic "batch" and "seq" dimensions.

Every parameter and buffer is filled with distinct seeded random values (`fill_distinct`), because
torch.onnx merges initializers with identical contents, which default initialisation produces (for
example all-ones LayerNorm weights), and that would make parameter counts in the ONNX file wrong.

Only Debian's /usr/bin/python3 has the torch 1.13 / torchvision 0.14 this file is written for.
"""
from __future__ import annotations

import math
from typing import Dict, List, NamedTuple, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SEED = 20240601

TORCHVISION_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16"]
TEXT_MODELS = ["gpt", "bert", "gpt_tiny"]
MODEL_NAMES = TORCHVISION_MODELS + TEXT_MODELS

# torchvision's published parameter counts (the `num_params` entries of the weight enums'
# meta data in torchvision/models/*.py, e.g. ResNet18_Weights.IMAGENET1K_V1.meta["num_params"]).
TORCHVISION_PUBLISHED_PARAMS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "vit_b_16": 86_567_656,
}

IMAGE_SIZE = 224
NUM_CLASSES = 1000


class ZooModel(NamedTuple):
    module: nn.Module
    example_inputs: Tuple[torch.Tensor, ...]
    dynamic_axes: Dict[str, Dict[int, str]]
    input_names: List[str]
    output_names: List[str]


# --------------------------------------------------------------------------------------------------
# Transformer building blocks


class TransformerConfig(NamedTuple):
    layers: int
    d_model: int
    heads: int
    vocab: int
    max_positions: int
    causal: bool


GPT_CONFIG = TransformerConfig(layers=12, d_model=768, heads=12, vocab=50257, max_positions=1024, causal=True)
GPT_TINY_CONFIG = TransformerConfig(layers=2, d_model=128, heads=4, vocab=1000, max_positions=512, causal=True)
BERT_CONFIG = TransformerConfig(layers=12, d_model=768, heads=12, vocab=30522, max_positions=512, causal=False)


def causal_additive_mask(seq: int, device: torch.device) -> torch.Tensor:
    """(seq, seq) float mask: 0 where key <= query, -inf above the diagonal (future keys)."""
    positions = torch.arange(seq, device=device)
    future = positions.unsqueeze(0) > positions.unsqueeze(1)  # [query, key]
    return torch.zeros(seq, seq, device=device).masked_fill(future, float("-inf"))


class SelfAttention(nn.Module):
    """Multi-head self-attention written out op by op (no fused kernel), as eager GPT-2/BERT code does:
    QKV projection, Q·Kᵀ (MatMul), scale (Mul), additive mask (Add), Softmax, ·V (MatMul), output projection."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.heads = heads
        self.head_dim = d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        batch, seq, d_model = x.size(0), x.size(1), x.size(2)
        q, k, v = self.qkv(x).split(d_model, dim=2)
        q = q.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)  # (batch, heads, seq, head_dim)
        k = k.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        scores = scores + additive_mask
        probs = torch.softmax(scores, dim=-1)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(batch, seq, d_model)
        return self.proj(context)


class MLP(nn.Module):
    def __init__(self, d_model: int):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))  # exact (erf) GELU, as GPT-2/BERT


class PreNormBlock(nn.Module):
    """GPT-2 block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg.d_model, cfg.heads)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg.d_model)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), additive_mask)
        return x + self.mlp(self.ln_2(x))


class PostNormBlock(nn.Module):
    """BERT block: ln(x + attn(x)), then ln(x + mlp(x))."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.attn = SelfAttention(cfg.d_model, cfg.heads)
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg.d_model)
        self.ln_2 = nn.LayerNorm(cfg.d_model)

    def forward(self, x: torch.Tensor, additive_mask: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.attn(x, additive_mask))
        return self.ln_2(x + self.mlp(x))


class GPT(nn.Module):
    """GPT-2-style decoder: token + learned position embeddings, pre-norm causal blocks, final LayerNorm,
    logits through the token embedding matrix (tied). No dropout: memory measurements stay deterministic
    and the graph is the same in train and eval mode."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        assert cfg.causal
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.blocks = nn.ModuleList(PreNormBlock(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        return self.wte(input_ids) + self.wpe(positions)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.wte.weight)  # tied output embedding

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        mask = causal_additive_mask(input_ids.size(1), input_ids.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


class BERT(nn.Module):
    """BERT-base-style encoder with its masked-LM head: word + learned position embeddings, embedding
    LayerNorm, post-norm bidirectional blocks with a padding mask, MLM transform (Linear, GELU, LayerNorm)
    and a decoder tied to the word embeddings plus its own bias. No token-type embeddings, no pooler,
    no dropout."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        assert not cfg.causal
        self.word_embeddings = nn.Embedding(cfg.vocab, cfg.d_model)
        self.position_embeddings = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.ln_embed = nn.LayerNorm(cfg.d_model)
        self.blocks = nn.ModuleList(PostNormBlock(cfg) for _ in range(cfg.layers))
        self.mlm_dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlm_ln = nn.LayerNorm(cfg.d_model)
        self.mlm_bias = nn.Parameter(torch.zeros(cfg.vocab))

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.size(1), device=input_ids.device)
        return self.ln_embed(self.word_embeddings(input_ids) + self.position_embeddings(positions))

    @staticmethod
    def padding_mask(attention_mask: torch.Tensor) -> torch.Tensor:
        """(batch, 1, 1, seq) additive mask: 0 for real tokens, -10000 for padding (as the original BERT)."""
        return (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0

    def head(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mlm_ln(F.gelu(self.mlm_dense(x)))
        return F.linear(x, self.word_embeddings.weight) + self.mlm_bias  # tied decoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        mask = self.padding_mask(attention_mask)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


# --------------------------------------------------------------------------------------------------
# Construction


def fill_distinct(module: nn.Module, seed: int = SEED) -> None:
    """Give every parameter and buffer distinct random values, keeping each kind valid:
    normalisation weights near 1, BatchNorm running_var positive, integer buffers
    (num_batches_tracked) integral and distinct."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for index, (name, tensor) in enumerate(list(module.named_parameters()) + list(module.named_buffers())):
            leaf = name.rsplit(".", 1)[-1]
            if not tensor.is_floating_point():
                tensor.fill_(index + 1)
            elif leaf == "running_var":
                tensor.copy_(torch.rand(tensor.shape, generator=gen) + 0.5)
            elif tensor.dim() == 1 and leaf == "weight":  # BatchNorm/LayerNorm scale
                tensor.copy_(1.0 + 0.1 * torch.randn(tensor.shape, generator=gen))
            else:
                tensor.copy_(0.02 * torch.randn(tensor.shape, generator=gen))


def _torchvision_module(name: str) -> nn.Module:
    return getattr(torchvision.models, name)(weights=None)


def _text_module(name: str) -> nn.Module:
    if name == "gpt":
        return GPT(GPT_CONFIG)
    if name == "gpt_tiny":
        return GPT(GPT_TINY_CONFIG)
    if name == "bert":
        return BERT(BERT_CONFIG)
    raise KeyError(name)


def text_config(name: str) -> TransformerConfig:
    return {"gpt": GPT_CONFIG, "gpt_tiny": GPT_TINY_CONFIG, "bert": BERT_CONFIG}[name]


def is_text(name: str) -> bool:
    return name in TEXT_MODELS


def make_inputs(name: str, batch: int, seq: int = 128, seed: int = SEED) -> Tuple[torch.Tensor, ...]:
    """Inputs of the model at one configuration (seq is ignored by the image models)."""
    gen = torch.Generator().manual_seed(seed + 1)
    if not is_text(name):
        return (torch.randn(batch, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen),)
    input_ids = torch.randint(0, text_config(name).vocab, (batch, seq), generator=gen)
    if name == "bert":
        return (input_ids, torch.ones(batch, seq, dtype=torch.int64))
    return (input_ids,)


def input_names(name: str) -> List[str]:
    if not is_text(name):
        return ["input"]
    return ["input_ids", "attention_mask"] if name == "bert" else ["input_ids"]


def build_model(name: str) -> ZooModel:
    """The module (filled with distinct seeded values, in eval mode), example inputs at batch 2
    (seq 16 for text models), dynamic axes and the ONNX input/output names."""
    if name not in MODEL_NAMES:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(MODEL_NAMES)}")
    torch.manual_seed(SEED)
    module = _text_module(name) if is_text(name) else _torchvision_module(name)
    fill_distinct(module)
    module.eval()
    names = input_names(name)
    if is_text(name):
        axes = {n: {0: "batch", 1: "seq"} for n in names}
        axes["logits"] = {0: "batch", 1: "seq"}
        example = make_inputs(name, batch=2, seq=16)
    else:
        axes = {"input": {0: "batch"}, "logits": {0: "batch"}}
        example = make_inputs(name, batch=2)
    return ZooModel(module, example, axes, names, ["logits"])


def trainable_parameter_count(module: nn.Module) -> int:
    """Elements of the distinct trainable parameters (tied weights counted once, as named_parameters does)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def buffer_count(module: nn.Module) -> int:
    """Elements of the registered buffers (BatchNorm running statistics and num_batches_tracked)."""
    return sum(b.numel() for b in module.buffers())
