#!/usr/bin/python3
"""Export small PyTorch modules whose ONNX form hides one PyTorch op behind several nodes (or one node that
PyTorch runs differently), for the op-fusion tests (tests/cost_models/patterns_test.cc).

    /usr/bin/python3 tests/models/export_patterns.py            # writes tests/models/patterns/*.onnx
    /usr/bin/python3 tests/models/export_patterns.py --list     # print each export's node types

Each module is tiny (feature sizes 8 to 16), so the weights stay inline (a few KiB per file). Exports run as
tests/models/export_zoo.py runs its training exports: constant folding off (every parameter stays the
module's own tensor), train mode kept for training patterns (TrainingMode.TRAINING), eval mode
(TrainingMode.EVAL, constant folding on, as an inference export) for the `_eval` ones. The batch dimension
is dynamic ("batch"), the sequence ones fixed, so a test picks the batch.

torch 1.13 exports up to opset 17 and has no F.scaled_dot_product_attention (added in 2.0), so attention
is nn.MultiheadAttention's math path (softmax(QK^T/sqrt(d) + mask) V), with and without masks.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Callable, List, NamedTuple, Tuple

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "patterns")
BATCH = 2  # the example batch (dynamic in the export)
SEQ = 5
FEATURES = 8


class Pattern(NamedTuple):
    stem: str
    build: Callable[[], Tuple[nn.Module, Tuple[torch.Tensor, ...]]]
    opset: int
    training: bool


def linear(bias: bool, rank3: bool):
    def build():
        x = torch.randn(BATCH, SEQ, FEATURES) if rank3 else torch.randn(BATCH, FEATURES)
        return nn.Linear(FEATURES, 16, bias=bias), (x,)
    return build


def after_linear(module: Callable[[], nn.Module]):
    """nn.Linear(8, 8) then the module: the Linear's parameters make the module's input require a grad, as
    in a network (alone, a parameterless op has nothing to train)."""
    def build():
        return nn.Sequential(nn.Linear(FEATURES, FEATURES), module()), (torch.randn(BATCH, SEQ, FEATURES),)
    return build


class Mha(nn.Module):
    """nn.MultiheadAttention self-attention, batch first, with the masks the flags ask for."""

    def __init__(self, attn_mask: bool, key_padding_mask: bool, dropout: float):
        super().__init__()
        self.mha = nn.MultiheadAttention(FEATURES, 2, dropout=dropout, batch_first=True)
        self.use_attn_mask = attn_mask
        self.use_kpm = key_padding_mask

    def forward(self, x, *masks):
        kwargs = {"need_weights": False}
        masks = list(masks)
        if self.use_attn_mask:
            kwargs["attn_mask"] = masks.pop(0)
        if self.use_kpm:
            kwargs["key_padding_mask"] = masks.pop(0)
        return self.mha(x, x, x, **kwargs)[0]


def mha(attn_mask: bool, key_padding_mask: bool, dropout: float = 0.0):
    def build():
        inputs = [torch.randn(BATCH, SEQ, FEATURES)]
        if attn_mask:  # causal, float additive (-inf above the diagonal)
            inputs.append(torch.triu(torch.full((SEQ, SEQ), float("-inf")), diagonal=1))
        if key_padding_mask:  # bool, True = padding
            kpm = torch.zeros(BATCH, SEQ, dtype=torch.bool)
            kpm[:, -1] = True
            inputs.append(kpm)
        return Mha(attn_mask, key_padding_mask, dropout), tuple(inputs)
    return build


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, FEATURES, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(FEATURES)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


def conv_bn():
    return Conv(), (torch.randn(BATCH, 3, 6, 6),)


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(32, FEATURES)

    def forward(self, ids):
        return self.emb(ids)


def embedding():
    return Embed(), (torch.randint(0, 32, (BATCH, SEQ)),)


class Ce(nn.Module):
    """nn.Linear(8, 10) then F.cross_entropy: the loss inside the graph (loss=none)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(FEATURES, 10)

    def forward(self, x, target):
        return F.cross_entropy(self.fc(x), target)


def cross_entropy():
    return Ce(), (torch.randn(BATCH, FEATURES), torch.randint(0, 10, (BATCH,)))


class RmsNorm(nn.Module):
    """LlamaRMSNorm's arithmetic (transformers modeling_llama.py): weight * (x * torch.rsqrt(mean(x^2) + eps))."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(FEATURES))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class TopkWeights(nn.Module):
    """A mixture of experts' routing weights as Mixtral and Qwen-MoE take them: torch.topk(softmax(logits), 2)."""

    def forward(self, x):
        return torch.topk(F.softmax(x, dim=-1), 2, dim=-1)[0]


class GatherWeights(nn.Module):
    """DeepseekV3TopkRouter's: the top-2 indices of sigmoid scores, then scores.gather(-1, indices)."""

    def forward(self, x):
        scores = x.sigmoid()
        return scores.gather(-1, torch.topk(scores, 2, dim=-1)[1])


def patterns() -> List[Pattern]:
    p = [
        Pattern("linear_train", linear(True, False), 17, True),
        Pattern("linear_nobias_train", linear(False, False), 17, True),
        Pattern("linear3d_train", linear(True, True), 17, True),
        Pattern("linear3d_nobias_train", linear(False, True), 17, True),
        Pattern("linear_eval", linear(True, False), 17, False),
        Pattern("linear3d_eval", linear(True, True), 17, False),
        Pattern("linear3d_nobias_eval", linear(False, True), 17, False),
        Pattern("layernorm_op13_train", after_linear(lambda: nn.LayerNorm(FEATURES)), 13, True),
        Pattern("layernorm_op17_train", after_linear(lambda: nn.LayerNorm(FEATURES)), 17, True),
        Pattern("layernorm_noaffine_op13_train", after_linear(lambda: nn.LayerNorm(FEATURES, elementwise_affine=False)), 13, True),
        Pattern("gelu_op13_train", after_linear(nn.GELU), 13, True),
        Pattern("gelu_op17_train", after_linear(nn.GELU), 17, True),
        Pattern("gelu_tanh_op13_train", after_linear(lambda: nn.GELU(approximate="tanh")), 13, True),
        Pattern("gelu_tanh_op17_train", after_linear(lambda: nn.GELU(approximate="tanh")), 17, True),
        Pattern("silu_train", after_linear(nn.SiLU), 17, True),
        Pattern("softmax_train", after_linear(lambda: nn.Softmax(dim=-1)), 17, True),
        Pattern("log_softmax_train", after_linear(lambda: nn.LogSoftmax(dim=-1)), 17, True),
        Pattern("cross_entropy_train", cross_entropy, 17, True),
        Pattern("mha_train", mha(False, False), 17, True),
        Pattern("mha_attn_mask_train", mha(True, False), 17, True),
        Pattern("mha_kpm_train", mha(False, True), 17, True),
        Pattern("mha_dropout_train", mha(False, False, 0.1), 17, True),
        Pattern("conv_bn_train", conv_bn, 17, True),
        Pattern("embedding_train", embedding, 17, True),
        Pattern("rms_norm_train", after_linear(RmsNorm), 17, True),
        Pattern("topk_weights_train", after_linear(TopkWeights), 17, True),
        Pattern("gather_weights_train", after_linear(GatherWeights), 17, True),
    ]
    return p


def export(pattern: Pattern) -> onnx.ModelProto:
    torch.manual_seed(0)
    module, inputs = pattern.build()
    module.train(pattern.training)
    names = [f"in{i}" if i else "x" for i in range(len(inputs))]
    dynamic = {n: {0: "batch"} for n, t in zip(names, inputs) if t.dim() > 0 and t.shape[0] == BATCH}
    dynamic["y"] = {0: "batch"} if pattern.stem != "cross_entropy_train" else {}
    buffer = io.BytesIO()
    torch.onnx.export(
        module, inputs, buffer, opset_version=pattern.opset, input_names=names, output_names=["y"],
        dynamic_axes={k: v for k, v in dynamic.items() if v},
        training=torch.onnx.TrainingMode.TRAINING if pattern.training else torch.onnx.TrainingMode.EVAL,
        do_constant_folding=not pattern.training,
    )
    model = onnx.load_model_from_string(buffer.getvalue())
    model.producer_name = "pytorch"
    model.doc_string = f"tests/models/export_patterns.py: {pattern.stem}"
    return model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print each export's node types, write nothing")
    parser.add_argument("--only", nargs="+", metavar="STEM")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    for pattern in patterns():
        if args.only and pattern.stem not in args.only:
            continue
        model = export(pattern)
        if args.list:
            print(f"{pattern.stem}: " + " ".join(n.op_type for n in model.graph.node))
            continue
        path = os.path.join(OUT, pattern.stem + ".onnx")
        onnx.save_model(model, path)
        print(f"{path}: {os.path.getsize(path):,} bytes, {len(model.graph.node)} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
