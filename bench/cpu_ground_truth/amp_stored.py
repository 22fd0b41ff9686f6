#!/usr/bin/python3
"""CPU ground truth for autocast over parameters stored in bfloat16 (memplan --precision amp-bf16 --param-dtype bf16).

transformers 5's Trainer with bf16=True over a checkpoint from_pretrained loaded in its stored bfloat16 (dtype="auto"):
accelerate's Accelerator.prepare_model wraps the forward in torch.autocast(dtype=torch.bfloat16) and casts no parameter
outside FSDP, so the parameters, their grads and Adam's exp_avg/exp_avg_sq (zeros_like(param)) are all bfloat16, with
no float32 master copy. The tiny Llama of llama_tiny_train.onnx is converted with model.to(torch.bfloat16) and stepped
with transformers' float32 islands (hf_islands.py: LlamaRMSNorm's float32 copy, eager attention's float32 softmax,
ForCausalLMLoss's logits.float()) under torch.autocast("cpu", dtype=torch.bfloat16) around the forward and the loss;
backward and the optimizer step outside it, as the Trainer runs them.

CPU autocast's op lists are not CUDA's (aten/src/ATen/autocast_mode.cpp: on the CPU in torch 1.13 pow, rsqrt, softmax
and log_softmax are not fp32 ops). With the islands every one of those reads float32 already (or is given
dtype=torch.float32), so the two lists agree on this model: what the CPU measures is what memplan's CUDA rules give.

The protocol is measure.py's (bench/cpu_ground_truth/README.md): warm-up step, zero_grad(set_to_none=True), the
baseline summed from the tensors, one profiled step, the peak of the CPU allocation events. Adam, foreach=True.

    /usr/bin/python3 bench/cpu_ground_truth/amp_stored.py            # -> bench/cpu_ground_truth/amp_stored.json (a minute)
"""
from __future__ import annotations

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_islands  # noqa: E402  (transformers' float32 islands over the tiny Llama, its step)
import llama  # noqa: E402  (on sys.path through measure)
import measure  # noqa: E402
import zoo  # noqa: E402

OUT = os.path.join(HERE, "amp_stored.json")
CONFIGS = [(batch, 128, free) for batch in (2, 8) for free in (False, True)]


def measure_one(batch: int, seq: int, free_output: bool) -> dict:
    module = measure.llama_build("llama_tiny").train().to(torch.bfloat16)
    cfg = llama.CONFIGS["llama_tiny"]
    optimizer = measure.make_optimizer("adam", list(module.parameters()))
    (input_ids,) = llama.make_inputs(cfg, batch, seq, zoo.SEED)
    targets = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(zoo.SEED + 2))
    plain_rms_norm = llama.RMSNorm.forward
    llama.RMSNorm.forward = hf_islands.hf_rms_norm
    torch.softmax = hf_islands.hf_softmax
    plain_forward = hf_islands.forward

    def autocast_forward(m, ids):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return plain_forward(m, ids)

    hf_islands.forward = autocast_forward
    try:
        # The loss (ForCausalLMLoss: logits.float(), then cross-entropy) runs on float32 logits: autocast around it
        # changes nothing (cross_entropy_loss is a CPU fp32 op reading float32), so only the model's forward is wrapped.
        measured = measure.profile_steady_step(
            module, optimizer, [input_ids, targets],
            lambda: hf_islands.step(module, input_ids, targets, optimizer, free_output))
    finally:
        hf_islands.forward = plain_forward
        torch.softmax = hf_islands._softmax
        llama.RMSNorm.forward = plain_rms_norm
    assert all(p.dtype == torch.bfloat16 for p in module.parameters())
    assert all(s.dtype == torch.bfloat16 for st in optimizer.state.values() for k, s in st.items() if k != "step")
    return {"model": "llama_tiny", "onnx": "tests/models/llama_tiny_train.onnx", "batch": batch, "seq": seq,
            "precision": "amp-bf16", "param_dtype": "bf16", "upcast": "rmsnorm,softmax,loss",
            "free_output": free_output, "optimizer": "adam",
            "optimizer_settings": measure.describe_optimizer(optimizer), "loss": "cross-entropy", "checkpoint": [],
            **measured}


def main() -> int:
    torch.set_num_threads(2)
    rows = [measure_one(*c) for c in CONFIGS]
    measure.write_measurements(OUT, "bench/cpu_ground_truth/amp_stored.py", rows)
    for r in rows:
        print(f"llama_tiny b{r['batch']} s{r['seq']} amp-bf16 over bf16 parameters, upcast {r['upcast']} "
              f"free_output={r['free_output']}: {r['peak_bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
