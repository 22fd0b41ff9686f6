#!/usr/bin/python3
"""CPU ground truth for the float32 islands a Hugging Face model runs inside a bfloat16 model (memplan --upcast).

The tiny Llama of llama_tiny_train.onnx (tests/models/llama.py, built by export_llama.tiny_module) is loaded in
bfloat16 (model.to(torch.bfloat16): what from_pretrained(torch_dtype=torch.bfloat16) gives) and run for one
training step with transformers' float32 code paths in place of the plain module's:
  - rmsnorm: LlamaRMSNorm.forward (transformers src/transformers/models/llama/modeling_llama.py):
        input_dtype = x.dtype; h = x.to(torch.float32); variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + eps); return weight * h.to(input_dtype)
  - softmax: eager attention's softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype);
  - loss: ForCausalLMLoss (src/transformers/loss/loss_utils.py): logits = logits.float(), then cross-entropy;
    or, the two `legacy` rows, LlamaForCausalLM.forward up to transformers 4.45: the forward returns logits.float()
    and the loss runs on shift_logits = logits[..., :-1, :].contiguous() (memplan --upcast logits).
The rotary tables and the causal mask are made in the model's type, as transformers makes them
(LlamaRotaryEmbedding.forward returns cos/sin .to(x.dtype); the mask is filled with torch.finfo(dtype).min).
`free_output`: the loop drops the logits before backward, as the Trainer's compute_loss does (memplan --free-output).

The protocol is measure.py's (bench/cpu_ground_truth/README.md): warm-up step, zero_grad(set_to_none=True), the
baseline summed from the tensors, one profiled step, the peak of the CPU allocation events. Adam, foreach=True.

    /usr/bin/python3 bench/cpu_ground_truth/hf_islands.py            # -> bench/cpu_ground_truth/hf_islands.json (a minute)
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import measure  # noqa: E402  (the protocol's functions, the tiny Llama's builders)
import llama  # noqa: E402  (on sys.path through measure)
import zoo  # noqa: E402

DTYPE = torch.bfloat16
OUT = os.path.join(HERE, "hf_islands.json")
# (batch, seq, free_output, legacy): legacy is transformers up to 4.45's loss (below), memplan --upcast logits.
CONFIGS = [(batch, 128, free, False) for batch in (2, 8) for free in (False, True)] + [(2, 128, False, True),
                                                                                     (8, 128, False, True)]


def hf_rms_norm(self, x):
    """transformers' LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + self.eps)
    return self.weight * h.to(input_dtype)


_softmax = torch.softmax


def hf_softmax(x, dim):
    """eager attention's nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)."""
    return _softmax(x, dim, dtype=torch.float32).to(x.dtype)


def forward(m, input_ids):
    seq = input_ids.size(1)
    x = m.embed_tokens(input_ids)
    cos, sin = llama.rotary_cos_sin(seq, m.cfg.head_dim, m.cfg.rope_theta, input_ids.device)
    cos, sin = cos.to(DTYPE), sin.to(DTYPE)
    mask = torch.triu(torch.full((seq, seq), torch.finfo(DTYPE).min, dtype=DTYPE), diagonal=1)
    for layer in m.layers:
        x = layer(x, cos, sin, mask)
    return m.lm_head(m.norm(x))


def step(m, input_ids, targets, optimizer, free_output: bool, legacy: bool = False):
    logits = forward(m, input_ids)
    if legacy:
        # LlamaForCausalLM.forward up to transformers 4.45: logits = logits.float(), returned as the output; the loss
        # on contiguous copies of the shifted logits and labels (CrossEntropyLoss, mean).
        logits = logits.float()
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = targets[..., 1:].contiguous()
        loss = F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        del shift_logits, shift_labels
    else:
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))  # ForCausalLMLoss
    if free_output:
        del logits
    loss.backward()
    optimizer.step()


def measure_one(batch: int, seq: int, free_output: bool, legacy: bool) -> dict:
    module = measure.llama_build("llama_tiny").train().to(DTYPE)
    cfg = llama.CONFIGS["llama_tiny"]
    optimizer = measure.make_optimizer("adam", list(module.parameters()))
    (input_ids,) = llama.make_inputs(cfg, batch, seq, zoo.SEED)
    targets = torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(zoo.SEED + 2))
    plain_rms_norm = llama.RMSNorm.forward
    llama.RMSNorm.forward = hf_rms_norm
    torch.softmax = hf_softmax
    try:
        measured = measure.profile_steady_step(module, optimizer, [input_ids, targets],
                                               lambda: step(module, input_ids, targets, optimizer, free_output, legacy))
    finally:
        torch.softmax = _softmax
        llama.RMSNorm.forward = plain_rms_norm
    return {"model": "llama_tiny", "onnx": "tests/models/llama_tiny_train.onnx", "batch": batch, "seq": seq,
            "precision": "bf16", "upcast": "rmsnorm,softmax," + ("logits" if legacy else "loss"),
            "free_output": free_output, "optimizer": "adam",
            "optimizer_settings": measure.describe_optimizer(optimizer), "loss": "cross-entropy", "checkpoint": [],
            **measured}


def main() -> int:
    torch.set_num_threads(2)
    rows = [measure_one(*c) for c in CONFIGS]
    measure.write_measurements(OUT, "bench/cpu_ground_truth/hf_islands.py", rows)
    for r in rows:
        print(f"llama_tiny b{r['batch']} s{r['seq']} bf16 upcast {r['upcast']} free_output={r['free_output']}: "
              f"{r['peak_bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
