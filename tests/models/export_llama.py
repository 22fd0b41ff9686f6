#!/usr/bin/python3
"""Export the Llama-family decoders of tests/models/llama.py to ONNX, and record what PyTorch says about them.

    /usr/bin/python3 tests/models/export_llama.py                 # every export below (20 s on 2 cores)
    /usr/bin/python3 tests/models/export_llama.py --only llama_tiny llama_tiny_train

Two kinds of export (docs/zoo.md, "Llama-family decoders"):

  tiny     llama_tiny, qwen2_tiny, llama_tiny_lora_train (PEFT LoRA on q_proj and v_proj, r=8,
           PEFT's defaults, training export only) and llama_tiny_lora_all_train (the same on all seven
           projections, PEFT's target_modules="all-linear"): the whole module, with weights, exported
           exactly as export_zoo.py exports the GPT (torch.onnx.export; inference: eval mode, constant
           folding; training: train mode, TrainingMode.PRESERVE, no constant folding). The weights go to
           <stem>.onnx.data, which is not committed.
  real     llama3_2_1b, llama3_2_3b, llama3_1_8b, mistral_7b, llama3_1_70b, qwen2_7b: weight-less. The
           module is built on the meta device (no memory for the weights) with TWO decoder layers and
           traced with export_params=False, so that every parameter (and, in inference exports, every
           pre-transposed copy constant folding makes of a Linear weight, onnx::MatMul_*) is a graph
           input with its shape and no value. Three exporter passes are adapted to the meta device
           (meta_constants_from_cpu). Then:
             1. the parameter inputs become initializers with dims and dtype and no bytes (external data
                pointing at <stem>.onnx.data, which does not exist: memplan never opens it);
             2. the second layer's nodes are replicated for layers 2..L-1, each reading the previous
                layer's output, with its tensors and parameters renamed layers.1 -> layers.k (stitch).
           The pipeline is checked on the tiny configs at every run: stitching two traced layers up to
           four gives the graph torch.onnx.export writes for the four-layer module with its weights
           (canonical(): the same nodes with the same attributes, Constant values and inputs, up to
           names and node order; the same outputs and initializer shapes).

expected_shapes.json (merged, see export_zoo.py): per export, PyTorch's output shapes at batch 1 and 2 x
seq 16 and 128 (the full-size module on the meta device: ATen's shape functions, no arithmetic; for the
tiny ones also a real CPU run at the smallest configuration, which must agree), PyTorch's trainable-
parameter count (sum of p.numel() of the full-size module on the meta device) and the hand count from the
config (llama.LlamaConfig.parameter_count), which must agree.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import dataclasses
import hashlib
import io
import json
import os
import sys
from typing import Dict, List, NamedTuple, Optional, Set

import onnx
import torch
from onnx import TensorProto

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_zoo  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402

OPSET = 17
BATCHES = [1, 2]
SEQS = [16, 128]
TRACED_LAYERS = 2
TINY = ["llama_tiny", "qwen2_tiny"]
REAL = ["llama3_2_1b", "llama3_2_3b", "llama3_1_8b", "mistral_7b", "llama3_1_70b", "qwen2_7b"]
INPUT_NAMES = ["input_ids"]
OUTPUT_NAMES = ["logits"]
DYNAMIC_AXES = {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}


class Export(NamedTuple):
    stem: str
    config: str
    training: bool
    lora: Optional[llama.LoraConfig] = None  # PEFT LoRA adapters on the projections, the rest frozen


def all_exports() -> List[Export]:
    exports = [Export(name + suffix, name, suffix == "_train") for name in TINY + REAL for suffix in ["", "_train"]]
    return exports + [Export("llama_tiny_lora_train", "llama_tiny", True, llama.LORA_DEFAULT),
                      Export("llama_tiny_lora_all_train", "llama_tiny", True, llama.LORA_ALL_LINEAR)]


# --------------------------------------------------------------------------------------------------
# Tracing


@contextlib.contextmanager
def meta_constants_from_cpu(cfg: llama.LlamaConfig):
    """Three exporter passes that need values, adapted to a module on the meta device.

    Before torch.onnx converts the traced graph, constant propagation has folded rotary's inv_freq
    (arange, pow, reciprocal of constants) and its unsqueeze(0) into one tensor constant. Traced on the
    meta device that constant has no value; give it the value the CPU computes. Any other meta-device
    constant is an error (the graph would hold a value nobody computed)."""
    original = torch._C._jit_pass_onnx
    expected = llama.inverse_frequencies(cfg.head_dim, cfg.rope_theta).unsqueeze(0)

    def patched(graph, export_type):
        for node in graph.nodes():
            if node.kind() != "prim::Constant" or not node.hasAttribute("value") or node.kindOf("value") != "t":
                continue
            value = node.t("value")
            if value.device.type != "meta":
                continue
            if value.shape != expected.shape or value.dtype != expected.dtype:
                raise SystemExit(f"{cfg.name}: unexpected constant {value.shape} {value.dtype} in the meta trace")
            node.t_("value", expected.clone())
        return original(graph, export_type)

    # ONNX shape inference copies each parameter's value into a TensorProto; meta parameters have none,
    # and the graph inputs they are carry their shapes, so it runs without them.
    original_inference = torch._C._jit_pass_onnx_graph_shape_type_inference

    def inference_without_values(graph, params, opset):
        return original_inference(graph, {}, opset)

    # torch.onnx merges initializers with equal values; every meta tensor compares equal to every other of
    # its shape, so the merge would make all layers share their (folded) weights. Distinct parameters have
    # distinct values (the tiny exports fill them so), so not merging is what a real export does.
    original_dedup = torch._C._jit_pass_onnx_deduplicate_initializers

    def no_dedup(graph, params, is_train):
        return params

    torch._C._jit_pass_onnx = patched
    torch._C._jit_pass_onnx_graph_shape_type_inference = inference_without_values
    torch._C._jit_pass_onnx_deduplicate_initializers = no_dedup
    try:
        yield
    finally:
        torch._C._jit_pass_onnx = original
        torch._C._jit_pass_onnx_graph_shape_type_inference = original_inference
        torch._C._jit_pass_onnx_deduplicate_initializers = original_dedup


def trace(module: llama.Llama, training: bool, export_params: bool) -> onnx.ModelProto:
    cfg = module.cfg
    device = next(module.parameters()).device
    inputs = llama.make_inputs(cfg, 2, 16, zoo.SEED, device=device)
    module.train(training)
    buffer = io.BytesIO()
    guard = meta_constants_from_cpu(cfg) if device.type == "meta" else contextlib.nullcontext()
    with guard:
        torch.onnx.export(
            module, inputs, buffer, opset_version=OPSET, input_names=INPUT_NAMES, output_names=OUTPUT_NAMES,
            dynamic_axes=DYNAMIC_AXES, export_params=export_params,
            training=torch.onnx.TrainingMode.PRESERVE if training else torch.onnx.TrainingMode.EVAL,
            do_constant_folding=not training,
        )
    module.eval()
    return onnx.load_model_from_string(buffer.getvalue())


def tiny_module(name: str, lora: Optional[llama.LoraConfig] = None) -> llama.Llama:
    torch.manual_seed(zoo.SEED)
    module = llama.Llama(llama.CONFIGS[name], lora=lora)
    zoo.fill_distinct(module)  # distinct values, or torch.onnx merges equal initializers (zoo.py)
    return module.eval()


# --------------------------------------------------------------------------------------------------
# Weight-less graphs: parameters as initializers without bytes, layer stitching, folding


def empty_tensor(name: str, data_type: int, dims: List[int]) -> TensorProto:
    tensor = TensorProto()
    tensor.name, tensor.data_type = name, data_type
    tensor.dims.extend(dims)
    return tensor


def params_to_initializers(model: onnx.ModelProto, inputs: List[str] = INPUT_NAMES) -> None:
    """Every graph input except `inputs` (the token ids; export_llama_kv.py adds the mask, positions and
    past tensors) is a parameter (export_params=False): make it an initializer of its dims and dtype,
    without data."""
    graph = model.graph
    keep = []
    for value in graph.input:
        if value.name in inputs:
            keep.append(value)
            continue
        tensor_type = value.type.tensor_type
        dims = [d.dim_value for d in tensor_type.shape.dim]
        if any(d.HasField("dim_param") or d.dim_value <= 0 for d in tensor_type.shape.dim):
            raise SystemExit(f"parameter {value.name} has a non-static shape")
        graph.initializer.append(empty_tensor(value.name, tensor_type.elem_type, dims))
    del graph.input[:]
    graph.input.extend(keep)


def layer_of(name: str) -> Optional[int]:
    """K for a node the exporter scoped in layers.K (its name starts with /layers.K/)."""
    if not name.startswith("/layers."):
        return None
    return int(name[len("/layers."):].split("/", 1)[0])


def stitch(model: onnx.ModelProto, layers: int) -> None:
    """Replicate the second traced layer (layers.1) for layers 2..layers-1, in place.

    What a layer is, in the export: the nodes the exporter scoped in it (/layers.1/...) and the unscoped
    Constant nodes only they read. What else layer 1 reads is shared by every later layer of a full export,
    and the clones read it too: the rotary tables and the mask, the shape values (batch, seq) and the
    Unsqueeze nodes of them that the exporter merged across layers (common subexpression elimination
    keeps the first, in layer 0). check_pipeline() verifies this against a full export.

    A KV-cache graph (export_llama_kv.py) also has per-layer graph inputs and outputs, optimum's
    past_key_values.1.* and present.1.*: each clone reads and writes its own (past_key_values.k.*,
    present.k.*), appended to the graph's inputs and outputs in layer order, as torch.onnx orders them."""
    graph = model.graph
    nodes = list(graph.node)
    initializers = {t.name: t for t in graph.initializer}
    readers: Dict[str, List[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(i)

    def owned_by(k: int) -> Set[str]:
        """Layer k's initializers: its parameters (layers.k.*) and, in inference exports, the transposed
        copies constant folding made of them (onnx::MatMul_*), which only layer k's nodes read."""
        owned = {t for t in initializers if t.startswith(f"layers.{k}.")}
        owned |= {t for t in initializers if readers.get(t) and all(layer_of(nodes[i].name) == k for i in readers[t])}
        return owned

    def tainted_from(sources: Set[str]) -> Set[int]:
        """The nodes that compute from `sources` (node order is topological)."""
        live, found = set(sources), set()
        for i, node in enumerate(nodes):
            if any(name in live for name in node.input):
                found.add(i)
                live.update(node.output)
        return found

    owned0, owned1 = owned_by(0), owned_by(1)
    layer0 = {i for i in tainted_from(owned0) if layer_of(nodes[i].name) == 0}
    into_layer1 = {o for i in layer0 for o in nodes[i].output
                   if any(layer_of(nodes[r].name) == 1 for r in readers.get(o, []))}
    if len(into_layer1) != 1:
        raise SystemExit(f"layer 1 reads {sorted(into_layer1)} from layer 0's computation; expected one tensor")
    (layer0_out,) = into_layer1
    template = {i for i, node in enumerate(nodes) if layer_of(node.name) == 1}
    for i, node in enumerate(nodes):  # unscoped Constant nodes (onnx::Unsqueeze_* axes) only layer 1 reads
        if node.op_type == "Constant" and not node.name.startswith("/") and \
                all(r in template for r in readers.get(node.output[0], [])):
            template.add(i)
    produced1 = {o for i in template for o in nodes[i].output}
    out_of_layer1 = {o for o in produced1 for r in readers.get(o, []) if r not in template}
    out_of_layer1 |= {o.name for o in graph.output if o.name in produced1 and not o.name.startswith("present.1.")}
    cache_inputs = [v for v in graph.input if v.name.startswith("past_key_values.1.")]
    cache_outputs = [v for v in graph.output if v.name.startswith("present.1.")]
    if len(out_of_layer1) != 1:
        raise SystemExit(f"layer 1 hands {sorted(out_of_layer1)} on; expected one tensor")
    (layer1_out,) = out_of_layer1
    last = max(template)
    if any(r <= last for r in readers[layer1_out] if r not in template):
        raise SystemExit("a node after layer 1 comes before its last node")

    clones = []
    # The clones' parameters go where a full export has them: after layer k-1's, before norm and lm_head, each
    # layer's in layer 1's order (the module's state-dict order, model.parameters()' order: FSDP and DeepSpeed
    # flatten in it); the transposed copies folding made (inference exports) at the end, in layer 1's order too.
    order1 = [t.name for t in graph.initializer if t.name in owned1]
    params1 = [n for n in order1 if n.startswith("layers.1.")]
    insert_at = max(i for i, t in enumerate(graph.initializer) if t.name in params1) + 1
    cloned_params: List[TensorProto] = []
    cloned_copies: List[TensorProto] = []
    previous_out = layer1_out
    for k in range(2, layers):
        def rename(name: str, k: int = k, previous_out: str = previous_out) -> str:
            if name == layer0_out:
                return previous_out
            for prefix in ("past_key_values.", "present."):
                if name.startswith(prefix + "1."):
                    return f"{prefix}{k}." + name[len(prefix + "1."):]
            if name.startswith("layers.1."):
                return f"layers.{k}." + name[len("layers.1."):]
            if name in produced1 or name in owned1:
                return name.replace("/layers.1/", f"/layers.{k}/") if "/layers.1/" in name else f"{name}__layers.{k}"
            return name  # shared

        for i in sorted(template):
            clone = copy.deepcopy(nodes[i])
            clone.name = (clone.name.replace("/layers.1/", f"/layers.{k}/") if "/layers.1/" in clone.name
                          else f"{clone.name}__layers.{k}")
            clone.input[:] = [rename(n) for n in clone.input]
            clone.output[:] = [rename(n) for n in clone.output]
            clones.append(clone)
        for name in order1:
            tensor = copy.deepcopy(initializers[name])
            tensor.name = rename(name)
            (cloned_params if name in params1 else cloned_copies).append(tensor)
        for value, where in [(v, graph.input) for v in cache_inputs] + [(v, graph.output) for v in cache_outputs]:
            clone = copy.deepcopy(value)
            clone.name = rename(value.name)
            where.append(clone)
        previous_out = rename(layer1_out)
    for node in nodes[last + 1:]:
        node.input[:] = [previous_out if i == layer1_out else i for i in node.input]
    for output in graph.output:
        if output.name == layer1_out:
            raise SystemExit("layer 1's output is a graph output")
    del graph.node[:]
    graph.node.extend(nodes[:last + 1] + clones + nodes[last + 1:])
    existing = [copy.deepcopy(t) for t in graph.initializer]
    del graph.initializer[:]
    graph.initializer.extend(existing[:insert_at] + cloned_params + existing[insert_at:] + cloned_copies)
    del graph.value_info[:]


def point_at_missing_data(model: onnx.ModelProto, stem: str) -> None:
    """Mark every float initializer external (location, offset, length, as a saved external-data file would
    have them) with no bytes: the zoo's committed form, for a data file that is never written."""
    offset = 0
    for tensor in model.graph.initializer:
        if tensor.data_type not in export_zoo.FLOAT_TYPES:
            continue
        count = 1
        for d in tensor.dims:
            count *= d
        length = count * {TensorProto.FLOAT: 4, TensorProto.FLOAT16: 2, TensorProto.BFLOAT16: 2, TensorProto.DOUBLE: 8}[tensor.data_type]
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        del tensor.external_data[:]
        for key, value in [("location", f"{stem}.onnx.data"), ("offset", str(offset)), ("length", str(length))]:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        offset += (length + 4095) // 4096 * 4096  # onnx's external_data_helper aligns offsets to 4 KiB


def weightless(cfg: llama.LlamaConfig, training: bool, stem: str, layers: Optional[int] = None) -> onnx.ModelProto:
    layers = cfg.num_hidden_layers if layers is None else layers
    module = llama.Llama(cfg, layers=min(TRACED_LAYERS, layers), device="meta")
    model = trace(module, training, export_params=False)
    params_to_initializers(model)
    if layers > TRACED_LAYERS:
        stitch(model, layers)
    point_at_missing_data(model, stem)
    return model


# --------------------------------------------------------------------------------------------------
# The check that the pipeline writes what torch.onnx writes


def canonical(model: onnx.ModelProto) -> Dict:
    """The graph up to tensor names and node order: each node as a digest of its op, attributes (Constant
    values included) and the digests of what it reads, recursively (graph inputs and parameters by name,
    other initializers by dtype and dims). Two graphs with equal multisets of node digests and equal
    output digests compute the same thing from the same inputs."""
    graph = model.graph
    init = {t.name: t for t in graph.initializer}
    digest: Dict[str, str] = {}

    def ref(name: str) -> str:
        if name in digest:
            return digest[name]
        if name in init:
            t = init[name]
            is_param = not name.startswith("onnx::") and not name.startswith("/")
            return f"{name if is_param else 'folded'}:{t.data_type}:{list(t.dims)}"
        if name == "":
            return ""
        return f"input:{name}"

    nodes = []
    for node in graph.node:
        attrs = []
        for a in sorted(node.attribute, key=lambda a: a.name):
            b = copy.deepcopy(a)
            if b.type == onnx.AttributeProto.TENSOR:
                b.t.name = ""
            attrs.append(b.SerializeToString().hex())
        signature = hashlib.sha256(repr((node.op_type, node.domain, attrs, [ref(i) for i in node.input])).encode()).hexdigest()
        nodes.append(signature)
        for k, out in enumerate(node.output):
            digest[out] = f"{signature}.{k}"
    return {
        "nodes": sorted(nodes),
        "outputs": [ref(o.name) for o in graph.output],
        "initializers": sorted(ref(t.name) for t in graph.initializer),
    }


def check_pipeline(name: str, training: bool, direct: onnx.ModelProto) -> None:
    cfg = llama.CONFIGS[name]
    if cfg.num_hidden_layers <= TRACED_LAYERS:
        raise SystemExit(f"{name}: needs more than {TRACED_LAYERS} layers to check the stitching")
    rebuilt = weightless(cfg, training, name)
    a, b = canonical(direct), canonical(rebuilt)
    for part in ["nodes", "outputs", "initializers"]:
        if a[part] != b[part]:
            only_a = collections.Counter(a[part]) - collections.Counter(b[part])
            only_b = collections.Counter(b[part]) - collections.Counter(a[part])
            raise SystemExit(f"{name} ({'train' if training else 'eval'}): the stitched graph's {part} differ from "
                             f"torch.onnx's: {sum(only_a.values())} only in torch's, {sum(only_b.values())} only stitched"
                             f" ({len(direct.graph.node)} and {len(rebuilt.graph.node)} nodes)")
    # The parameters' order too (the module's state-dict order, model.parameters()': FSDP, DeepSpeed and DDP's
    # buckets follow it); folding's transposed copies are named differently in the two and left out.
    params = lambda m: [t.name for t in m.graph.initializer if not t.name.startswith("onnx::") and "__" not in t.name]
    if params(direct) != params(rebuilt):
        raise SystemExit(f"{name} ({'train' if training else 'eval'}): the stitched graph's parameters are in another "
                         f"order than torch.onnx's: {params(rebuilt)[:8]}... vs {params(direct)[:8]}...")
    print(f"{name} ({'train' if training else 'eval'}): stitched from {TRACED_LAYERS} layers = torch.onnx's "
          f"{len(direct.graph.node)} nodes", flush=True)


# --------------------------------------------------------------------------------------------------
# What PyTorch says


def measured(name: str, lora: Optional[llama.LoraConfig]) -> Dict:
    cfg = llama.CONFIGS[name]
    adapters = lora
    meta = llama.Llama(cfg, device="meta", lora=adapters)
    shapes = {}
    with torch.no_grad():
        for b in BATCHES:
            for s in SEQS:
                out = meta(*llama.make_inputs(cfg, b, s, zoo.SEED, device="meta"))
                shapes[f"batch={b},seq={s}"] = {"logits": list(out.shape)}
        if name in TINY:
            real = tiny_module(name, lora)(*llama.make_inputs(cfg, BATCHES[0], SEQS[0], zoo.SEED))
            key = f"batch={BATCHES[0]},seq={SEQS[0]}"
            if list(real.shape) != shapes[key]["logits"]:
                raise SystemExit(f"{name}: CPU run gives {list(real.shape)}, meta run {shapes[key]['logits']}")
    count = llama.trainable_parameter_count(meta)
    total = sum(p.numel() for p in meta.parameters())
    adapter_count = adapters.parameter_count(cfg) if adapters else 0
    if count != (adapter_count if adapters else cfg.parameter_count()) or total != cfg.parameter_count() + adapter_count:
        raise SystemExit(f"{name}: PyTorch counts {count} trainable of {total} parameters; the hand count "
                         f"{cfg.parameter_count()} + {adapter_count} adapter parameters")
    return {"shapes": shapes, "parameters": count, "total": total}


def record(spec: Export, model: onnx.ModelProto, facts: Dict) -> Dict:
    cfg = llama.CONFIGS[spec.config]
    return {
        "file": f"{spec.stem}.onnx",
        "model": spec.config,
        "opset": OPSET,
        "mode": "train" if spec.training else "eval",
        "inputs": export_zoo.graph_inputs(model),
        "pytorch_trainable_parameters": facts["parameters"],
        "pytorch_parameters": facts["total"],
        "pytorch_buffer_elements": 0,
        "torchvision_published_parameters": None,
        "config_source": cfg.source,
        "weightless": spec.config in REAL,
        "lora": dataclasses.asdict(spec.lora) if spec.lora else None,
        "outputs": facts["shapes"],
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="STEM", help="export only these file stems")
    parser.add_argument("--out", default=HERE, help="output folder (default: this folder)")
    args = parser.parse_args(argv)
    torch.set_num_threads(min(2, torch.get_num_threads()))

    json_path = os.path.join(args.out, "expected_shapes.json")
    with open(json_path) as f:
        expected = json.load(f)
    facts: Dict[str, Dict] = {}
    for spec in all_exports():
        if args.only and spec.stem not in args.only:
            continue
        cfg = llama.CONFIGS[spec.config]
        if spec.config in TINY:
            model = trace(tiny_module(spec.config, spec.lora), spec.training, export_params=True)
            if not spec.lora:
                check_pipeline(spec.config, spec.training, model)
            path = export_zoo.save(model, args.out, spec.stem, inline=False)
        else:
            model = weightless(cfg, spec.training, spec.stem)
            path = os.path.join(args.out, f"{spec.stem}.onnx")
            onnx.save_model(model, path)
        key = f"{spec.config}+{spec.lora}"
        if key not in facts:
            facts[key] = measured(spec.config, spec.lora)
        expected["models"][spec.stem] = record(spec, model, facts[key])
        size = os.path.getsize(path)
        print(f"{path}: {size:,} bytes, {len(model.graph.node)} nodes", flush=True)
        if size > export_zoo.MAX_COMMITTED_BYTES:
            print(f"warning: {path} exceeds {export_zoo.MAX_COMMITTED_BYTES} bytes", file=sys.stderr)
        export_zoo.write_expected(json_path, expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
