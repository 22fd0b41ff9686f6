"""The measurement protocol behind memplan.torch.measure: the CPU protocol of bench/cpu_ground_truth (README.md
there) and the CUDA protocol of validate/gpu, on a user's module.

Imports neither torch nor the rest of memplan at import time (torch when a function runs; memplan.InputError
only to raise it), so bench/cpu_ground_truth/measure.py loads this file by path (``tensor_bytes``,
``allocation_events``, ``peak_of``, ``make_optimizer``, ...) from a source tree where the module is not built.
The public names are re-exported by memplan.torch, which documents them.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional

def _input_error(message: str) -> Exception:
    try:
        from memplan import InputError
    except ImportError:  # loaded by path from a source tree without the built module
        return ValueError(message)
    return InputError(message)


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def optimizer_state_tensors(optimizer) -> List:
    import torch

    return [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v)]


def allocation_events(prof) -> List[tuple]:
    """(time_ns, order, bytes) of every CPU allocation (+) and free (-) a torch.profiler run recorded."""
    import torch

    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        fields = event.extra_fields
        if isinstance(fields, torch._C._profiler._ExtraFields_Allocation) and fields.device.type == "cpu":
            events.append((event.start_time_ns, event.id, fields.alloc_size))
    events.sort()
    return events


def peak_of(events: List[tuple]) -> Dict[str, int]:
    """The maximum running sum of the events, the sum at the end, and how many there were."""
    live = peak = 0
    for _, _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return {"peak_increment_bytes": peak, "end_increment_bytes": live, "allocation_events": len(events)}


def make_optimizer(name: str, params, lr: Optional[float] = None):
    """memplan's optimizer names as torch optimizers, foreach=True (the multi-tensor path PyTorch uses by default
    on CUDA; on the CPU torch 1.13 defaults to the per-tensor loop), with the settings of bench/cpu_ground_truth
    (SGD lr 0.01 momentum 0.9, Adam lr 1e-4) and validate/gpu (AdamW lr 1e-4)."""
    import torch

    if name == "sgd":
        return torch.optim.SGD(params, lr=lr or 0.01, foreach=True)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr or 0.01, momentum=0.9, foreach=True)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr or 1e-4, foreach=True)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr or 1e-4, foreach=True)
    raise _input_error(f"optimizer {name}: expected one of sgd|momentum|adam|adamw")


def _loss(name: str, output, targets):
    import torch.nn.functional as F

    if name == "cross-entropy":
        return F.cross_entropy(output.reshape(-1, output.size(-1)), targets.reshape(-1))
    if name == "mse":
        return F.mse_loss(output, targets)
    raise _input_error(f"loss {name}: measure runs cross-entropy or mse")


def _default_targets(loss: str, output, seed: int = 0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    if loss == "mse":
        return torch.randn(output.shape, generator=gen, dtype=output.dtype).to(output.device)
    # Class ids for every position: (batch,) for (batch, classes) logits, (batch, seq) for (batch, seq, vocab).
    return torch.randint(0, output.size(-1), output.shape[:-1], generator=gen).to(output.device)


def _first_output(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _measure_cpu(module, inputs, optimizer_name, steps, loss, targets, mode) -> Dict[str, int]:
    import torch

    was_training = module.training
    module.train(mode == "train")
    try:
        if mode != "train":
            with torch.inference_mode():
                for _ in range(steps - 1):
                    module(*inputs)
                parts = {"parameter_bytes": tensor_bytes(module.parameters()),
                         "buffer_bytes": tensor_bytes(module.buffers()), "optimizer_state_bytes": 0,
                         "input_bytes": tensor_bytes(inputs)}
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
                    module(*inputs)
        else:
            opt = make_optimizer(optimizer_name, [p for p in module.parameters() if p.requires_grad])
            if targets is None:
                with torch.no_grad():
                    targets = _default_targets(loss, _first_output(module(*inputs)))

            def step():
                out = _first_output(module(*inputs))
                _loss(loss, out, targets).backward()
                opt.step()

            for _ in range(steps - 1):
                step()
                opt.zero_grad(set_to_none=True)
            parts = {"parameter_bytes": tensor_bytes(module.parameters()),
                     "buffer_bytes": tensor_bytes(module.buffers()),
                     "optimizer_state_bytes": tensor_bytes(optimizer_state_tensors(opt)),
                     "input_bytes": tensor_bytes(list(inputs) + [targets])}
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
                step()
            opt.zero_grad(set_to_none=True)
    finally:
        module.train(was_training)
    peak = peak_of(allocation_events(prof))
    baseline = sum(parts.values())
    return {"peak_bytes": baseline + peak["peak_increment_bytes"], "baseline_bytes": baseline, **parts, **peak}


def _measure_cuda(module, inputs, optimizer_name, precision, steps, loss, targets, mode, snapshot_path):
    import gc

    import torch

    def clean():
        gc.collect()
        torch.cuda.synchronize()
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()  # torch >= 2.0 keeps a cuBLAS workspace per handle and stream
        torch.cuda.empty_cache()

    import copy

    torch.backends.cudnn.benchmark = False  # its search can allocate very large workspaces
    clean()
    dev = torch.device("cuda")
    model = copy.deepcopy(module).to(dev)  # the caller's module stays where it is, in its dtype
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if half is not None:
        model = model.to(half)
    xs = tuple(t.to(dev) if not t.is_floating_point() or half is None else t.to(dev, half) for t in inputs)
    amp = {"amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}.get(precision)
    model.train(mode == "train")
    if mode != "train":
        with torch.inference_mode():
            model(*xs)
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            _record(snapshot_path, True)
            for _ in range(max(1, steps - 1)):
                model(*xs)
    else:
        opt = make_optimizer(optimizer_name, [p for p in model.parameters() if p.requires_grad])
        scaler = torch.cuda.amp.GradScaler() if precision == "amp-fp16" else None
        if targets is None:
            with torch.no_grad(), torch.autocast("cuda", dtype=amp, enabled=amp is not None):
                targets = _default_targets(loss, _first_output(model(*xs)))
        targets = targets.to(dev)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
                out = _first_output(model(*xs))
                value = _loss(loss, out.float() if amp is not None else out, targets)
            if scaler is not None:
                scaler.scale(value).backward()
                scaler.step(opt)
                scaler.update()
            else:
                value.backward()
                opt.step()

        for _ in range(steps - 1):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        _record(snapshot_path, True)
        step()
    torch.cuda.synchronize()
    measured = {"allocated_bytes": int(torch.cuda.max_memory_allocated()),
                "reserved_bytes": int(torch.cuda.max_memory_reserved())}
    if snapshot_path:
        torch.cuda.memory._dump_snapshot(os.fspath(snapshot_path))
        _record(snapshot_path, False)
    return measured


def _record(snapshot_path, on: bool) -> None:
    if not snapshot_path:
        return
    import torch

    record = getattr(torch.cuda.memory, "_record_memory_history", None)
    if record is None:
        raise _input_error(f"measure(snapshot=...): torch {torch.__version__} has no memory history recording "
                           "(torch.cuda.memory._record_memory_history, torch >= 2.1)")
    record(enabled="all" if on else None)
