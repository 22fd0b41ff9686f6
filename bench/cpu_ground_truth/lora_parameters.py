#!/usr/bin/python3
"""moe_tiny (measure.py's MOE_TINY) with transformers 5's grouped_mm experts and LoRA on their stacked parameters as
PEFT's LoraConfig(target_parameters=["experts.gate_up_proj", "experts.down_proj"]) runs it: one fp32 training step
on the CPU against memplan's --lora-rank 2 --lora-targets 'experts\\.(gate_up|down)_proj'; the measurements go to
lora_parameters_truth.json, which tests/accuracy/accuracy.py gates.

    /usr/bin/python3 bench/cpu_ground_truth/lora_parameters.py [--memplan build/memplan]

The experts are grouped_mm.py's (grouped_mm_experts_forward with a _grouped_mm stand-in), its stand-in here keeping
for backward only what derivatives.yaml's _grouped_mm formulas need for the grads asked for (self when mat2 needs a
grad, mat2 when self does: the autograd codegen saves a formula's input only where that grad is computed), as
memplan's rule (cost_models/autograd_rules.cc) and torch's generated _GroupedMmBackward do.

ParamWrapper below re-implements PEFT's (huggingface/peft 5d602fd, 0.20.1.dev0, src/peft/tuners/lora/layer.py
class ParamWrapper) mechanics line for line where memory is concerned:
  - update_layer: lora_A = nn.Linear(in_features, r * num_experts, bias=False), lora_B = nn.Linear(r * num_experts,
    out_features, bias=False), in/out from _get_in_out_features swapped for an [E, out, in] parameter (the base is
    not is_transposed); scaling = lora_alpha / r (lora_alpha 8, as memplan assumes; the value changes no size);
    lora_dropout must be 0 (nn.Identity). float32 adapters on the float32 base (cast_adapter_dtype: no-op).
  - get_delta_weight: weight_A.reshape(E, -1, in), weight_B.reshape(out, -1, E),
    torch.einsum("o r e, e r i -> e o i", weight_B, weight_A) * scaling, .to(param.device, param.dtype).
  - _activate_lora: the delta computed first, then nn.utils.parametrize.register_parametrization(base_layer, name,
    _LoraParameterProxy(delta_weight)) with the original's requires_grad restored (False: the base is frozen), and
    the base layer's forward run inside nn.utils.parametrize.cached(); remove_parametrizations(base_layer, name,
    leave_parametrized=False) after it. _LoraParameterProxy.forward(W) = W + self.delta_weight.
  - Two target parameters on one module nest: the second ParamWrapper wraps the first (PEFT's Note in the class
    docstring), so the outer one's delta is computed first and both are registered around the experts' forward.
"""
import argparse
import os
import sys
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import grouped_mm  # noqa: E402
import llama  # noqa: E402  (on sys.path through measure)
import measure  # noqa: E402
import zoo  # noqa: E402

OUT = os.path.join(HERE, "lora_parameters_truth.json")
# (batch, seq): at batch 1 and 8 tokens the deltas are a larger share of the peak than the activations, so when and
# for how long each is held (made before the experts' forward, the outer wrapper's first, held until it returns)
# shows in the peak.
ROWS = ((1, 8), (2, 64), (8, 64))
RANK = 2
TARGETS = "experts\\.(gate_up|down)_proj"


class GroupedMm(torch.autograd.Function):
    """torch._grouped_mm(a [S, K], b [G, K, N], offs [G] int32) -> [S, N], its memory only; keeps a only when b
    needs a grad and b only when a does."""

    @staticmethod
    def forward(ctx, a, b, offs):
        out = a.new_empty((a.shape[0], b.shape[2]))
        start = 0
        for g, end in enumerate(offs.tolist()):
            if end > start:
                torch.matmul(a[start:end], b[g], out=out[start:end])
            start = end
        need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        ctx.save_for_backward(a if need_b else None, b if need_a else None, offs)
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, offs = ctx.saved_tensors
        grad_a = grad.new_zeros((grad.shape[0], b.shape[1])) if ctx.needs_input_grad[0] else None
        grad_b = None
        if ctx.needs_input_grad[1]:
            grad_b = grad.new_zeros((offs.shape[0], a.shape[1], grad.shape[1]))
        start = 0
        for g, end in enumerate(offs.tolist()):
            if end > start:
                if grad_a is not None:
                    torch.matmul(grad[start:end], b[g].t(), out=grad_a[start:end])
                if grad_b is not None:
                    torch.matmul(a[start:end].t(), grad[start:end], out=grad_b[g])
            start = end
        return grad_a, grad_b, None


class LoraParameterProxy(nn.Module):
    """PEFT's _LoraParameterProxy (float32 parameter: no fp8 upcast)."""

    def __init__(self, delta_weight):
        super().__init__()
        self.delta_weight = delta_weight

    def forward(self, W):
        return W + self.delta_weight


class ParamWrapper(nn.Module):
    """PEFT's ParamWrapper on one 3-D parameter of `base_layer` (the experts module, or another ParamWrapper)."""

    def __init__(self, base_layer, parameter_name, r, lora_alpha=8):
        super().__init__()
        self.base_layer = base_layer
        self.parameter_name = parameter_name
        num_experts, in_features, out_features = self.get_param().shape
        in_features, out_features = out_features, in_features  # not is_transposed: [E, out, in]
        self.num_experts = num_experts
        self.lora_A = nn.Linear(in_features, r * num_experts, bias=False)
        self.lora_B = nn.Linear(r * num_experts, out_features, bias=False)
        self.scaling = lora_alpha / r

    def get_base_layer(self):
        layer = self.base_layer
        while isinstance(layer, ParamWrapper):
            layer = layer.base_layer
        return layer

    def get_param(self):
        return getattr(self.get_base_layer(), self.parameter_name)

    def get_delta_weight(self):
        weight_A = self.lora_A.weight.reshape(self.num_experts, -1, self.lora_A.weight.shape[-1])
        weight_B = self.lora_B.weight.reshape(self.lora_B.weight.shape[0], -1, self.num_experts)
        delta_weight = torch.einsum("o r e, e r i -> e o i", weight_B, weight_A) * self.scaling
        param = self.get_param()
        return delta_weight.to(param.device, param.dtype)

    @contextmanager
    def _activate_lora(self):
        delta_weight = self.get_delta_weight()
        base_layer = self.get_base_layer()
        requires_grad_before = self.get_param().requires_grad
        parametrize.register_parametrization(base_layer, self.parameter_name, LoraParameterProxy(delta_weight))
        base_layer.parametrizations[self.parameter_name].original.requires_grad_(requires_grad_before)
        try:
            with parametrize.cached():
                yield
        finally:
            parametrize.remove_parametrizations(base_layer, self.parameter_name, leave_parametrized=False)

    def forward(self, *args):
        with self._activate_lora():
            return self.base_layer(*args)


class Experts(grouped_mm.GroupedExperts):
    """grouped_mm.py's experts on the stand-in above; self.gate_up_proj read first at the top
    (grouped_mm_experts_forward: num_experts = self.gate_up_proj.size(0)), as transformers reads it."""

    def forward(self, hidden_states, top_k_index, top_k_weights):
        self.gate_up_proj.size(0)
        saved, grouped_mm.GroupedMm = grouped_mm.GroupedMm, GroupedMm
        try:
            return super().forward(hidden_states, top_k_index, top_k_weights)
        finally:
            grouped_mm.GroupedMm = saved


def build():
    module = grouped_mm.build(True)
    for layer in module.layers:
        old = layer.mlp.experts
        experts = Experts(old.num_experts, old.gate_up_proj.shape[2], old.down_proj.shape[2])
        experts.load_state_dict(old.state_dict())
        layer.mlp.experts = experts
    for p in module.parameters():
        p.requires_grad_(False)  # the base freezes (PEFT's mark_only_lora_as_trainable)
    torch.manual_seed(zoo.SEED + 3)
    for layer in module.layers:  # PEFT's order: target_parameters in turn, the second wrapping the first
        layer.mlp.experts = ParamWrapper(ParamWrapper(layer.mlp.experts, "gate_up_proj", RANK), "down_proj", RANK)
    for name, p in module.named_parameters():
        p.requires_grad_("lora_" in name)
    return module.train()


def measured_peak(batch: int, seq: int) -> dict:
    steps = measure.STEPS["moe_tiny"]
    module = build()
    trainable = [p for p in module.parameters() if p.requires_grad]
    optimizer = measure.make_optimizer("momentum", trainable)
    gen = torch.Generator().manual_seed(zoo.SEED + 2)
    inputs = steps.inputs("moe_tiny", batch, seq)
    targets = torch.randint(0, steps.vocab("moe_tiny"), (batch, seq), generator=gen)
    m = measure.profile_steady_step(
        module, optimizer, list(inputs) + [targets],
        lambda: measure.training_step(module, inputs, targets, optimizer, steps.forward, False, "cross-entropy"))
    return {"model": "moe_tiny", "onnx": measure.MOE_TINY_CONFIG, "batch": batch, "seq": seq, "precision": "fp32",
            "optimizer": "momentum", "optimizer_settings": measure.describe_optimizer(optimizer),
            "loss": "cross-entropy", "checkpoint": [], "experts_implementation": "grouped_mm",
            "lora": {"rank": RANK, "targets": TARGETS},
            "trainable_parameter_bytes": sum(p.numel() * p.element_size() for p in trainable), **m}


def memplan_peak(binary: str, batch: int, seq: int) -> int:
    return measure.memplan_training_peak(binary, measure.MOE_TINY_CONFIG, batch, seq, "--precision", "fp32",
                                         "--optimizer", "momentum", "--optimizer-impl", "foreach-torch1",
                                         "--experts-implementation", "grouped_mm", "--lora-rank", str(RANK),
                                         "--lora-targets", TARGETS)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    print(f"{'batch':>5} {'seq':>4} {'measured B':>11} {'memplan B':>10} {'error %':>8}")
    rows = []
    for batch, seq in ROWS:
        rows.append(measured_peak(batch, seq))
        measured, predicted = rows[-1]["peak_bytes"], memplan_peak(a.memplan, batch, seq)
        print(f"{batch:>5} {seq:>4} {measured:>11,} {predicted:>10,} {100 * (predicted - measured) / measured:+8.2f}")
    measure.write_measurements(OUT, "bench/cpu_ground_truth/lora_parameters.py", rows)


if __name__ == "__main__":
    main()
