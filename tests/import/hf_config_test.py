#!/usr/bin/python3
"""A Hugging Face config.json as a model (onnx_import/hf_config.h, llama_graph.h) against torch.onnx.export.

For each tiny config below, the config.json is written, tests/models/llama.py's module (transformers'
LlamaForCausalLM / Qwen2ForCausalLM op for op) is built at the same config and exported as
tests/models/export_llama.py exports the zoo's *_train.onnx (train mode, TrainingMode.PRESERVE, opset 17, no
constant folding; Debian's torch 1.13), and memplan's in-memory graph (written by the hf_config_dump test tool)
must equal torch's node for node, in order: op type, name, inputs, outputs, attributes and Constant values (the
rotary inverse frequencies, which torch computes with its own float32 pow, within 1e-6 relative); initializer
names, dtypes and dims, in order (the module's state-dict order: model.parameters()', which FSDP and DeepSpeed
flatten in; tests/models' modules register their submodules as transformers' __init__ does); graph inputs and outputs with their shapes. Then memplan's JSON answers on the two files
must be byte-identical but for the model's path (and, for inspect, the file's size and producer): estimate in
inference and in a training step, and inspect, which lists every tensor's shape.

The committed zoo export of llama_tiny (tests/models/llama_tiny_train.onnx) is compared the same way.

gemma2, gemma3_text and phi3 (ARCH_CONFIGS) are compared the same way against tests/models/hf_archs.py's module, for
--graph train, and their parameter count against the hand count; and for --graph decode and prefill, against
hf_archs.DecoderWithCache exported as export_llama_kv.py exports (the graph serve --engine vllm reads where a window
is in force: hf_config_dump reads configs so; memplan's answers compared only without a window, which is refused
elsewhere).

Needs MEMPLAN_BIN, HF_CONFIG_DUMP (set by ctest) and /usr/bin/python3 with torch 1.13 and onnx.
"""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import export_llama  # noqa: E402
import export_llama_kv  # noqa: E402
import hf_archs  # noqa: E402
import llama  # noqa: E402
import zoo  # noqa: E402

MEMPLAN = os.environ.get("MEMPLAN_BIN", os.path.join(ROOT, "build", "memplan"))
DUMP = os.environ.get("HF_CONFIG_DUMP", os.path.join(ROOT, "build", "tests", "import", "hf_config_dump"))

# name: (model_type, LlamaConfig). The sizes are made up, each to reach a different path of the exporter: grouped
# query attention with 2 and 4 query heads per kv head, a kv head count of its own and one kv head (repeat_kv),
# multi-head attention (no repeat_kv) with a tied head, Qwen2's q/k/v biases with 3 query heads per kv head, Llama's
# attention_bias and mlp_bias with a head_dim that is not hidden_size / heads, Qwen3's q_norm/k_norm with grouped
# and with multi-head attention (the latter with attention_bias and a tied head).
CONFIGS = {
    "llama_tiny": ("llama", llama.CONFIGS["llama_tiny"]),
    "qwen2_tiny": ("qwen2", llama.CONFIGS["qwen2_tiny"]),
    "mistral_mha_tied": ("mistral", llama.LlamaConfig(
        "mistral_mha_tied", "made up", hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=8, vocab_size=300, rope_theta=10000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True)),
    "llama_gqa4": ("llama", llama.LlamaConfig(
        "llama_gqa4", "made up", hidden_size=128, intermediate_size=160, num_hidden_layers=3,
        num_attention_heads=8, num_key_value_heads=2, vocab_size=300, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False)),
    "llama_kv4": ("llama", llama.LlamaConfig(
        "llama_kv4", "made up", hidden_size=128, intermediate_size=224, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=4, vocab_size=500, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=True)),
    "llama_mqa": ("llama", llama.LlamaConfig(
        "llama_mqa", "made up", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, vocab_size=200, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False)),
    "llama_biases_head_dim": ("llama", llama.LlamaConfig(
        "llama_biases_head_dim", "made up", hidden_size=48, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=120, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, attention_bias=True, o_proj_bias=True, mlp_bias=True, head_dim_override=16)),
    "qwen2_rep3": ("qwen2", llama.LlamaConfig(
        "qwen2_rep3", "made up", hidden_size=96, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, vocab_size=300, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False, attention_bias=True)),
    "qwen3_gqa_head_dim": ("qwen3", llama.LlamaConfig(
        "qwen3_gqa_head_dim", "made up", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=200, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False, head_dim_override=32, qk_norm=True)),
    "qwen3_mha_bias_tied": ("qwen3", llama.LlamaConfig(
        "qwen3_mha_bias_tied", "made up", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=150, rope_theta=1000000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=True, attention_bias=True, o_proj_bias=True, head_dim_override=16, qk_norm=True)),
}

# name: hf_archs.ArchConfig, for gemma2, gemma3_text and phi3 (tests/models/hf_archs.py): their training, decode and
# prefill graphs. Made up, each reaching another path: Gemma 2 with grouped-query
# attention, both soft-caps and a window on its even layers (3 layers: sliding, full, sliding); Gemma 2 multi-head
# with attention biases and an untied head; Gemma 3 with one full layer in two (sliding_window_pattern), linear rope
# scaling on its full layers and the local base on its sliding ones; Gemma 3 with one kv head, layer_types given
# instead of the pattern, and a query_pre_attn_scalar that is not head_dim; Phi-3 with partial rotary (half of
# head_dim), grouped-query attention and a window on every layer; Phi-3 multi-head without a window.
G = hf_archs.ArchConfig
ARCH_CONFIGS = {
    "gemma2_gqa_caps": G("gemma2", 64, 96, 3, 4, 2, 16, 200, 10000.0, 1e-6, True, sliding_window=4,
                         query_pre_attn_scalar=16, attn_logit_softcapping=50.0, final_logit_softcapping=30.0),
    "gemma2_mha_bias_untied": G("gemma2", 48, 80, 2, 4, 4, 8, 120, 10000.0, 1e-6, False, sliding_window=6,
                                query_pre_attn_scalar=8, attn_logit_softcapping=20.0, final_logit_softcapping=None,
                                attention_bias=True),
    "gemma3_pattern_linear": G("gemma3_text", 64, 96, 4, 4, 2, 16, 200, 1000000.0, 1e-6, True, sliding_window=5,
                               query_pre_attn_scalar=16, sliding_window_pattern=2, rope_linear_factor=8.0),
    "gemma3_mqa_layer_types": G("gemma3_text", 64, 128, 3, 4, 1, 32, 150, 1000000.0, 1e-6, True, sliding_window=3,
                                query_pre_attn_scalar=24, sliding_window_pattern=3, rope_local_base_freq=20000.0),
    "phi3_partial_gqa": G("phi3", 64, 96, 2, 4, 2, 16, 200, 10000.0, 1e-5, False, sliding_window=4,
                          partial_rotary_factor=0.5),
    "phi3_mha_no_window": G("phi3", 64, 128, 2, 4, 4, 16, 160, 10000.0, 1e-5, True),
}

DECODE_DIMS = ["--dim", "batch_size=2", "--dim", "sequence_length=1", "--dim", "past_sequence_length=16",
               "--dim", "total_sequence_length=17"]
PREFILL_DIMS = ["--dim", "batch_size=2", "--dim", "sequence_length=16", "--dim", "total_sequence_length=16"]
# Per graph: the zoo's export of llama_tiny, and the answers compared.
GRAPHS = {
    "train": ("llama_tiny_train.onnx", [
        ["estimate", "--batch", "2", "--dim", "seq=16", "--json"],
        ["estimate", "--batch", "2", "--dim", "seq=16", "--mode", "train", "--optimizer", "adamw", "--json"],
        ["inspect", "--batch", "1", "--dim", "seq=8", "--json"]]),
    "decode": ("llama_tiny_kv.onnx", [
        ["estimate", *DECODE_DIMS, "--json"], ["inspect", *DECODE_DIMS, "--json"],
        ["serve", "--engine", "eager", "--memory", "64MiB", "--context", "100", "--json"]]),
    "prefill": ("llama_tiny_kv_prefill.onnx", [["estimate", *PREFILL_DIMS, "--json"], ["inspect", *PREFILL_DIMS, "--json"]]),
}


# The configs' position limit: serve's own search limit (2^30 tokens, report/serve.cc), so that the cap a config
# states (hf_config_counts_test.py checks it) changes no answer compared here with the ONNX file, which states none.
MAX_POSITIONS = 1 << 30


def config_json(model_type: str, cfg: llama.LlamaConfig) -> dict:
    """The config.json transformers writes for this config (keys as in the Hub's configs)."""
    architecture = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}.get(model_type, "LlamaForCausalLM")
    j = {"architectures": [architecture],
         "model_type": model_type, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
         "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
         "num_key_value_heads": cfg.num_key_value_heads, "vocab_size": cfg.vocab_size, "rope_theta": cfg.rope_theta,
         "rms_norm_eps": cfg.rms_norm_eps, "tie_word_embeddings": cfg.tie_word_embeddings, "hidden_act": "silu",
         "max_position_embeddings": MAX_POSITIONS, "torch_dtype": "float32", "attention_dropout": 0.0}
    if model_type == "llama":
        assert cfg.attention_bias == cfg.o_proj_bias, "LlamaAttention: attention_bias is every projection's bias"
        j["attention_bias"], j["mlp_bias"] = cfg.attention_bias, cfg.mlp_bias
    if model_type == "qwen3":  # Qwen3Attention: attention_bias is every projection's bias; q_norm, k_norm
        assert cfg.attention_bias == cfg.o_proj_bias and cfg.qk_norm and not cfg.mlp_bias
        j["attention_bias"] = cfg.attention_bias
        j["sliding_window"], j["use_sliding_window"] = None, False
    else:
        assert not cfg.qk_norm, "q_norm and k_norm are Qwen3's"
    if cfg.head_dim_override:
        j["head_dim"] = cfg.head_dim_override
    if model_type == "qwen2":
        assert cfg.attention_bias, "Qwen2Attention always has q/k/v biases"
        j["sliding_window"], j["use_sliding_window"] = 2048, False
    return j


def arch_config_json(name: str, cfg: hf_archs.ArchConfig) -> dict:
    """The config.json transformers writes for a Gemma2Config / Gemma3TextConfig / Phi3Config (keys as on the Hub)."""
    j = {"architectures": [{"gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM"}.get(
            cfg.model_type, "Phi3ForCausalLM")],
         "model_type": cfg.model_type, "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
         "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
         "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim, "vocab_size": cfg.vocab_size,
         "rope_theta": cfg.rope_theta, "rms_norm_eps": cfg.rms_norm_eps, "tie_word_embeddings": cfg.tie_word_embeddings,
         "max_position_embeddings": MAX_POSITIONS, "sliding_window": cfg.sliding_window, "torch_dtype": "float32",
         "attention_dropout": 0.0, "attention_bias": cfg.attention_bias, "rope_scaling": None}
    if cfg.gemma:
        j.update(hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                 query_pre_attn_scalar=cfg.query_pre_attn_scalar, attn_logit_softcapping=cfg.attn_logit_softcapping,
                 final_logit_softcapping=cfg.final_logit_softcapping, cache_implementation="hybrid")
    if cfg.model_type == "gemma3_text":
        j["rope_local_base_freq"] = cfg.rope_local_base_freq
        if cfg.rope_linear_factor is not None:
            j["rope_scaling"] = {"rope_type": "linear", "factor": cfg.rope_linear_factor}
        if name.endswith("layer_types"):
            j["layer_types"] = cfg.layer_types()
        else:
            j["sliding_window_pattern"] = cfg.sliding_window_pattern
    if cfg.model_type == "phi3":
        j.update(hidden_act="silu", embd_pdrop=0.0, resid_pdrop=0.0, partial_rotary_factor=cfg.partial_rotary_factor)
    return j


def torch_export(cfg: llama.LlamaConfig, graph: str) -> onnx.ModelProto:
    """train: as export_llama.py exports *_train.onnx; decode / prefill: as export_llama_kv.py exports optimum's
    decoder_with_past_model.onnx / decoder_model.onnx (eval mode, constant folding)."""
    torch.manual_seed(zoo.SEED)
    module = llama.Llama(cfg) if graph == "train" else llama.LlamaWithCache(cfg, past=graph == "decode")
    zoo.fill_distinct(module)  # distinct values, or torch.onnx merges equal initializers (zoo.py)
    if graph == "train":
        return export_llama.trace(module.eval(), training=True, export_params=True)
    return export_llama_kv.trace(module.eval(), export_params=True)


def attribute_mismatch(a: onnx.AttributeProto, b: onnx.AttributeProto) -> str:
    if (a.name, a.type) != (b.name, b.type):
        return f"attribute {a.name}/{a.type} vs {b.name}/{b.type}"
    if a.type != onnx.AttributeProto.TENSOR:
        return "" if a.SerializeToString() == b.SerializeToString() else f"attribute {a.name}: {a} vs {b}"
    ta, tb = a.t, b.t
    if (ta.data_type, list(ta.dims)) != (tb.data_type, list(tb.dims)):
        return f"tensor {a.name}: {ta.data_type}{list(ta.dims)} vs {tb.data_type}{list(tb.dims)}"
    va, vb = numpy_helper.to_array(ta), numpy_helper.to_array(tb)
    if va.dtype.kind == "f" and va.size > 1:
        return "" if np.allclose(va, vb, rtol=1e-6, atol=0) else f"tensor {a.name}: {va} vs {vb}"
    return "" if ta.raw_data == tb.raw_data and np.array_equal(va, vb) else f"tensor {a.name}: {va} vs {vb}"


def value_info(v: onnx.ValueInfoProto):
    t = v.type.tensor_type
    return v.name, t.elem_type, [d.dim_param if d.HasField("dim_param") else d.dim_value for d in t.shape.dim]


def compare_graphs(name: str, torch_model: onnx.ModelProto, ours: onnx.ModelProto) -> list:
    errors = []
    ga, gb = torch_model.graph, ours.graph
    if len(ga.node) != len(gb.node):
        ops_a = collections.Counter(n.op_type for n in ga.node)
        ops_b = collections.Counter(n.op_type for n in gb.node)
        errors.append(f"{name}: {len(ga.node)} nodes in torch's export, {len(gb.node)} in memplan's "
                      f"(torch only: {dict(ops_a - ops_b)}, memplan only: {dict(ops_b - ops_a)})")
    for i, (a, b) in enumerate(zip(ga.node, gb.node)):
        problem = ""
        for field in ("op_type", "domain", "name"):
            if getattr(a, field) != getattr(b, field):
                problem = f"{field} {getattr(a, field)!r} vs {getattr(b, field)!r}"
        if not problem and (list(a.input), list(a.output)) != (list(b.input), list(b.output)):
            problem = f"inputs/outputs {list(a.input)} -> {list(a.output)} vs {list(b.input)} -> {list(b.output)}"
        if not problem and len(a.attribute) != len(b.attribute):
            problem = f"attributes {[x.name for x in a.attribute]} vs {[x.name for x in b.attribute]}"
        for x, y in zip(a.attribute, b.attribute):
            problem = problem or attribute_mismatch(x, y)
        if problem:
            errors.append(f"{name}: node {i} ({a.name}): {problem}")
            break
    inits_a = [(t.name, t.data_type, tuple(t.dims)) for t in ga.initializer]
    inits_b = [(t.name, t.data_type, tuple(t.dims)) for t in gb.initializer]
    if set(inits_a) != set(inits_b):
        errors.append(f"{name}: initializers differ: {set(inits_a) ^ set(inits_b)}")
    elif inits_a != inits_b:  # the order is the module's state dict's, which FSDP and DeepSpeed flatten in
        i = next(k for k, (a, b) in enumerate(zip(inits_a, inits_b)) if a != b)
        errors.append(f"{name}: initializer {i} is {inits_a[i][0]} in torch's export, {inits_b[i][0]} in memplan's")
    for part in ("input", "output"):
        a, b = [value_info(v) for v in getattr(ga, part)], [value_info(v) for v in getattr(gb, part)]
        if a != b:
            errors.append(f"{name}: graph {part}s {a} vs {b}")
    if (torch_model.ir_version, [(o.domain, o.version) for o in torch_model.opset_import]) != \
            (ours.ir_version, [(o.domain, o.version) for o in ours.opset_import]):
        errors.append(f"{name}: IR version or opsets differ")
    return errors


def answer(path: str, run: list, extra: list) -> str:
    """memplan's JSON with the fields that name the file itself removed, in memplan's key order; serve's
    max_position_cap too (the config states MAX_POSITIONS, the ONNX file nothing)."""
    out = subprocess.run([MEMPLAN, run[0], path, *extra, *run[1:]], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError(f"memplan {run[0]} {path}: exit {out.returncode}: {out.stderr}")
    j = json.loads(out.stdout, object_pairs_hook=collections.OrderedDict)
    for key in ("model", "file_bytes", "producer", "max_position_cap"):
        j.pop(key, None)
    if "--tied-embeddings" in extra and isinstance(j.get("configuration"), str):  # the claim, named in the line
        j["configuration"] = j["configuration"].replace(", tied by shape", "")
    return json.dumps(j, indent=1)


def compare_answers(name: str, onnx_path: str, config_path: str, graph: str, tied: bool = False) -> list:
    # A tied config's folded graph (decode, prefill) records its tie, which torch's export does not: memplan holds
    # that head once by default, as it holds the export's lookalike copy under --tied-embeddings shape.
    errors = []
    for run in GRAPHS[graph][1]:
        claim = ["--tied-embeddings", "shape"] if tied and graph != "train" and run[0] in ("estimate", "serve") else []
        a, b = answer(onnx_path, run, claim), answer(config_path, run, ["--graph", graph])
        if a != b:
            diff = [f"{x} | {y}" for x, y in zip(a.splitlines(), b.splitlines()) if x != y][:3]
            errors.append(f"{name}: memplan {' '.join(run)} differs: {diff}")
    return errors


def main() -> int:
    torch.set_num_threads(1)
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model_type, cfg) in CONFIGS.items():
            config_path = os.path.join(tmp, f"{name}.json")
            with open(config_path, "w") as f:
                json.dump(config_json(model_type, cfg), f, indent=2)
            for graph, (zoo_file, _) in GRAPHS.items():
                ours_path = os.path.join(tmp, f"{name}_{graph}_memplan.onnx")
                subprocess.run([DUMP, config_path, graph, ours_path], check=True)
                ours = onnx.load(ours_path, load_external_data=False)
                torch_path = os.path.join(tmp, f"{name}_{graph}_torch.onnx")
                exported = torch_export(cfg, graph)
                onnx.save_model(exported, torch_path)
                label = f"{name} --graph {graph}"
                found = compare_graphs(label, exported, ours)
                found += compare_answers(label, torch_path, config_path, graph, cfg.tie_word_embeddings)
                if name == "llama_tiny":  # the committed zoo export too
                    zoo_path = os.path.join(ROOT, "tests", "models", zoo_file)
                    found += compare_graphs(f"{label} (zoo {zoo_file})", onnx.load(zoo_path, load_external_data=False), ours)
                    found += compare_answers(f"{label} (zoo {zoo_file})", zoo_path, config_path, graph)
                print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
                errors += found
        for name, cfg in ARCH_CONFIGS.items():
            config_path = os.path.join(tmp, f"{name}.json")
            with open(config_path, "w") as f:
                json.dump(arch_config_json(name, cfg), f, indent=2)
            # hf_archs.DecoderWithCache as export_llama_kv.py exports it (constant folding: Gemma's RMSNorm
            # 1 + weight becomes an initializer).
            for graph in ("decode", "prefill"):
                ours_path = os.path.join(tmp, f"{name}_{graph}_memplan.onnx")
                subprocess.run([DUMP, config_path, graph, ours_path], check=True)
                ours = onnx.load(ours_path, load_external_data=False)
                torch.manual_seed(zoo.SEED)
                module = hf_archs.DecoderWithCache(cfg, past=graph == "decode")
                zoo.fill_distinct(module)
                exported = export_llama_kv.trace(module.eval(), export_params=True)
                label = f"{name} --graph {graph}"
                found = compare_graphs(label, exported, ours)
                if cfg.sliding_window is None:  # a window is refused outside serve --engine vllm: no answers to compare
                    torch_path = os.path.join(tmp, f"{name}_{graph}_torch.onnx")
                    onnx.save_model(exported, torch_path)
                    found += compare_answers(label, torch_path, config_path, graph, cfg.tie_word_embeddings)
                print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
                errors += found
            ours_path = os.path.join(tmp, f"{name}_train_memplan.onnx")
            subprocess.run([DUMP, config_path, "train", ours_path], check=True)
            ours = onnx.load(ours_path, load_external_data=False)
            torch.manual_seed(zoo.SEED)
            module = hf_archs.Decoder(cfg)
            zoo.fill_distinct(module)
            exported = export_llama.trace(module.eval(), training=True, export_params=True)
            torch_path = os.path.join(tmp, f"{name}_train_torch.onnx")
            onnx.save_model(exported, torch_path)
            label = f"{name} --graph train"
            found = compare_graphs(label, exported, ours) + compare_answers(label, torch_path, config_path, "train")
            count = sum(int(np.prod(t.dims)) for t in ours.graph.initializer)
            if count != cfg.parameter_count():
                found.append(f"{label}: {count:,} parameters in memplan's graph, {cfg.parameter_count():,} by hand")
            print(f"{label}: {len(ours.graph.node)} nodes, {'OK' if not found else 'FAILED'}", flush=True)
            errors += found
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
