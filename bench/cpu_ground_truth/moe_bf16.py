#!/usr/bin/python3
"""moe_tiny (measure.py's Qwen3-MoE decoder, tests/models/hf_moe.py) stored in bfloat16 (model.to(torch.bfloat16):
--precision bf16), one training step on the CPU, against memplan; the measurements go to moe_bf16_truth.json, which
tests/accuracy/accuracy.py gates at 1 %.

    /usr/bin/python3 bench/cpu_ground_truth/moe_bf16.py [--memplan build/memplan]

What bfloat16 shows that float32 cannot: the router of mixtral, qwen2_moe and qwen3_moe runs
`F.softmax(router_logits, dim=1, dtype=torch.float)` (transformers models/qwen3_moe/modeling_qwen3_moe.py
Qwen3MoeSparseMoeBlock.forward; Mixtral's and Qwen2-MoE's the same), which hf_moe.py follows: softmax converts the
logits to float32 first (aten/src/ATen/native/SoftMax.cpp, softmax with a dtype: input.toType(dtype)) and keeps its
float32 result for backward; top-k and the normalisation run on float32 weights, cast back by
`.to(hidden_states.dtype)`. In float32 those are no-ops. The rotary tables and the causal mask are made in the model's
type (hf_islands.py's forward), as transformers makes them; the norms, the attention's softmax and the loss run in
bfloat16 as the plain-PyTorch model writes them (memplan without --upcast). Protocol: measure.py's (a warm-up step,
zero_grad(set_to_none=True), one profiled step: forward, cross-entropy, backward, SGD momentum foreach); memplan
--runtime ideal --torch 1.13 --optimizer-impl foreach-torch1 --zero-grad set-to-none, resident + live bytes at the
peak, as accuracy.py counts them.
"""
import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import hf_islands  # noqa: E402  (forward: the rotary tables and mask in the model's type)
import measure  # noqa: E402
import llama  # noqa: E402  (on sys.path through measure)
import zoo  # noqa: E402

OUT = os.path.join(HERE, "moe_bf16_truth.json")
SEQ = 64


def measured_peak(batch: int) -> dict:
    module = measure.moe_build("moe_tiny").train().to(torch.bfloat16)
    optimizer = measure.make_optimizer("momentum", list(module.parameters()))
    gen = torch.Generator().manual_seed(zoo.SEED + 2)
    (input_ids,) = llama.make_inputs(measure.MOE_TINY.base, batch, SEQ, zoo.SEED)
    targets = torch.randint(0, measure.MOE_TINY.base.vocab_size, (batch, SEQ), generator=gen)
    forward = lambda m, inputs, use_checkpoint: hf_islands.forward(m, inputs[0])  # noqa: E731
    m = measure.profile_steady_step(
        module, optimizer, [input_ids, targets],
        lambda: measure.training_step(module, [input_ids], targets, optimizer, forward, False, "cross-entropy"))
    return {"model": "moe_tiny", "onnx": measure.MOE_TINY_CONFIG, "batch": batch, "seq": SEQ, "precision": "bf16",
            "optimizer": "momentum", "optimizer_settings": measure.describe_optimizer(optimizer),
            "loss": "cross-entropy", "checkpoint": [], **m}


def memplan_peak(binary: str, batch: int) -> int:
    return measure.memplan_training_peak(binary, measure.MOE_TINY_CONFIG, batch, SEQ, "--precision", "bf16",
                                         "--optimizer", "momentum", "--optimizer-impl", "foreach-torch1")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    hf_islands.DTYPE = torch.bfloat16
    measure.measure_batches(OUT, "bench/cpu_ground_truth/moe_bf16.py", SEQ, measured_peak,
                            lambda batch: memplan_peak(a.memplan, batch))


if __name__ == "__main__":
    main()
