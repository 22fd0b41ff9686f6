"""memplan.torch: PyTorch modules in, memplan's answers out.

    import memplan.torch
    memplan.torch.export(model, (x,), "model.onnx")                  # a graph-only ONNX memplan reads right
    memplan.torch.estimate(model, (x,), mode="train", precision="amp-bf16", optimizer="adamw")
    memplan.torch.measure(model, (x,), optimizer="adamw", device="cuda")  # measured peaks beside the prediction
    memplan.torch.snapshot("model.onnx", "predicted.pickle", batch=8, mode="train")  # for PyTorch's memory viewer

torch is imported when a function runs, never at import: ``import memplan`` and ``import memplan.torch`` work
without it. The measurement protocol (``measure``'s steps on the CPU and on CUDA, and ``allocation_events``,
``peak_of``, ``make_optimizer``, ... re-exported here) lives in memplan._torch_protocol, which
bench/cpu_ground_truth/measure.py loads by path from a source tree where the module is not built.
"""
from __future__ import annotations

import contextlib
import io
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from memplan._torch_protocol import (  # noqa: F401  (tensor_bytes ... make_optimizer: memplan.torch's names too)
    _input_error, _measure_cpu, _measure_cuda, allocation_events, make_optimizer, optimizer_state_tensors, peak_of,
    tensor_bytes)

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
# measure: real steps beside the prediction (the protocols: memplan._torch_protocol).


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


# ---------------------------------------------------------------------------------------------------------------
# snapshot: the prediction in the format of torch.cuda.memory._snapshot(), for PyTorch's memory viewer.


def snapshot(model_path, out_path, **options: Any) -> Dict[str, Any]:
    """Writes memplan's predicted allocation trace of `model_path` (estimate options as keywords) as a pickle in
    the format of ``torch.cuda.memory._dump_snapshot`` and returns the snapshot dictionary.
    (Implemented in memplan._snapshot.)"""
    from memplan import _snapshot

    return _snapshot.write(model_path, out_path, **options)
