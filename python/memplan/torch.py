"""memplan.torch: PyTorch modules in, memplan's answers out.

    import memplan.torch
    memplan.torch.export(model, (x,), "model.onnx")                  # a graph-only ONNX memplan reads right
    memplan.torch.estimate(model, (x,), mode="train", precision="amp-bf16", optimizer="adamw")
    memplan.torch.measure(model, (x,), optimizer="adamw", device="cuda")  # measured peaks beside the prediction
    memplan.torch.snapshot("model.onnx", "predicted.pickle", batch=8, mode="train")  # for PyTorch's memory viewer

torch is imported when a function runs, never at import: ``import memplan`` and ``import memplan.torch`` work
without it. Nothing here imports the rest of memplan at import time either, so bench/cpu_ground_truth/measure.py
loads this file by path for its measurement protocol (``allocation_events``, ``peak_of``, ...) from a source
tree where the module is not built.
"""
from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

# ---------------------------------------------------------------------------------------------------------------
# export


# Floating-point initializers are the weights: their bytes are dropped; integer initializers hold shapes, axes
# and indices that shape inference reads, and stay (tests/models/export_zoo.py keeps the same split).
def _float_types():
    import onnx

    return {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def strip_weights(model, location: str) -> int:
    """Drops the bytes of every floating-point initializer of `model` (an onnx.ModelProto), leaving its name,
    dims and type, marked as external data at `location` (a file that is never written: memplan reads only
    dims and types, and never opens external data). Returns the bytes dropped."""
    import onnx

    sizes = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.BFLOAT16: 2,
             onnx.TensorProto.DOUBLE: 8}
    offset = 0
    for tensor in model.graph.initializer:
        if tensor.data_type not in sizes:
            continue
        count = 1
        for d in tensor.dims:
            count *= d
        length = count * sizes[tensor.data_type]
        for field in ("raw_data", "float_data", "double_data", "int32_data"):
            tensor.ClearField(field)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        offset += length
    return offset


def _as_tuple(example_inputs) -> Tuple:
    import torch

    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    raise _input_error(f"example_inputs: expected a tensor or a tuple of tensors, got {type(example_inputs).__name__}")


def _input_error(message: str) -> Exception:
    try:
        from memplan import InputError
    except ImportError:  # loaded by path from a source tree without the built module
        return ValueError(message)
    return InputError(message)


def default_dynamic_axes(inputs: Sequence, input_names: Sequence[str]) -> Dict[str, Dict[int, str]]:
    """Axis 0 of every input is "batch"; axis 1 of a rank-2 integer input (token ids, masks) is "seq": the names
    memplan's `batch=` and `dims={"seq": ...}` bind."""
    axes = {}
    for name, t in zip(input_names, inputs):
        if getattr(t, "dim", lambda: 0)() == 0:
            continue
        axes[name] = {0: "batch"}
        if t.dim() == 2 and not t.is_floating_point():
            axes[name][1] = "seq"
    return axes


@contextlib.contextmanager
def _keep_distinct_initializers():
    """torch.onnx.export (torch/onnx/utils.py, `_jit_pass_onnx_deduplicate_initializers(graph, params, training)`)
    merges initializers whose *values* are equal unless the module is in training mode: freshly initialised
    LayerNorm weights (all ones) would become one tensor and the parameter count would be wrong. memplan counts
    every parameter, so the pass is asked for training-mode deduplication, which merges only tensors that share
    storage (tied weights: one parameter)."""
    import torch

    original = getattr(torch._C, "_jit_pass_onnx_deduplicate_initializers", None)
    if original is None:
        yield
        return

    def by_storage_only(graph, params, is_train):
        return original(graph, params, True)

    torch._C._jit_pass_onnx_deduplicate_initializers = by_storage_only
    try:
        yield
    finally:
        torch._C._jit_pass_onnx_deduplicate_initializers = original


def export_proto(module, example_inputs, train: bool = True, dynamic_axes: Optional[Dict] = None,
                 input_names: Optional[List[str]] = None, output_names: Optional[List[str]] = None,
                 opset: int = 17):
    """The module as an onnx.ModelProto, with weights still inside (see export)."""
    import onnx
    import torch

    from memplan._torch_warnings import harmless_export_warnings_silenced  # which ones, and why: that file

    if not isinstance(module, torch.nn.Module):
        raise _input_error(f"memplan.torch.export: expected a torch.nn.Module, got {type(module).__name__}")
    inputs = _as_tuple(example_inputs)
    names = list(input_names) if input_names else (["input"] if len(inputs) == 1 else [f"input_{i}" for i in range(len(inputs))])
    axes = default_dynamic_axes(inputs, names) if dynamic_axes is None else dynamic_axes
    was_training = module.training
    module.train(train)
    buffer = io.BytesIO()
    try:
        with _keep_distinct_initializers(), harmless_export_warnings_silenced():
            torch.onnx.export(
                module, inputs, buffer, opset_version=opset, input_names=names, output_names=output_names,
                dynamic_axes=axes,
                # Training: the module as it trains (Dropout and BatchNorm's batch statistics kept, every
                # parameter an initializer, no constant folding, which would fold BatchNorm into Conv).
                # Inference: eval mode with ONNX's default folding, as tests/models/export_zoo.py exports.
                training=torch.onnx.TrainingMode.PRESERVE if train else torch.onnx.TrainingMode.EVAL,
                do_constant_folding=not train,
            )
    except Exception as e:  # torch raises many kinds; the message says what it could not export
        raise _input_error(f"memplan.torch.export: torch.onnx.export (torch {torch.__version__}) cannot export "
                           f"{type(module).__name__}: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}") from e
    finally:
        module.train(was_training)
    data = buffer.getvalue()
    if len(data) >= 2**31:
        raise _input_error(f"memplan.torch.export: {type(module).__name__} exports to {len(data):,} bytes, past "
                           "protobuf's 2 GiB message limit for one file")
    return onnx.load_model_from_string(data)


def export(module, example_inputs, path, train: bool = True, dynamic_axes: Optional[Dict] = None,
           input_names: Optional[List[str]] = None, output_names: Optional[List[str]] = None,
           opset: int = 17) -> str:
    """Writes a graph-only ONNX of `module` to `path` with the settings memplan's estimates need, and returns
    the path.

    train=True (for ``mode="train"``): the module in training mode, ``TrainingMode.PRESERVE``, no constant
    folding, every parameter kept as its own initializer (identical values are not merged; tied weights stay
    one). train=False: eval mode with constant folding (BatchNorm folded), for inference estimates.
    dynamic_axes: torch.onnx's; by default axis 0 of every input is "batch" and axis 1 of a rank-2 integer
    input is "seq", which ``batch=`` and ``dims={"seq": N}`` bind. The weights' bytes are never written: the
    file holds their names, shapes and types (memplan reads nothing else). Raises memplan.InputError when
    torch cannot export the module."""
    import onnx

    proto = export_proto(module, example_inputs, train, dynamic_axes, input_names, output_names, opset)
    path = os.fspath(path)
    strip_weights(proto, os.path.basename(path) + ".data")
    onnx.save_model(proto, path)
    return path


def _options_with_example_shape(proto, inputs, options: Dict[str, Any]) -> Dict[str, Any]:
    """Binds the exported symbolic dims to the example inputs' sizes where the caller did not."""
    options = dict(options)
    if "inputs" in options:
        return options
    dims = dict(options.get("dims", {}))
    for value, t in zip([v for v in proto.graph.input if v.name not in {i.name for i in proto.graph.initializer}], inputs):
        for axis, d in enumerate(value.type.tensor_type.shape.dim):
            if d.HasField("dim_param") and axis < t.dim():
                if d.dim_param == "batch":
                    options.setdefault("batch", int(t.shape[axis]))
                elif d.dim_param not in dims:
                    dims[d.dim_param] = int(t.shape[axis])
    if dims:
        options["dims"] = dims
    return options


def estimate(module, example_inputs, train: Optional[bool] = None, **options: Any) -> Dict[str, Any]:
    """memplan.estimate of `module`, exported to a temporary file (export with train = ``mode == "train"``
    unless given). The symbolic dims default to the example inputs' sizes: ``batch=`` and ``dims=`` override."""
    import onnx

    import memplan

    inputs = _as_tuple(example_inputs)
    if train is None:
        train = options.get("mode") == "train"
    with tempfile.TemporaryDirectory(prefix="memplan-") as d:
        path = os.path.join(d, f"{type(module).__name__}.onnx")
        proto = export_proto(module, inputs, train)
        strip_weights(proto, os.path.basename(path) + ".data")
        onnx.save_model(proto, path)
        return memplan.estimate(path, **_options_with_example_shape(proto, inputs, options))


# ---------------------------------------------------------------------------------------------------------------
# measure: the CPU protocol of bench/cpu_ground_truth (README.md there), which measure.py loads from here.


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


def measure(module, example_inputs, optimizer: str = "adamw", precision: str = "fp32", steps: int = 3,
            device: str = "cuda", loss: str = "cross-entropy", targets=None, mode: str = "train",
            snapshot=None, **options: Any) -> Dict[str, Any]:
    """Runs real steps of `module` on `example_inputs` and returns the measured peaks beside memplan's prediction
    for the same configuration (exported from the same module) and the error.

    device="cpu" (fp32 training): the protocol of bench/cpu_ground_truth — ``steps - 1`` warm-up steps (the
    optimizer states exist), ``optimizer.zero_grad(set_to_none=True)``, then one step under
    ``torch.profiler(profile_memory=True)``; the peak of live tensor bytes is the tensors live before it
    (parameters, buffers, optimizer states, inputs, targets) plus the maximum running sum of the step's
    allocation events. Predicted: ``runtime="ideal"``'s live bytes at the peak (resident + lower bound),
    as tests/accuracy compares.

    device="cuda": the protocol of validate/gpu — a clean caching allocator (gc, cuBLAS workspaces cleared,
    ``empty_cache``), ``steps - 1`` unmeasured steps, ``torch.cuda.reset_peak_memory_stats()``, one measured step,
    ``synchronize``, then ``max_memory_allocated`` / ``max_memory_reserved``. Each step is
    ``zero_grad(set_to_none=True)``, forward (under ``torch.autocast`` for amp-*), loss, backward, step.
    Predicted: ``runtime="pytorch"``: allocated_bytes and total_bytes (reserved + the runtime's fixed costs)
    against max_memory_allocated and max_memory_reserved.

    snapshot=PATH (CUDA, torch >= 2.1): also writes the measured step's allocator snapshot
    (``torch.cuda.memory._dump_snapshot``), to open beside memplan.torch.snapshot's prediction.

    mode="inference": forwards under ``torch.inference_mode()`` instead of steps. `options` go to the estimate
    (checkpoint=..., attention=..., ...). Returns {"device", "protocol", "measured", "predicted",
    "error_percent", "estimate"}."""
    import torch

    if steps < 2 and mode == "train":
        raise _input_error("measure: steps must be at least 2 (the first creates the optimizer states)")
    if device not in ("cpu", "cuda"):
        raise _input_error(f"measure: device {device}: expected cpu or cuda")
    if device == "cpu" and snapshot:
        raise _input_error("measure: snapshot= records the CUDA caching allocator (device=\"cuda\")")
    if device == "cpu" and precision != "fp32":
        raise _input_error("measure: device=\"cpu\" measures fp32 (the CPU has no autocast kernels for most ops)")
    if device == "cuda" and not torch.cuda.is_available():
        raise _input_error("measure: device=\"cuda\" but torch.cuda.is_available() is False")
    inputs = _as_tuple(example_inputs)
    prediction_options = dict(options)
    prediction_options.update(mode=mode)
    if mode == "train":
        prediction_options.update(optimizer=optimizer, precision=precision, loss=loss)
        if optimizer in ("adam", "adamw") and "optimizer_impl" not in options:
            # foreach=True, as make_optimizer builds it: torch 1.x's foreach update differs from 2.x's.
            prediction_options["optimizer_impl"] = "foreach-torch1" if torch.__version__.startswith("1.") else "foreach"
    prediction_options.setdefault("runtime", "ideal" if device == "cpu" else "pytorch")
    predicted = estimate(module, inputs, train=(mode == "train"), **prediction_options)

    if device == "cpu":
        measured = _measure_cpu(module, inputs, optimizer, steps, loss, targets, mode)
        live = predicted["resident_bytes"] + predicted["lower_bound_bytes"]
        return {"device": "cpu", "protocol": "bench/cpu_ground_truth/README.md", "measured": measured,
                "predicted": {"peak_bytes": live},
                "error_percent": {"peak_bytes": 100.0 * (live - measured["peak_bytes"]) / measured["peak_bytes"]},
                "estimate": predicted}
    measured = _measure_cuda(module, inputs, optimizer, precision, steps, loss, targets, mode,
                             snapshot)
    pred = {"allocated_bytes": predicted["allocated_bytes"], "reserved_bytes": predicted["total_bytes"]}
    return {"device": "cuda", "protocol": "validate/gpu/README.md", "measured": measured, "predicted": pred,
            "error_percent": {k: 100.0 * (pred[k] - measured[k]) / measured[k] for k in pred if measured[k]},
            "estimate": predicted}


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


# ---------------------------------------------------------------------------------------------------------------
# snapshot: the prediction in the format of torch.cuda.memory._snapshot(), for PyTorch's memory viewer.


def snapshot(model_path, out_path, **options: Any) -> Dict[str, Any]:
    """Writes memplan's predicted allocation trace of `model_path` (estimate options as keywords) as a pickle in
    the format of ``torch.cuda.memory._dump_snapshot`` and returns the snapshot dictionary.
    (Implemented in memplan._snapshot.)"""
    from memplan import _snapshot

    return _snapshot.write(model_path, out_path, **options)
