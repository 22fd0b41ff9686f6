#!/usr/bin/python3
"""CPU ground truth for PEFT's k-bit preparation of a 4-bit base (memplan --kbit-prep with --frozen-dtype nf4).

The tiny Llama with PEFT-style LoRA on q_proj and v_proj (tests/models/llama.py, llama.LORA_DEFAULT, the module of
the llama_tiny_lora rows), as a QLoRA step runs it after peft.prepare_model_for_kbit_training (src/peft/utils/
other.py): every parameter bitsandbytes did not quantize (embeddings, norms, lm_head) in float32, the adapters
float32 and the only trainable parameters, and each base projection of the decoder layers a 4-bit layer:
  - stored as bitsandbytes stores NF4 (bitsandbytes/functional.py quantize_4bit, blocksize 64): the values packed
    two to a byte (a uint8 parameter, requires_grad False) and one float32 absmax per 64 values;
  - run as bitsandbytes' Linear4bit.forward (bitsandbytes/nn/modules.py): x.to(compute_dtype), the 4-bit matmul,
    out.to(inp_dtype), compute_dtype bfloat16;
  - the matmul as MatMul4Bit (bitsandbytes/autograd/_functions.py): forward F.linear(A, dequantize_4bit(B).to(
    A.dtype)), keeping A for backward, which computes grad_A = grad_output @ dequantize_4bit(B).to(grad.dtype) and
    no grad for B. dequantize_4bit is one CUDA kernel writing one [out, in] tensor; on the CPU the stand-in allocates
    exactly that tensor (torch.empty in the compute dtype, filled in place): the memory is the kernel's, the values
    are not dequantized (this measures memory only).
PEFT's lora.Linear over it (peft/tuners/lora/bnb.py Linear4bit.forward): result = base_layer(x); the adapters on x
(float32 already: no cast), result + lora_B(lora_A(x)) * scaling.
Protocol: measure.py's (warm-up, zero_grad(set_to_none=True), baseline from the tensors, one profiled step),
Adam foreach over the adapters, cross-entropy on the float32 logits, no checkpointing.

    /usr/bin/python3 bench/cpu_ground_truth/kbit_prep.py        # -> bench/cpu_ground_truth/kbit_prep.json (a minute)
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402

COMPUTE = torch.bfloat16
OUT = os.path.join(HERE, "kbit_prep.json")
BLOCK = 64  # quantize_4bit's default blocksize


def dequantized(layer, dtype):
    """dequantize_4bit's one output: an [out, in] tensor in `dtype`."""
    w = torch.empty((layer.out_features, layer.in_features), dtype=dtype)
    return w.fill_(0.01)


class MatMul4Bit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, layer):
        ctx.layer = layer
        # bitsandbytes: ctx.tensors = (A, B) when A or B needs a grad, else (None, None)
        ctx.save_for_backward(A if A.requires_grad else None)
        return F.linear(A, dequantized(layer, A.dtype))

    @staticmethod
    def backward(ctx, grad_output):
        (A,) = ctx.saved_tensors
        del A
        return torch.matmul(grad_output, dequantized(ctx.layer, grad_output.dtype)), None


class Linear4bit(nn.Module):
    def __init__(self, base: nn.Linear):
        super().__init__()
        assert base.bias is None
        self.in_features, self.out_features = base.in_features, base.out_features
        n = base.in_features * base.out_features
        self.weight = nn.Parameter(torch.zeros((n + 1) // 2, dtype=torch.uint8), requires_grad=False)
        self.register_buffer("absmax", torch.ones((n + BLOCK - 1) // BLOCK, dtype=torch.float32))

    def forward(self, x):
        inp_dtype = x.dtype
        out = MatMul4Bit.apply(x.to(COMPUTE), self)
        return out.to(inp_dtype)


def quantize(module: nn.Module) -> int:
    """Every nn.Linear of the decoder layers (a LoRA layer's base_layer included) becomes a 4-bit layer; lm_head
    stays (bitsandbytes skips the output embedding)."""
    count = 0
    for layer in module.layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear) and "lora_" not in name:
                    setattr(parent, name, Linear4bit(child))
                    count += 1
    return count


def build():
    module = measure.llama_build("llama_tiny_lora").train()
    layers = quantize(module)
    for name, p in module.named_parameters():  # prepare_model_for_kbit_training freezes; PEFT trains the adapters
        p.requires_grad_("lora_" in name)
    return module, layers


def step(m, input_ids, targets, optimizer):
    logits = measure.llama_forward(m, (input_ids,), False)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    loss.backward()
    optimizer.step()


def measure_one(batch: int, seq: int) -> dict:
    module, layers = build()
    cfg = llama.CONFIGS["llama_tiny"]
    optimizer = measure.make_optimizer("adam", [p for p in module.parameters() if p.requires_grad])
    (input_ids,) = llama.make_inputs(cfg, batch, seq, zoo.SEED)
    targets = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(zoo.SEED + 2))
    measured = measure.profile_steady_step(module, optimizer, [input_ids, targets],
                                           lambda: step(module, input_ids, targets, optimizer))
    return {"model": "llama_tiny", "onnx": "tests/models/llama_tiny_train.onnx", "batch": batch, "seq": seq,
            "precision": "bf16", "frozen_dtype": "nf4", "kbit_prep": True, "four_bit_layers": layers,
            "lora": {"rank": 8, "targets": "q_proj|v_proj"}, "optimizer": "adam",
            "optimizer_settings": measure.describe_optimizer(optimizer), "loss": "cross-entropy", "checkpoint": [],
            **measured}


def main() -> int:
    torch.set_num_threads(2)
    rows = [measure_one(b, 128) for b in (2, 8)]
    measure.write_measurements(OUT, "bench/cpu_ground_truth/kbit_prep.py", rows)
    for r in rows:
        print(f"llama_tiny LoRA q/v over {r['four_bit_layers']} 4-bit layers b{r['batch']} s{r['seq']}: {r['peak_bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
