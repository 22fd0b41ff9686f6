#!/usr/bin/python3
"""The tiny DeepSeek-V3 of grouped_mm_deepseek.py stored in bfloat16 (model.to(torch.bfloat16): --precision bf16), one
training step on the CPU with the eager expert loop, against memplan; the measurements go to deepseek_bf16_truth.json,
which tests/accuracy/accuracy.py gates at 1 %.

    /usr/bin/python3 bench/cpu_ground_truth/deepseek_bf16.py [--memplan build/memplan]

What bfloat16 shows that float32 cannot: DeepseekV3TopkRouter computes its logits, scores and top-k weights in float32
(F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32)), transformers
models/deepseek_v3/modeling_deepseek_v3.py at f5a9ec5) and DeepseekV3MoE.moe accumulates the weighted expert outputs in
float32 (zeros_like(hidden_states, dtype=topk_weights.dtype), .type(hidden_states.dtype) at the end), which
tests/models/hf_deepseek.py follows; in float32 those casts are no-ops. The causal mask and the rotary tables are made
in the model's type, as transformers makes them (DeepseekV3RotaryEmbedding.forward returns cos.to(dtype=x.dtype),
sin.to(...); the mask is built in the inputs' dtype): hf_deepseek.py makes them float32, so this script casts them.
The norms, the attention's softmax and the loss run in bfloat16 as the plain-PyTorch model writes them (memplan
without --upcast). Protocol and memplan's flags: grouped_mm_deepseek.py's, with --precision bf16.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import grouped_mm_deepseek as base  # noqa: E402  (CFG, CONFIG, build, forward, measure, llama, zoo)

OUT = os.path.join(HERE, "deepseek_bf16_truth.json")


def in_model_type(module_dtype):
    """llama.causal_additive_mask and DeepseekV3.tables, each result cast to the model's type."""
    mask, tables = base.llama.causal_additive_mask, base.hf_deepseek.tables
    base.llama.causal_additive_mask = lambda *a, **k: mask(*a, **k).to(module_dtype)
    base.hf_deepseek.DeepseekV3.tables = staticmethod(lambda *a: tuple(t.to(module_dtype) for t in tables(*a)))


def measured_peak(batch: int, seq: int) -> dict:
    module = base.build(False).to(torch.bfloat16)
    optimizer = base.measure.make_optimizer("momentum", list(module.parameters()))
    gen = torch.Generator().manual_seed(base.zoo.SEED + 2)
    inputs = base.llama.make_inputs(base.CFG.base, batch, seq, base.zoo.SEED)
    targets = torch.randint(0, base.CFG.base.vocab_size, (batch, seq), generator=gen)
    m = base.measure.profile_steady_step(
        module, optimizer, list(inputs) + [targets],
        lambda: base.measure.training_step(module, inputs, targets, optimizer, base.forward, False, "cross-entropy"))
    return {"model": "deepseek_tiny", "onnx": os.path.relpath(base.CONFIG, ROOT), "batch": batch, "seq": seq,
            "precision": "bf16", "experts_implementation": "eager", "optimizer": "momentum",
            "optimizer_settings": base.measure.describe_optimizer(optimizer), "loss": "cross-entropy",
            "checkpoint": [], **m}


def memplan_peak(binary: str, batch: int, seq: int) -> int:
    return base.measure.memplan_training_peak(binary, base.CONFIG, batch, seq, "--precision", "bf16", "--optimizer",
                                              "momentum", "--optimizer-impl", "foreach-torch1",
                                              "--experts-implementation", "eager")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    in_model_type(torch.bfloat16)
    base.measure.measure_batches(OUT, "bench/cpu_ground_truth/deepseek_bf16.py", 64,
                                 lambda batch: measured_peak(batch, 64), lambda batch: memplan_peak(a.memplan, batch, 64))


if __name__ == "__main__":
    main()
