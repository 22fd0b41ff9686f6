#!/usr/bin/python3
"""CPU ground truth for litgpt's full fine-tune (finetune/full.py): the loss on a whole, unchunked head (memplan
--loss chunked-ce-rows:N, with and without --outputs-to-default-dtype).

litgpt v0.5.13 (Lightning-AI/litgpt tag v0.5.13, 2685705), litgpt/finetune/full.py fit():

    logits = model(input_ids)                       # no lm_head_chunk_size: GPT.forward returns lm_head(x), whole
    loss = chunked_cross_entropy(logits[..., :-1, :], targets[..., 1:])
    fabric.backward(loss / train.gradient_accumulation_iters(devices, num_nodes))
    ...
    optimizer.step()

`model` is a _FabricModule (src/lightning/fabric/wrappers.py, Lightning 2.6.1, which litgpt v0.5.13 requires at least):
its forward returns precision.convert_output(output), under bf16-true (HalfPrecision, plugins/precision/half.py)
apply_to_collection(data, function=_convert_fp_tensor, dtype=Tensor, dst_type=torch.get_default_dtype()): the bf16
logits come back as one float32 copy (fabric_outputs.py does the same on the LoRA recipe's list of chunks). fit() keeps
`logits` through backward and the optimizer step. litgpt/utils.py chunked_cross_entropy, on a tensor (not a list) with
its default chunk_size=128, is the "lm_head wasn't chunked, chunk cross entropy" branch (whole_head_chunked_ce below):
the sliced logits reshaped to rows (a copy when batch > 1: the [B, T - 1, V] slice is not contiguous), split into
chunks of 128 rows, F.cross_entropy per chunk in the logits' own type.

The tiny Llama of llama_tiny_train.onnx (tests/models/llama.py) in bf16 with transformers' float32 RMSNorm and softmax
islands (hf_islands.py; memplan --upcast rmsnorm,softmax), every parameter training, its head applied once
(hf_islands.forward), at batch 1, 2 and 8 (127, 254 and 1016 rows: 1, 2 and 8 chunks of 128), seq 128, each twice:
`fabric` true, the loss on Fabric's float32 copy; false, on the bf16 logits directly.

The protocol is measure.py's (bench/cpu_ground_truth/README.md): warm-up step, zero_grad(set_to_none=True), the
baseline summed from the tensors, one profiled step, the peak of the CPU allocation events. Adam, foreach=True.

    /usr/bin/python3 bench/cpu_ground_truth/litgpt_full.py        # -> bench/cpu_ground_truth/litgpt_full.json (a minute)
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fabric_outputs  # noqa: E402  (_convert_fp_tensor)
import hf_islands  # noqa: E402  (transformers' float32 islands over the tiny Llama)
import llama  # noqa: E402  (on sys.path through measure)
import measure  # noqa: E402
import zoo  # noqa: E402

DTYPE = torch.bfloat16
CHUNK = 128  # chunked_cross_entropy's default chunk_size, which full.py's fit() leaves
# train.gradient_accumulation_iters: any int; fit() divides the loss by it before fabric.backward
ACCUMULATION_ITERS = 16
OUT = os.path.join(HERE, "litgpt_full.json")
CONFIGS = [(batch, fabric) for batch in (1, 2, 8) for fabric in (False, True)]


def whole_head_chunked_ce(logits: torch.Tensor, targets: torch.Tensor, chunk_size: int = CHUNK,
                          ignore_index: int = -100) -> torch.Tensor:
    """litgpt/utils.py chunked_cross_entropy (v0.5.13) on a tensor, chunk_size > 0: the same calls in the same order."""
    logits = logits.reshape(-1, logits.size(-1))
    targets = targets.reshape(-1)
    logit_chunks = logits.split(chunk_size)
    target_chunks = targets.split(chunk_size)
    loss_chunks = [F.cross_entropy(logit_chunk, target_chunk, ignore_index=ignore_index, reduction="none")
                   for logit_chunk, target_chunk in zip(logit_chunks, target_chunks)]
    non_masked_elems = (targets != ignore_index).sum()
    return torch.cat(loss_chunks).sum() / non_masked_elems.maximum(torch.ones_like(non_masked_elems))


def fabric_forward(m, input_ids):
    """_FabricModule.forward: the model's output, then `output = precision.convert_output(output)` (one tensor)."""
    output = hf_islands.forward(m, input_ids)
    output = fabric_outputs.convert_fp_tensor(output, torch.get_default_dtype())
    return output


def step(m, input_ids, targets, optimizer, fabric: bool):
    """full.py fit()'s step: `logits` kept through backward and the optimizer step."""
    logits = (fabric_forward if fabric else hf_islands.forward)(m, input_ids)
    loss = whole_head_chunked_ce(logits[..., :-1, :], targets[..., 1:])
    (loss / ACCUMULATION_ITERS).backward()  # fabric.backward: precision.backward -> tensor.backward()
    optimizer.step()


def measure_one(batch: int, fabric: bool) -> dict:
    module = measure.llama_build("llama_tiny").train().to(DTYPE)
    cfg = llama.CONFIGS["llama_tiny"]
    optimizer = measure.make_optimizer("adam", list(module.parameters()))
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
    return {"model": "llama_tiny", "onnx": "tests/models/llama_tiny_train.onnx", "batch": batch, "seq": 128,
            "precision": "bf16", "upcast": "rmsnorm,softmax", "outputs_to_default_dtype": fabric,
            "optimizer": "adam", "optimizer_settings": measure.describe_optimizer(optimizer),
            "loss": f"chunked-ce-rows:{CHUNK}", "checkpoint": [], **measured}


def main() -> int:
    torch.set_num_threads(2)
    rows = [measure_one(*c) for c in CONFIGS]
    measure.write_measurements(OUT, "bench/cpu_ground_truth/litgpt_full.py", rows)
    for r in rows:
        print(f"llama_tiny b{r['batch']} s{r['seq']} bf16 chunked-ce-rows:{CHUNK} "
              f"fabric={r['outputs_to_default_dtype']}: {r['peak_bytes']} bytes "
              f"(+{r['peak_increment_bytes']} over {r['baseline_bytes']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
