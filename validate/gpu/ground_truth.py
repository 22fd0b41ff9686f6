#!/usr/bin/env python3
"""GPU ground truth for memplan: what PyTorch really allocates for the zoo models, and what memplan-validate
measures when it replays memplan's plans on the GPU.

    python3 validate/gpu/ground_truth.py --out DIR [--plans DIR --validate-bin PATH] [--budget-s 420]
    /usr/bin/python3 validate/gpu/ground_truth.py --dry-run --out /tmp/dry    # CPU, tiny sizes, every path

Needs nothing of memplan for the PyTorch part: only torch, torchvision, onnx (to read the checkpoint boundary
names from the zoo's ONNX exports) and tests/models/zoo.py. Runs under torch 1.13 (Debian, CPU dry run) and
torch 2.x (the GPU machine). The protocol is in validate/gpu/README.md; in short, per configuration:

  1. clean: gc, torch.cuda.empty_cache(), cuBLAS workspaces cleared where torch can (2.x), so each
     configuration starts from an empty allocator as a fresh process would;
  2. a fresh copy of the model on the GPU, its optimizer, inputs and targets;
  3. training: iteration 1 (creates the grads and optimizer states) measured alone as `first_iteration`;
     iteration 2 as warm-up; then reset_peak_memory_stats() and `iterations` more measured as `steady`.
     Each iteration is zero_grad(set_to_none=True), forward and loss (under autocast for AMP), backward,
     optimizer step (through GradScaler for AMP fp16);
     inference: one warm-up forward under inference_mode, reset_peak_memory_stats(), `iterations` forwards;
  4. read torch.cuda.max_memory_allocated / max_memory_reserved, then device used from cudaMemGetInfo
     (torch.cuda.mem_get_info) and from NVML (what nvidia-smi reads), and the CUDA context and everything else
     outside the caching allocator as device used - memory_reserved.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import glob
import json
import os
import platform
import re
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ZOO_DIR = os.path.join(REPO, "tests", "models")
sys.path.insert(0, ZOO_DIR)
import zoo  # noqa: E402  (tests/models/zoo.py: the same module code the ONNX exports come from)

MiB = 1 << 20
GiB = 1 << 30

# Checkpoint segments: one per block, at the module boundaries people checkpoint in practice (a ResNet stage,
# an inverted-residual / MBConv stage, a transformer layer). The tensors kept between segments are the
# blocks' outputs, whose ONNX names memplan takes as `--checkpoint at:NAME,...`.
CHECKPOINT_BLOCKS: Dict[str, List[str]] = {
    "resnet18": [f"layer{i}" for i in range(1, 5)],
    "resnet50": [f"layer{i}" for i in range(1, 5)],
    "mobilenet_v2": [f"features.{i}" for i in range(1, 18)],
    "efficientnet_b0": [f"features.{i}" for i in range(1, 8)],
    "vit_b_16": [f"encoder.layers.encoder_layer_{i}" for i in range(12)],
    "gpt": [f"blocks.{i}" for i in range(12)],
    "bert": [f"blocks.{i}" for i in range(12)],
    "gpt_tiny": [f"blocks.{i}" for i in range(2)],
}
ATTENTION_MODELS = {"vit_b_16", "gpt", "bert", "gpt_tiny"}

# Training configurations: (precision as memplan names it, optimizer as memplan names it).
TRAIN_CONFIGS = [("fp32", "momentum"), ("amp-fp16", "adamw"), ("amp-bf16", "adamw")]
INFERENCE_PRECISIONS = ["fp32", "fp16"]  # fp16 = model.half(), memplan's `--dtype fp16`

# The GPU run's sizes: (batch sizes, sequence length). Image models are 3x224x224 (zoo.IMAGE_SIZE).
GPU_SIZES = {"image": ([8, 32], None), "text": ([2, 8], 512)}
DRY_SIZES = {"image": ([1, 2], None), "text": ([1, 2], 16)}

# The largest training batch under an emulated card: (model, precision, optimizer), caps in GiB.
FIT_CONFIGS = [("resnet50", "fp32", "momentum"), ("gpt", "amp-bf16", "adamw")]
FIT_CAPS_GIB = [16, 24]
FIT_MAX_BATCH = 4096
DRY_FIT_CONFIGS = [("resnet18", "fp32", "momentum"), ("gpt_tiny", "amp-bf16", "adamw")]
DRY_FIT_LIMIT = {16: 5, 24: 11}  # the dry run's pretend OOM: batches above these "do not fit"

DEFAULT_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "gpt_tiny", "bert", "gpt"]
DRY_MODELS = ["resnet18", "gpt_tiny"]


# --------------------------------------------------------------------------------------------------
# Environment


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Deadline:
    """Stops starting new work once the time budget is spent, so one GPU call always returns results."""

    def __init__(self, budget_s: float):
        self.start = time.monotonic()
        self.budget_s = budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def nvml_handle():
    try:
        import pynvml  # nvidia-ml-py: the library nvidia-smi itself reads
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None, None


def nvml_memory(nvml) -> Dict[str, Optional[int]]:
    """Device used (all processes) and this process's used memory, as nvidia-smi reports them."""
    lib, handle = nvml
    if lib is None:
        return {"nvml_device_used_bytes": None, "nvml_process_used_bytes": None}
    info = lib.nvmlDeviceGetMemoryInfo(handle)
    mine = None
    try:
        for proc in lib.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid():
                mine = proc.usedGpuMemory
    except Exception:
        pass
    return {"nvml_device_used_bytes": int(info.used), "nvml_process_used_bytes": mine}


def nvidia_smi() -> Optional[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except Exception:
        return None


def environment(device: torch.device, dry_run: bool) -> Dict[str, Any]:
    env: Dict[str, Any] = {
        "date_utc": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dry_run": dry_run,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }
    try:
        import torchvision
        env["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        env.update({
            "gpu_name": torch.cuda.get_device_name(0),
            "gpu_total_bytes": int(total),
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "cuda_runtime_torch_built_with": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "nvidia_smi": nvidia_smi(),
            "sdp_flags": {k: getattr(torch.backends.cuda, k)() for k in
                          ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled")
                          if hasattr(torch.backends.cuda, k)},
        })
        smi = env["nvidia_smi"]
        if smi:
            env["driver"] = smi.split(",")[1].strip()
    else:
        env["gpu_name"] = "cpu (dry run)"
    return env


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# --------------------------------------------------------------------------------------------------
# Memory readings


class Memory:
    """Reads the caching allocator's counters and the device's usage; on the CPU (dry run) reads nothing."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.nvml = nvml_handle() if self.cuda else (None, None)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def clean(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear is not None:
                clear()  # torch >= 2.0 keeps a cuBLAS workspace allocated per handle and stream
            torch.cuda.empty_cache()

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peaks(self) -> Dict[str, Optional[int]]:
        if not self.cuda:
            return {"max_allocated_bytes": None, "max_reserved_bytes": None}
        self.sync()
        return {"max_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                "max_reserved_bytes": int(torch.cuda.max_memory_reserved())}

    def now(self) -> Dict[str, Optional[int]]:
        if not self.cuda:
            return {"allocated_bytes": None, "reserved_bytes": None, "device_used_bytes": None,
                    "context_and_other_bytes": None, "nvml_device_used_bytes": None, "nvml_process_used_bytes": None}
        self.sync()
        free, total = torch.cuda.mem_get_info()
        reserved = int(torch.cuda.memory_reserved())
        reading = {"allocated_bytes": int(torch.cuda.memory_allocated()), "reserved_bytes": reserved,
                   "device_used_bytes": int(total - free),
                   # The CUDA context, loaded kernels and library memory outside the allocator.
                   "context_and_other_bytes": int(total - free) - reserved}
        reading.update(nvml_memory(self.nvml))
        return reading


def is_oom(error: BaseException) -> bool:
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom_type is not None and isinstance(error, oom_type)) or "out of memory" in str(error)


# --------------------------------------------------------------------------------------------------
# Checkpoint boundaries as the ONNX export names them


def onnx_scope(qualified_name: str) -> str:
    """torch.onnx's node-name scope of a submodule: 'features.3' -> '/features/features.3/',
    'layer1' -> '/layer1/', 'encoder.layers.encoder_layer_0' -> '/encoder/layers/encoder_layer_0/'.
    A numeric part (a Sequential or ModuleList index) is named with its container's name in front."""
    levels: List[str] = []
    parts = qualified_name.split(".")
    for i, part in enumerate(parts):
        levels.append(f"{parts[i - 1]}.{part}" if part.isdigit() and i > 0 else part)
    return "/" + "/".join(levels) + "/"


def onnx_boundaries(model: str, blocks: Sequence[str]) -> Dict[str, Any]:
    """For each checkpointed block, the tensor it hands to the rest of the graph: the output of a node inside
    the block's scope that a node outside it (or the graph output) reads. Read from the training export
    (<model>_train.onnx) when it exists, else the inference export; weights are never loaded."""
    try:
        import onnx
    except ImportError:
        return {"source": None, "names": [], "error": "onnx is not installed"}
    path = next((p for p in (os.path.join(ZOO_DIR, f"{model}_train.onnx"), os.path.join(ZOO_DIR, f"{model}.onnx"))
                 if os.path.exists(p)), None)
    if path is None:
        return {"source": None, "names": [], "error": f"no ONNX export of {model} in tests/models"}
    graph = onnx.load(path, load_external_data=False).graph
    graph_outputs = {o.name for o in graph.output}
    names: List[Optional[str]] = []
    for block in blocks:
        scope = onnx_scope(block)
        inside = [n for n in graph.node if n.name.startswith(scope)]
        produced = {o for n in inside for o in n.output}
        read_outside = [i for n in graph.node if not n.name.startswith(scope) for i in n.input if i in produced]
        leaving = [o for n in inside for o in n.output if o in read_outside or o in graph_outputs]
        names.append(leaving[-1] if leaving else None)  # the block's last result that leaves it
    return {"source": os.path.relpath(path, REPO), "names": names}


class Checkpointed(nn.Module):
    """Runs a block under torch.utils.checkpoint: only its inputs are kept, its activations are recomputed in
    backward. Non-reentrant (use_reentrant=False), the variant PyTorch recommends, which works for any inputs."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, *args):
        from torch.utils.checkpoint import checkpoint
        return checkpoint(self.block, *args, use_reentrant=False)


def apply_checkpointing(module: nn.Module, blocks: Sequence[str]) -> None:
    for qualified in blocks:
        parent_name, _, leaf = qualified.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        setattr(parent, leaf, Checkpointed(getattr(parent, leaf)))


# --------------------------------------------------------------------------------------------------
# One configuration


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
    del module, inputs
    mem.clean()
    return result


def run_training(base: nn.Module, model: str, precision: str, optimizer: str, checkpoint: bool, batch: int,
                 seq: Optional[int], device: torch.device, mem: Memory, iterations: int) -> Dict[str, Any]:
    mem.clean()
    start = mem.now()
    module = copy.deepcopy(base).to(device).train()
    if checkpoint:
        apply_checkpointing(module, CHECKPOINT_BLOCKS[model])
    opt = make_optimizer(optimizer, module.parameters())
    scaler = make_scaler(precision, device)
    inputs = model_inputs(model, batch, seq, device)
    targets = make_targets(model, (classes_of(model),), batch, seq, device)
    loaded = mem.now()

    def iteration() -> None:
        opt.zero_grad(set_to_none=True)  # frees last iteration's grads before the forward (1.13's default keeps them)
        with autocast_context(precision, device):
            loss = loss_of(module(*inputs), targets)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

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
    del module, opt, scaler, inputs, targets
    mem.clean()
    return result


def memplan_args(model: str, mode: str, precision: str, batch: int, seq: Optional[int], optimizer: str = "",
                 boundaries: Optional[List[str]] = None, attention: str = "none") -> List[str]:
    """The memplan invocation for the same configuration (docs/validate.md: how results are compared)."""
    onnx_file = f"tests/models/{model}_train.onnx" if mode == "train" else f"tests/models/{model}.onnx"
    args = ["estimate", onnx_file, "--batch", str(batch), "--runtime", "pytorch"]
    if seq is not None and zoo.is_text(model):
        args += ["--dim", f"seq={seq}"]
    if attention.startswith("sdpa"):
        args += ["--attention", "sdpa"]
    elif attention == "eager":
        args += ["--attention", "eager"]
    if mode == "inference":
        return args + ["--dtype", precision]
    args += ["--mode", "train", "--precision", precision, "--optimizer", optimizer, "--loss", "cross-entropy"]
    if boundaries:
        args += ["--checkpoint", "at:" + ",".join(boundaries)]
    return args


# --------------------------------------------------------------------------------------------------
# The matrix


def sizes_for(model: str, dry_run: bool) -> Tuple[List[int], Optional[int]]:
    table = DRY_SIZES if dry_run else GPU_SIZES
    return table["text" if zoo.is_text(model) else "image"]


def run_matrix(models: List[str], device: torch.device, mem: Memory, iterations: int, dry_run: bool,
               deadline: Deadline, reserve_s: float, save: Callable[[List[Dict[str, Any]]], None]) -> List[Dict[str, Any]]:
    results: List[Dict[str, Any]] = []
    for model in models:
        if deadline.left() < reserve_s:
            log(f"time budget: skipping {model} and later models")
            results.append({"model": model, "skipped": "time budget"})
            continue
        log(f"building {model}")
        base = zoo.build_model(model).module  # CPU, fp32, eval mode, seeded distinct values
        boundaries = onnx_boundaries(model, CHECKPOINT_BLOCKS[model])
        batches, seq = sizes_for(model, dry_run)
        configs: List[Tuple[str, str, str, bool]] = [("inference", p, "", False) for p in INFERENCE_PRECISIONS]
        configs += [("train", p, o, c) for p, o in TRAIN_CONFIGS for c in (False, True)]
        for mode, precision, optimizer, checkpoint in configs:
            for batch in batches:
                if deadline.left() < reserve_s:
                    break
                entry: Dict[str, Any] = {"model": model, "mode": mode, "precision": precision, "batch": batch,
                                         "seq": seq if zoo.is_text(model) else None, "iterations": iterations}
                if mode == "train":
                    entry.update({"optimizer": optimizer, "loss": "cross-entropy",
                                  "checkpoint": {"blocks": CHECKPOINT_BLOCKS[model], **boundaries} if checkpoint
                                  else None})
                try:
                    if mode == "inference":
                        entry.update(run_inference(base, model, precision, batch, entry["seq"], device, mem, iterations))
                    else:
                        entry.update(run_training(base, model, precision, optimizer, checkpoint, batch, entry["seq"],
                                                  device, mem, iterations))
                except RuntimeError as error:  # an OOM or an unsupported op: recorded, the matrix goes on
                    entry["error"] = str(error).splitlines()[0][:300]
                    entry["oom"] = is_oom(error)
                    mem.clean()
                entry["memplan_args"] = memplan_args(
                    model, mode, precision, batch, entry["seq"], optimizer,
                    boundaries["names"] if checkpoint and all(boundaries["names"]) else None,
                    entry.get("attention", "none"))
                steady = entry.get("steady", {})
                log(f"  {model} {mode} {precision} {optimizer} ckpt={checkpoint} b={batch}: "
                    f"allocated {fmt(steady.get('max_allocated_bytes'))} reserved {fmt(steady.get('max_reserved_bytes'))}"
                    + (f" ERROR {entry['error'][:80]}" if "error" in entry else ""))
                results.append(entry)
        del base
        save(results)
    return results


def fmt(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / MiB:.1f}MiB"


# --------------------------------------------------------------------------------------------------
# The largest batch that fits under an emulated card


def search_max_batch(fits: Callable[[int], bool], limit: int) -> Tuple[int, List[Tuple[int, bool]]]:
    """Largest b in [1, limit] with fits(b), assuming fitting is monotone: doubling until the first failure,
    then bisection. Returns (0, probes) when batch 1 does not fit."""
    probes: List[Tuple[int, bool]] = []

    def probe(b: int) -> bool:
        ok = fits(b)
        probes.append((b, ok))
        return ok

    if not probe(1):
        return 0, probes
    good, bad = 1, None
    while bad is None and good < limit:
        nxt = min(good * 2, limit)
        if probe(nxt):
            good = nxt
        else:
            bad = nxt
    if bad is None:
        return good, probes
    while bad - good > 1:
        mid = (good + bad) // 2
        if probe(mid):
            good = mid
        else:
            bad = mid
    return good, probes


def run_fit(configs, caps_gib: List[int], device: torch.device, mem: Memory, dry_run: bool,
            deadline: Deadline) -> List[Dict[str, Any]]:
    results = []
    for model, precision, optimizer in configs:
        base = zoo.build_model(model).module
        _, seq = sizes_for(model, dry_run)
        for cap in caps_gib:
            if deadline.left() < 20:
                results.append({"model": model, "cap_gib": cap, "skipped": "time budget"})
                continue
            results.append(fit_one(base, model, precision, optimizer, seq, cap, device, mem, dry_run, deadline))
            log(f"  fit {model} {precision} {optimizer} under {cap} GiB: batch {results[-1].get('max_batch')}")
        del base
    return results


def fit_one(base: nn.Module, model: str, precision: str, optimizer: str, seq: Optional[int], cap_gib: int,
            device: torch.device, mem: Memory, dry_run: bool, deadline: Deadline) -> Dict[str, Any]:
    """Training steps at growing batch sizes under torch.cuda.set_per_process_memory_fraction(cap / total):
    the caching allocator refuses to reserve more than the cap, as a card of that size would (its CUDA
    context aside: the cap counts reserved bytes only, so compare with memplan fit on cap - context)."""
    mem.clean()
    module = copy.deepcopy(base).to(device).train()
    opt = make_optimizer(optimizer, module.parameters())
    scaler = make_scaler(precision, device)
    fraction = None
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = min(1.0, cap_gib * GiB / total)
        torch.cuda.set_per_process_memory_fraction(fraction, 0)

    def attempt(batch: int) -> None:
        if dry_run and batch > DRY_FIT_LIMIT[cap_gib]:
            raise RuntimeError(f"CUDA out of memory (dry-run pretend cap: batch {batch})")
        inputs = model_inputs(model, batch, seq, device)
        targets = make_targets(model, (classes_of(model),), batch, seq, device)
        for _ in range(2):  # the second step runs with every optimizer state present
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
            del loss
        mem.sync()

    def fits(batch: int) -> bool:
        if deadline.left() < 10:
            raise TimeoutError("time budget")
        failed = None
        try:
            attempt(batch)
        except RuntimeError as error:
            if not is_oom(error):
                raise
            failed = str(error).splitlines()[0][:200]
        # Outside the except block, so the traceback's frames (and their tensors) are gone before cleaning.
        opt.zero_grad(set_to_none=True)
        mem.clean()
        return failed is None

    entry: Dict[str, Any] = {"model": model, "precision": precision, "optimizer": optimizer, "seq": seq,
                             "cap_gib": cap_gib, "memory_fraction": fraction, "loss": "cross-entropy"}
    try:
        best, probes = search_max_batch(fits, FIT_MAX_BATCH)
        entry.update({"max_batch": best, "probes": probes})
    except TimeoutError:
        entry["skipped"] = "time budget ran out during the search"
    finally:
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, 0)
        del module, opt, scaler
        mem.clean()
    entry["context_and_other_bytes"] = mem.now()["context_and_other_bytes"]
    entry["memplan_args"] = ["fit", f"tests/models/{model}_train.onnx", "--mode", "train", "--precision", precision,
                             "--optimizer", optimizer, "--loss", "cross-entropy", "--runtime", "pytorch",
                             "--budget", f"{cap_gib}GiB"] + (["--dim", f"seq={seq}"] if seq else [])
    return entry


# --------------------------------------------------------------------------------------------------
# memplan-validate on the zoo's plans


def run_validate(binary: Optional[str], plans_dir: Optional[str], device: torch.device,
                 deadline: Deadline) -> Dict[str, Any]:
    """Replays every *.plan.json in plans_dir with memplan-validate (all modes) and keeps its JSON reports."""
    if not binary or not plans_dir:
        return {"skipped": "no --validate-bin or --plans given"}
    plans = sorted(glob.glob(os.path.join(plans_dir, "*.plan.json")))
    if not os.access(binary, os.X_OK):
        return {"skipped": f"{binary} is not an executable", "plans": plans}
    kind = "cuda" if device.type == "cuda" else "cpu"
    reports = []
    for plan in plans:
        if deadline.left() < 30:
            reports.append({"plan": plan, "skipped": "time budget"})
            continue
        proc = subprocess.run([binary, plan, "--device", kind, "--mode", "all", "--json"],
                              capture_output=True, text=True, timeout=max(10, int(deadline.left())))
        try:
            report = json.loads(proc.stdout)
        except ValueError:
            report = {"plan": plan, "stdout": proc.stdout[-2000:]}
        report["exit_code"] = proc.returncode
        if proc.stderr:
            report["stderr"] = proc.stderr[-2000:]
        reports.append(report)
        modes = ", ".join(f"{m['mode']} {m['error_pct']}%" for m in report.get("modes", []))
        log(f"  validate {os.path.basename(plan)}: exit {proc.returncode} ({modes})")
    return {"binary": binary, "device": kind, "reports": reports}


# --------------------------------------------------------------------------------------------------


def write_json(path: str, doc: Dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "validate", "results"), help="where the JSON results go")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, 1 measured iteration, pretend OOM cap")
    ap.add_argument("--models", nargs="*", help="zoo models (default: all on a GPU, resnet18 and gpt_tiny dry)")
    ap.add_argument("--iterations", type=int, help="measured steady-state iterations (default 3; dry run 1)")
    ap.add_argument("--budget-s", type=float, default=420, help="stop starting new work after this many seconds")
    ap.add_argument("--plans", help="folder of *.plan.json files made by `memplan plan`")
    ap.add_argument("--validate-bin", help="the memplan-validate binary")
    ap.add_argument("--skip", nargs="*", default=[], choices=["matrix", "fit", "validate"])
    args = ap.parse_args(argv)

    deadline = Deadline(args.budget_s)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    torch.backends.cudnn.benchmark = False  # benchmark mode's search may allocate very large workspaces
    models = args.models or (DRY_MODELS if args.dry_run else DEFAULT_MODELS)
    iterations = args.iterations or (1 if args.dry_run else 3)
    mem = Memory(device)
    if device.type == "cuda":
        torch.zeros(1, device=device)  # create the context before the first reading
    env = environment(device, args.dry_run)
    stamp = datetime.datetime.utcnow().strftime("%Y%m%d")
    tag = f"{stamp}-{slug(env['gpu_name'] if not args.dry_run else 'cpu-dryrun')}"
    os.makedirs(args.out, exist_ok=True)
    paths = {k: os.path.join(args.out, f"{k}-{tag}.json") for k in ("torch", "fit", "validate")}
    log(f"{env['gpu_name']}, torch {env['torch']}; results in {args.out} as *-{tag}.json")

    if "validate" not in args.skip:
        write_json(paths["validate"], {"environment": env,
                                       **run_validate(args.validate_bin, args.plans, device, deadline)})
    fit_reserve = 0 if "fit" in args.skip else (30 if args.dry_run else 120)
    if "matrix" not in args.skip:
        protocol = {"iterations": iterations, "warmup": "training: iteration 1 measured alone (first_iteration), "
                    "iteration 2 unmeasured; inference: 1 forward", "peak_reset": "reset_peak_memory_stats() "
                    "after warm-up", "cleanup": "gc.collect, cuBLAS workspaces cleared, empty_cache before each config",
                    "zero_grad": "set_to_none=True at the start of each iteration", "cudnn_benchmark": False}
        run_matrix(models, device, mem, iterations, args.dry_run, deadline, fit_reserve,
                   lambda rows: write_json(paths["torch"], {"environment": env, "protocol": protocol,
                                                            "configs": rows}))
    if "fit" not in args.skip:
        fit_configs = DRY_FIT_CONFIGS if args.dry_run else FIT_CONFIGS
        write_json(paths["fit"], {"environment": env, "caps_gib": FIT_CAPS_GIB,
                                  "fits": run_fit(fit_configs, FIT_CAPS_GIB, device, mem, args.dry_run, deadline)})
    log(f"done in {deadline.elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
