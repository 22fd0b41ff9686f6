#!/usr/bin/python3
"""CPU ground truth for Lightning Fabric's output conversion under litgpt's chunked loss (memplan
--outputs-to-default-dtype with --loss chunked-ce-tokens:K).

litgpt v0.5.13's finetune/lora.py fit() calls the model through Fabric: `logits = model(input_ids,
lm_head_chunk_size=128)`, where model is a _FabricModule (src/lightning/fabric/wrappers.py, Lightning 2.6.1, which
litgpt v0.5.13 requires at least). Its forward runs the module inside precision.forward_context() and then
`output = precision.convert_output(output)`: under bf16-true (HalfPrecision, plugins/precision/half.py)
apply_to_collection(data, function=_convert_fp_tensor, dtype=Tensor, dst_type=torch.get_default_dtype()), so the list
of bf16 chunks GPT.forward returns comes back as a new list of float32 copies (_convert_fp_tensor: tensor.to(dst_type)
for a floating tensor; the default dtype is float32 again once forward_context's _DtypeContextManager has exited).
fit() then slices the last chunk (`logits[-1] = logits[-1][..., :-1, :]`) and runs chunked_cross_entropy
(litgpt/utils.py) on those copies, keeping `logits` through backward and the optimizer step.

The tiny Llama of llama_tiny_train.onnx (tests/models/llama.py) is converted with model.to(torch.bfloat16) and run with
transformers' float32 RMSNorm and softmax islands (hf_islands.py; memplan --upcast rmsnorm,softmax), its head applied
to each split(32, dim=1) of the final norm's output (GPT.forward's lm_head_chunk_size; 32 so that 128 positions make
4 chunks, as measure.py's chunked-ce-tokens rows), then litgpt's loss (measure.litgpt_chunked_ce, in the logits' own
type). Each configuration is measured twice: `fabric` true, the chunks passed through an emulation of
_FabricModule.forward's conversion (fabric_forward below); false, the bf16 chunks read by the loss directly (litgpt's
loss without Fabric). Two models: the full fine-tune, and llama_tiny_lora (LoRA r 8 on q_proj and v_proj, the adapters
in bf16 as litgpt builds them under fabric.init_module; memplan --lora-dtype base), only the adapters training.

The protocol is measure.py's (bench/cpu_ground_truth/README.md): warm-up step, zero_grad(set_to_none=True), the
baseline summed from the tensors, one profiled step, the peak of the CPU allocation events. Adam, foreach=True.

    /usr/bin/python3 bench/cpu_ground_truth/fabric_outputs.py        # -> bench/cpu_ground_truth/fabric_outputs.json (a minute)
"""
from __future__ import annotations

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hf_islands  # noqa: E402  (transformers' float32 islands over the tiny Llama)
import llama  # noqa: E402  (on sys.path through measure)
import measure  # noqa: E402
import zoo  # noqa: E402

DTYPE = torch.bfloat16
CHUNK = 32
OUT = os.path.join(HERE, "fabric_outputs.json")
CONFIGS = [(lora, batch, fabric) for lora in (False, True) for batch in (2, 8) for fabric in (False, True)]


def chunked_forward(m, input_ids):
    """hf_islands.forward with litgpt's chunked head: GPT.forward(lm_head_chunk_size=K) returns
    [lm_head(x_i) for x_i in x.split(K, dim=1)] (litgpt/model.py, v0.5.13)."""
    seq = input_ids.size(1)
    x = m.embed_tokens(input_ids)
    cos, sin = llama.rotary_cos_sin(seq, m.cfg.head_dim, m.cfg.rope_theta, input_ids.device)
    cos, sin = cos.to(DTYPE), sin.to(DTYPE)
    mask = torch.triu(torch.full((seq, seq), torch.finfo(DTYPE).min, dtype=DTYPE), diagonal=1)
    for layer in m.layers:
        x = layer(x, cos, sin, mask)
    return [m.lm_head(piece) for piece in m.norm(x).split(CHUNK, dim=1)]


def convert_fp_tensor(tensor, dst_type):
    """plugins/precision/utils.py _convert_fp_tensor."""
    return tensor.to(dst_type) if torch.is_floating_point(tensor) else tensor


def fabric_forward(m, input_ids):
    """_FabricModule.forward's output conversion: `output = precision.convert_output(output)`, which on a list is
    apply_to_collection's new list of _convert_fp_tensor's results; rebinding `output` drops the bf16 list."""
    output = chunked_forward(m, input_ids)
    output = [convert_fp_tensor(t, torch.get_default_dtype()) for t in output]
    return output


def step(m, input_ids, targets, optimizer, fabric: bool):
    """litgpt's fit(): the logits list kept through backward and the optimizer step."""
    logits = (fabric_forward if fabric else chunked_forward)(m, input_ids)
    logits[-1] = logits[-1][..., :-1, :]
    loss = measure.litgpt_chunked_ce(logits, targets[..., 1:])
    loss.backward()
    optimizer.step()


def measure_one(lora: bool, batch: int, fabric: bool) -> dict:
    module = measure.llama_build("llama_tiny_lora" if lora else "llama_tiny").train().to(DTYPE)
    if lora:
        for name, p in module.named_parameters():
            p.requires_grad_("lora_" in name)
    cfg = llama.CONFIGS["llama_tiny"]
    optimizer = measure.make_optimizer("adam", [p for p in module.parameters() if p.requires_grad])
    (input_ids,) = llama.make_inputs(cfg, batch, 128, zoo.SEED)
    targets = torch.randint(0, cfg.vocab_size, (batch, 128), generator=torch.Generator().manual_seed(zoo.SEED + 2))
    plain_rms_norm = llama.RMSNorm.forward
    llama.RMSNorm.forward = hf_islands.hf_rms_norm
    torch.softmax = hf_islands.hf_softmax
    try:
        assert torch.get_default_dtype() == torch.float32
        measured = measure.profile_steady_step(module, optimizer, [input_ids, targets],
                                               lambda: step(module, input_ids, targets, optimizer, fabric))
    finally:
        torch.softmax = hf_islands._softmax
        llama.RMSNorm.forward = plain_rms_norm
    extra = {}
    if lora:
        extra = {"lora": {"rank": 8, "targets": "q_proj|v_proj"}, "lora_dtype": "base",
                 "trainable_parameter_bytes": measure.tensor_bytes(p for p in module.parameters() if p.requires_grad)}
    return {"model": "llama_tiny", "onnx": "tests/models/llama_tiny_train.onnx", "batch": batch, "seq": 128,
            "precision": "bf16", "upcast": "rmsnorm,softmax", "outputs_to_default_dtype": fabric, **extra,
            "optimizer": "adam", "optimizer_settings": measure.describe_optimizer(optimizer),
            "loss": f"chunked-ce-tokens:{CHUNK}", "checkpoint": [], **measured}


def main() -> int:
    torch.set_num_threads(2)
    rows = [measure_one(*c) for c in CONFIGS]
    measure.write_measurements(OUT, "bench/cpu_ground_truth/fabric_outputs.py", rows)
    for r in rows:
        print(f"llama_tiny{' LoRA q/v' if r.get('lora') else ''} b{r['batch']} s{r['seq']} bf16 "
              f"chunked-ce-tokens:{CHUNK} fabric={r['outputs_to_default_dtype']}: {r['peak_bytes']} bytes "
              f"(+{r['peak_increment_bytes']} over {r['baseline_bytes']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
