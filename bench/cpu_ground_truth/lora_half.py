#!/usr/bin/python3
"""CPU ground truth for PEFT's LoRA over a base loaded in bfloat16 with float32 adapters, the default of
get_peft_model on a model from from_pretrained(torch_dtype=torch.bfloat16), stepped by the Hugging Face Trainer
without autocast (memplan --precision bf16 --lora-rank R --lora-targets ... [--lora-dropout P]).

The tiny Llama of llama_tiny_train.onnx (tests/models/llama.py) with LoraLinear on q_proj and v_proj (r 8, alpha 16),
loaded in bfloat16, then, as PEFT does:
  - the adapters in float32: BaseTuner._cast_adapter_dtype (peft/tuners/tuners_utils.py, autocast_adapter_dtype=True
    by default) "only upcasts float16 and bfloat16 to float32";
  - lora.Linear.forward (peft/tuners/lora/layer.py): result = self.base_layer(x); torch_result_dtype = result.dtype;
    x = self._cast_input_dtype(x, lora_A.weight.dtype) (x.to(dtype) where the types differ); result = result +
    lora_B(lora_A(dropout(x))) * scaling; result = result.to(torch_result_dtype);
  - every other parameter frozen (mark_only_lora_as_trainable).
The rest is hf_islands.py's: transformers' float32 RMSNorm, softmax and loss, the logits dropped before backward (the
Trainer's compute_loss), Adam (foreach). lora_dropout 0 (nn.Identity): on the CPU, F.dropout is not the fused
native_dropout a GPU runs (aten/src/ATen/native/Dropout.cpp: is_fused_kernel_acceptable needs a CUDA, XPU or lazy
tensor), so it saves a noise tensor in the input's type where the GPU saves a one-byte mask, which memplan models: a
CPU measurement with dropout would not check the GPU's rule (measured at 0.05: 3.9 % and 4.3 % above memplan).

    /usr/bin/python3 bench/cpu_ground_truth/lora_half.py       # -> bench/cpu_ground_truth/lora_half.json
"""
from __future__ import annotations

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_islands  # noqa: E402  (transformers' float32 islands and the step)
import measure  # noqa: E402
import llama  # noqa: E402  (on sys.path through measure)
import export_llama  # noqa: E402
import zoo  # noqa: E402

OUT = os.path.join(HERE, "lora_half.json")
RANK, TARGETS = 8, "q_proj|v_proj"
CONFIGS = [(batch, 128, 0.0) for batch in (2, 8)]


def peft_forward(self, x):
    """PEFT's lora.Linear.forward over a half-precision base with float32 adapters."""
    result = self.base_layer(x)
    torch_result_dtype = result.dtype
    if x.dtype != self.lora_A.weight.dtype:  # BaseTunerLayer._cast_input_dtype
        x = x.to(self.lora_A.weight.dtype)
    result = result + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
    return result.to(torch_result_dtype)


def measure_one(batch: int, seq: int, dropout: float) -> dict:
    lora = llama.LoraConfig(r=RANK, lora_alpha=16, lora_dropout=dropout)
    module = export_llama.tiny_module("llama_tiny", lora).train().to(hf_islands.DTYPE)
    for m in module.modules():
        if isinstance(m, llama.LoraLinear):
            m.lora_A.float()
            m.lora_B.float()
    for name, p in module.named_parameters():
        p.requires_grad_("lora_" in name)
    trainable = [p for p in module.parameters() if p.requires_grad]
    cfg = llama.CONFIGS["llama_tiny"]
    optimizer = measure.make_optimizer("adam", trainable)
    (input_ids,) = llama.make_inputs(cfg, batch, seq, zoo.SEED)
    targets = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(zoo.SEED + 2))
    plain_rms_norm, plain_lora = llama.RMSNorm.forward, llama.LoraLinear.forward
    llama.RMSNorm.forward, llama.LoraLinear.forward = hf_islands.hf_rms_norm, peft_forward
    torch.softmax = hf_islands.hf_softmax
    try:
        measured = measure.profile_steady_step(
            module, optimizer, [input_ids, targets],
            lambda: hf_islands.step(module, input_ids, targets, optimizer, free_output=True))
    finally:
        torch.softmax = hf_islands._softmax
        llama.RMSNorm.forward, llama.LoraLinear.forward = plain_rms_norm, plain_lora
    return {"model": "llama_tiny", "onnx": "tests/models/llama_tiny_train.onnx", "batch": batch, "seq": seq,
            "precision": "bf16", "upcast": "rmsnorm,softmax,loss", "free_output": True, "optimizer": "adam",
            "optimizer_settings": measure.describe_optimizer(optimizer), "loss": "cross-entropy", "checkpoint": [],
            "lora": {"rank": RANK, "targets": TARGETS},
            "trainable_parameter_bytes": sum(p.numel() * p.element_size() for p in trainable), **measured}


def main() -> int:
    torch.set_num_threads(2)
    rows = [measure_one(*c) for c in CONFIGS]
    measure.write_measurements(OUT, "bench/cpu_ground_truth/lora_half.py", rows)
    for r in rows:
        print(f"llama_tiny b{r['batch']} s{r['seq']} bf16 LoRA r{RANK}: {r['peak_bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
