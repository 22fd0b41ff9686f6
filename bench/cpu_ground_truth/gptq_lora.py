#!/usr/bin/python3
"""CPU ground truth for LoRA over a GPTQ 4-bit base (memplan --frozen-dtype gptq-int4).

The tiny Llama with PEFT-style LoRA on q_proj and v_proj (tests/models/llama.py, llama.LORA_DEFAULT, the module of
the llama_tiny_lora rows) in bfloat16, run with transformers' float32 paths (hf_islands.py: LlamaRMSNorm, the eager
softmax, ForCausalLMLoss's logits.float(); memplan --upcast rmsnorm,softmax,loss), the adapters in bfloat16 (PEFT's
autocast_adapter_dtype=False; memplan --lora-dtype base), and each base projection of the decoder layers a GPTQ layer:
  - stored as gptqmodel's BaseQuantLinear registers it (gptqmodel/nn_modules/qlinear/__init__.py at v4.2.5):
    qweight int32 [in // 32 * 4, out], qzeros int32 [ceil(in / 128), out // 32 * 4], scales float16
    [ceil(in / 128), out], g_idx int32 [in] (group_size 128, GPTQConfig's default);
  - run as the trainable path runs it: TritonV2QuantLinear.forward in training mode is TorchQuantLinear.forward
    (nn_modules/qlinear/tritonv2.py, torch.py _forward):
        weights = self.dequantize_weight(num_itr).to(x.dtype); out = torch.matmul(x, weights)
    dequantize_weight is torch.compile'd (TorchQuantLinear.optimize) into one kernel writing the [in, out] float16
    result; the stand-in allocates exactly that tensor (torch.empty in float16, filled in place): the memory is the
    kernel's, the values are not dequantized (this measures memory only). The copy into bfloat16 and the matmul are
    the real ones, so autograd keeps what mm keeps (the bfloat16 weight, for the input's grad).
The head stays an nn.Linear (optimum's GPTQQuantizer quantizes the decoder blocks' layers only).
Protocol: measure.py's (warm-up, zero_grad(set_to_none=True), baseline from the tensors, one profiled step),
Adam foreach over the adapters, no checkpointing.

    /usr/bin/python3 bench/cpu_ground_truth/gptq_lora.py        # -> bench/cpu_ground_truth/gptq_lora.json (a minute)
"""
from __future__ import annotations

import math
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402
import hf_islands  # noqa: E402  (transformers' float32 paths in a bfloat16 model)

DTYPE = torch.bfloat16
GROUP = 128  # GPTQConfig.group_size default
OUT = os.path.join(HERE, "gptq_lora.json")


class GptqLinear(nn.Module):
    def __init__(self, base: nn.Linear):
        super().__init__()
        assert base.bias is None
        n_in, n_out = base.in_features, base.out_features
        assert n_in % 32 == 0 and n_out % 32 == 0
        self.in_features, self.out_features = n_in, n_out
        groups = math.ceil(n_in / GROUP)
        self.register_buffer("qweight", torch.zeros((n_in // 32 * 4, n_out), dtype=torch.int32))
        self.register_buffer("qzeros", torch.zeros((groups, n_out // 32 * 4), dtype=torch.int32))
        self.register_buffer("scales", torch.ones((groups, n_out), dtype=torch.float16))
        self.register_buffer("g_idx", torch.tensor([i // GROUP for i in range(n_in)], dtype=torch.int32))

    def dequantize_weight(self):
        """The compiled dequantize_weight's one output: [in, out] in the scales' type."""
        return torch.empty((self.in_features, self.out_features), dtype=self.scales.dtype).fill_(0.01)

    def forward(self, x):
        out_shape = x.shape[:-1] + (self.out_features,)
        x = x.reshape(-1, x.shape[-1])
        weights = self.dequantize_weight().to(x.dtype)
        return torch.matmul(x, weights).reshape(out_shape)


def quantize(module: nn.Module) -> int:
    count = 0
    for layer in module.layers:
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear) and "lora_" not in name:
                    setattr(parent, name, GptqLinear(child))
                    count += 1
    return count


def build():
    module = measure.llama_build("llama_tiny_lora").train().to(DTYPE)
    layers = quantize(module)
    for name, p in module.named_parameters():
        p.requires_grad_("lora_" in name)
    return module, layers


def measure_one(batch: int, seq: int) -> dict:
    module, layers = build()
    cfg = llama.CONFIGS["llama_tiny"]
    optimizer = measure.make_optimizer("adam", [p for p in module.parameters() if p.requires_grad])
    (input_ids,) = llama.make_inputs(cfg, batch, seq, zoo.SEED)
    targets = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(zoo.SEED + 2))
    plain_rms_norm = llama.RMSNorm.forward
    llama.RMSNorm.forward = hf_islands.hf_rms_norm
    torch.softmax = hf_islands.hf_softmax
    try:
        measured = measure.profile_steady_step(
            module, optimizer, [input_ids, targets],
            lambda: hf_islands.step(module, input_ids, targets, optimizer, free_output=False))
    finally:
        torch.softmax = hf_islands._softmax
        llama.RMSNorm.forward = plain_rms_norm
    return {"model": "llama_tiny", "onnx": "tests/models/llama_tiny_train.onnx", "batch": batch, "seq": seq,
            "precision": "bf16", "upcast": "rmsnorm,softmax,loss", "frozen_dtype": "gptq-int4", "gptq_layers": layers,
            "lora": {"rank": 8, "targets": "q_proj|v_proj"}, "lora_dtype": "base", "optimizer": "adam",
            "optimizer_settings": measure.describe_optimizer(optimizer), "loss": "cross-entropy", "checkpoint": [],
            **measured}


def main() -> int:
    torch.set_num_threads(2)
    rows = [measure_one(b, 128) for b in (2, 8)]
    measure.write_measurements(OUT, "bench/cpu_ground_truth/gptq_lora.py", rows)
    for r in rows:
        print(f"llama_tiny LoRA q/v over {r['gptq_layers']} GPTQ layers b{r['batch']} s{r['seq']}: {r['peak_bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
