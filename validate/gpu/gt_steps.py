"""One measured configuration: a training step or an inference forward of a zoo model, under the protocol of
validate/gpu/README.md, and the pieces it is made of (precision, optimizer, loss, inputs, attention kernel)."""
from __future__ import annotations

import contextlib
import copy
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from gt_checkpoint import CHECKPOINT_BLOCKS, ZOO_DIR, apply_checkpointing
from gt_memory import Memory

sys.path.insert(0, ZOO_DIR)
import zoo  # noqa: E402  (tests/models/zoo.py: the same module code the ONNX exports come from)


ATTENTION_MODELS = {"vit_b_16", "gpt", "bert", "gpt_tiny"}


def autocast_context(precision: str, device: torch.device):
    if not precision.startswith("amp-"):
        return torch.autocast(device_type=device.type, enabled=False)
    dtype = torch.float16 if precision == "amp-fp16" else torch.bfloat16
    if device.type == "cpu":
        dtype = torch.bfloat16  # CPU autocast runs bf16 only; the dry run exercises the same code path
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_scaler(precision: str, device: torch.device):
    if precision != "amp-fp16" or device.type != "cuda":
        return None
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        try:
            return amp.GradScaler("cuda")
        except TypeError:
            pass
    return torch.cuda.amp.GradScaler()


def make_optimizer(name: str, params) -> torch.optim.Optimizer:
    # PyTorch defaults otherwise: on CUDA, AdamW takes its foreach path (one param-sized temporary in step()).
    if name == "momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4)
    raise ValueError(name)


def loss_of(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every position: (batch, classes) for images, (batch, seq, vocab) for text."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def train_step(module: nn.Module, inputs, targets: torch.Tensor, opt: torch.optim.Optimizer, scaler,
               precision: str, device: torch.device) -> None:
    """One training iteration: zero_grad (set_to_none frees last iteration's grads before the forward;
    1.13's default keeps them), forward and loss under autocast, backward, optimizer step (through the
    GradScaler for AMP fp16)."""
    opt.zero_grad(set_to_none=True)
    with autocast_context(precision, device):
        loss = loss_of(module(*inputs), targets)
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    else:
        loss.backward()
        opt.step()


def make_targets(model: str, logits_shape: Tuple[int, ...], batch: int, seq: Optional[int],
                 device: torch.device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(zoo.SEED + 7)
    classes = logits_shape[-1]
    shape = (batch,) if seq is None or not zoo.is_text(model) else (batch, seq)
    return torch.randint(0, classes, shape, generator=gen).to(device)


def model_inputs(model: str, batch: int, seq: Optional[int], device: torch.device,
                 float_dtype: Optional[torch.dtype] = None) -> Tuple[torch.Tensor, ...]:
    inputs = zoo.make_inputs(model, batch, seq) if seq is not None else zoo.make_inputs(model, batch)
    out = []
    for t in inputs:
        if float_dtype is not None and t.is_floating_point():
            t = t.to(float_dtype)
        out.append(t.to(device))
    return tuple(out)


def classes_of(model: str) -> int:
    return zoo.text_config(model).vocab if zoo.is_text(model) else zoo.NUM_CLASSES


def attention_ops(module: nn.Module, inputs, precision: str, device: torch.device, train: bool) -> List[str]:
    """The aten attention ops one forward dispatches to (which SDPA kernel PyTorch chose, if any)."""
    from torch.profiler import ProfilerActivity, profile
    module.train(train)
    grad = torch.enable_grad() if train else torch.inference_mode()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with grad, autocast_context(precision, device):
            out = module(*inputs)
        del out
    found = {e.key for e in prof.key_averages()
             if "attention" in e.key or "scaled_dot_product" in e.key or "flash" in e.key}
    return sorted(found)


def describe_attention(ops: List[str], model: str) -> str:
    if model not in ATTENTION_MODELS:
        return "none"
    for kernel, marker in (("flash", "flash"), ("efficient", "efficient"), ("cudnn", "cudnn"), ("math", "math")):
        if any(marker in op for op in ops):
            return f"sdpa-{kernel}"
    if any("scaled_dot_product" in op or "multi_head_attention" in op for op in ops):
        return "sdpa"
    return "eager"  # MatMul / Softmax / MatMul as separate ops (the zoo's GPT and BERT)


@contextlib.contextmanager
def masks_in_dtype(dtype: Optional[torch.dtype]):
    """zoo.py's GPT and BERT build their additive attention masks in float32, so after model.half() the fp32
    mask promotes the fp16 scores to fp32 and the next MatMul (fp32 probs x fp16 V) fails. memplan's
    `--dtype fp16` stores every float tensor in fp16, the mask included; for the fp16 inference run the masks
    are cast to the model's dtype (recorded as mask_dtype_shim in the results). zoo.py itself is unchanged."""
    causal = getattr(zoo, "causal_additive_mask", None)
    bert = getattr(zoo, "BERT", None)
    padding = bert.__dict__.get("padding_mask") if bert is not None else None
    if dtype is None:
        yield False
        return
    try:
        if causal is not None:
            zoo.causal_additive_mask = lambda seq, device: causal(seq, device).to(dtype)
        if padding is not None:
            original = padding.__func__
            bert.padding_mask = staticmethod(lambda attention_mask: original(attention_mask).to(dtype))
        yield True
    finally:
        if causal is not None:
            zoo.causal_additive_mask = causal
        if padding is not None:
            bert.padding_mask = padding


def run_inference(base: nn.Module, model: str, precision: str, batch: int, seq: Optional[int],
                  device: torch.device, mem: Memory, iterations: int) -> Dict[str, Any]:
    mem.clean()
    start = mem.now()
    module = copy.deepcopy(base).to(device).eval()
    dtype = None
    if precision == "fp16":
        dtype = torch.float16 if device.type == "cuda" else torch.bfloat16  # CPU convs lack fp16 in torch 1.13
        module = module.to(dtype)  # model.half() (or bf16 on the CPU dry run)
    inputs = model_inputs(model, batch, seq, device, dtype)
    loaded = mem.now()
    with masks_in_dtype(dtype if zoo.is_text(model) else None) as shimmed:
        ops = attention_ops(module, inputs, "fp32", device, train=False) if model in ATTENTION_MODELS else []
        with torch.inference_mode():
            module(*inputs)  # warm-up: kernels, cuDNN/cuBLAS handles and their workspaces
            mem.sync()
            mem.reset_peak()
            t0 = time.perf_counter()
            for _ in range(iterations):
                out = module(*inputs)
                del out
            mem.sync()
    seconds = (time.perf_counter() - t0) / iterations
    result = {"steady": mem.peaks(), "at_start": start, "after_load": loaded, "end": mem.now(),
              "seconds_per_iteration": round(seconds, 5), "attention_ops": ops,
              "attention": describe_attention(ops, model), "mask_dtype_shim": shimmed}
    return result


def run_training(base: nn.Module, model: str, precision: str, optimizer: str, checkpoint: str, batch: int,
                 seq: Optional[int], device: torch.device, mem: Memory, iterations: int) -> Dict[str, Any]:
    """checkpoint: "" (none), "reentrant" or "non-reentrant" (torch.utils.checkpoint's use_reentrant)."""
    mem.clean()
    start = mem.now()
    module = copy.deepcopy(base).to(device).train()
    if checkpoint:
        apply_checkpointing(module, CHECKPOINT_BLOCKS[model], reentrant=checkpoint == "reentrant")
    opt = make_optimizer(optimizer, module.parameters())
    scaler = make_scaler(precision, device)
    inputs = model_inputs(model, batch, seq, device)
    targets = make_targets(model, (classes_of(model),), batch, seq, device)
    loaded = mem.now()

    def iteration() -> None:
        train_step(module, inputs, targets, opt, scaler, precision, device)

    ops = attention_ops(module, inputs, precision, device, train=True) if model in ATTENTION_MODELS else []
    module.train()
    mem.reset_peak()
    iteration()  # first iteration: grads and optimizer states are created
    first = mem.peaks()
    iteration()  # warm-up into the steady state
    mem.sync()
    mem.reset_peak()
    t0 = time.perf_counter()
    for _ in range(iterations):
        iteration()
    mem.sync()
    seconds = (time.perf_counter() - t0) / iterations
    result = {"first_iteration": first, "steady": mem.peaks(), "at_start": start, "after_load": loaded,
              "end": mem.now(), "seconds_per_iteration": round(seconds, 5), "attention_ops": ops,
              "attention": describe_attention(ops, model)}
    return result  # the next configuration's clean() runs once these locals are gone
