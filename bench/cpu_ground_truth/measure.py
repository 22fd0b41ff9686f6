#!/usr/bin/python3
"""CPU ground truth for memplan's training-step peaks: run zoo models for one training step under
torch.profiler(profile_memory=True) and compute the peak of live tensor bytes from its allocation events.

    /usr/bin/python3 bench/cpu_ground_truth/measure.py                 # resnet18, mobilenet_v2, gpt_tiny -> measurements.json
    /usr/bin/python3 bench/cpu_ground_truth/measure.py --models gpt_tiny --out /tmp/m.json

Protocol (bench/cpu_ground_truth/README.md has the reasoning):
  1. build the zoo module (tests/models/zoo.py, fp32, train mode), its optimizer, one batch of inputs and
     targets;
  2. run one warm-up step, so that the optimizer states exist (the steady state);
  3. optimizer.zero_grad(set_to_none=True): the previous step's gradients are freed;
  4. live at this point: parameters, buffers, optimizer states, inputs and targets = baseline_bytes,
     summed from the tensors themselves;
  5. profile exactly one step: forward, cross-entropy loss on the logits, backward, optimizer.step();
  6. accumulate the profiler's CPU allocation events (+size on allocation, -size on free) in time order;
     the maximum of that running sum is peak_increment_bytes; peak_bytes = baseline_bytes + increment.
PyTorch's CPU allocator has no cache: every event is one tensor storage being allocated or freed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import onnx
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS_DIR = os.path.join(ROOT, "tests", "models")
sys.path.insert(0, MODELS_DIR)
import zoo  # noqa: E402
import export_llama  # noqa: E402  (tiny_module: the module the Llama exports were traced from)
import hf_moe  # noqa: E402  (the plain-PyTorch mixture-of-experts decoders the config.json graphs equal)
import llama  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "tests", "import"))
import hf_moe_test  # noqa: E402  (moe_config_json: the config.json transformers writes for a MoeConfig)


def memplan_training_peak(binary: str, config: str, batch: int, seq: int, *flags: str) -> int:
    """memplan's figure for a config.json's training step as tests/accuracy/accuracy.py counts it: `estimate CONFIG
    --graph train --mode train --runtime ideal --torch 1.13 --zero-grad set-to-none` with `flags` (precision,
    optimizer, ...), the resident parameters and states plus the step's live bytes at the peak, the batch (input
    ids, targets) included as the measured baseline includes it."""
    e = json.loads(subprocess.run(
        [binary, "estimate", config, "--graph", "train", "--mode", "train", "--runtime", "ideal", "--batch",
         str(batch), "--dim", f"seq={seq}", "--torch", "1.13", "--zero-grad", "set-to-none", *flags, "--json"],
        cwd=ROOT, capture_output=True, text=True, check=True).stdout)
    return e["resident_bytes"] + e["lower_bound_bytes"]


def write_measurements(path: str, script: str, rows: List[Dict]) -> None:
    """Writes a gated measurement file (tests/accuracy/accuracy.py reads its "measurements"): the command that
    produced it (`/usr/bin/python3 <script>`), the date, torch's and Python's versions, then the rows."""
    data = {"command": "/usr/bin/python3 " + script, "date": datetime.date.today().isoformat(),
            "torch": torch.__version__, "python": platform.python_version(), "measurements": rows}
    with open(path, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


def measure_batches(path: str, script: str, seq: int, measured_peak, memplan_peak, batches=(2, 8)) -> None:
    """The bf16 truth scripts' loop: for each batch, the measured row (measured_peak(batch)) beside memplan's answer
    (memplan_peak(batch)), printed as a table, then the rows written to `path` (write_measurements)."""
    print(f"{'batch':>5} {'seq':>4} {'measured B':>11} {'memplan B':>10} {'error %':>8}")
    rows = []
    for batch in batches:
        rows.append(measured_peak(batch))
        measured, predicted = rows[-1]["peak_bytes"], memplan_peak(batch)
        print(f"{batch:>5} {seq:>4} {measured:>11,} {predicted:>10,} {100 * (predicted - measured) / measured:+8.2f}")
    write_measurements(path, script, rows)


def _load_protocol():
    """The protocol's functions live once, in the memplan package's python/memplan/_torch_protocol.py
    (memplan.torch.measure runs the same protocol on a user's module); loaded by path, so that this script needs
    no built module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("memplan_torch_protocol",
                                                  os.path.join(ROOT, "python", "memplan", "_torch_protocol.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_protocol = _load_protocol()
tensor_bytes = _protocol.tensor_bytes
optimizer_state_tensors = _protocol.optimizer_state_tensors
allocation_events = _protocol.allocation_events
peak_of = _protocol.peak_of
make_optimizer = _protocol.make_optimizer  # SGD lr 0.01 momentum 0.9 / Adam lr 1e-4, foreach=True


class Config(NamedTuple):
    model: str
    batch: int
    seq: Optional[int]  # text models only
    optimizer: str  # "momentum" (SGD, momentum 0.9) or "adam"
    checkpoint: bool
    # Which parameters train: a regular expression searched in parameter names (= the initializer names of
    # the training export), memplan's --trainable; None: every parameter trains.
    trainable: Optional[str] = None
    # "cross-entropy" (F.cross_entropy on the logits) or "chunked-ce:N" (torchtune's CEWithChunkedOutputLoss over
    # the decoder's N output chunks; Llama models only), memplan's --loss.
    loss: str = "cross-entropy"
    # torch.utils.checkpoint's implementation: "reentrant" (use_reentrant=True, torch 1.13's default and
    # transformers') or "non-reentrant" (use_reentrant=False: saved-tensor hooks, recomputed on the first unpack;
    # what torch 2's checkpoint_wrapper, so torchtune and litgpt, run). Llama models only.
    checkpoint_impl: str = "reentrant"


SIZES = {"resnet18": [(2, None), (8, None)], "mobilenet_v2": [(2, None), (8, None)],
         "gpt_tiny": [(2, 512), (8, 512)], "gpt": [(1, 128), (2, 128)],
         "llama_tiny": [(2, 128), (8, 128)], "llama_tiny_lora": [(2, 128), (8, 128)],
         "llama_tiny_lora_all": [(2, 128), (8, 128)], "moe_tiny": [(2, 64), (8, 64)]}
# GPT-2 small takes minutes per step on 2 shared cores: measured only when asked for (--models gpt).
DEFAULT_MODELS = ["resnet18", "mobilenet_v2", "gpt_tiny", "llama_tiny", "llama_tiny_lora", "llama_tiny_lora_all",
                  "moe_tiny"]
# Which parameters train, and whether with checkpointing, per model (default: all, without and with).
# llama_tiny: full fine-tune; only the last decoder layer (layers.3.*) trains, the embedding, layers 0-2,
# the final norm and lm_head frozen. llama_tiny_lora (q/v) and llama_tiny_lora_all (all seven projections):
# the PEFT-style exports, only the adapters train.
VARIANTS = {
    "llama_tiny": [(None, False), (None, True), (r"^layers\.3\.", False)],
    "llama_tiny_lora": [("lora_", False), ("lora_", True)],
    "llama_tiny_lora_all": [("lora_", False)],
    "moe_tiny": [(None, False)],
}


def default_configs(models: Sequence[str], loss: str = "cross-entropy") -> List[Config]:
    """Another loss than cross-entropy is measured on the full fine-tune without checkpointing only."""
    return [Config(model, batch, seq, optimizer, ckpt, trainable, loss)
            for model in models
            for batch, seq in SIZES[model]
            for optimizer in ("momentum", "adam")
            for trainable, ckpt in (VARIANTS.get(model, [(None, False), (None, True)]) if loss == "cross-entropy"
                                    else [(None, False)])]


# ---------------------------------------------------------------------------------------------------
# Checkpoint segments. The boundaries are tensors of the model's ONNX training export
# (tests/models/<model>_train.onnx), so memplan can be given `--checkpoint at:<the same list>`.
# Meaning of a list B1..Bk: each piece of the graph from B(i) to B(i+1) is one checkpointed segment
# (torch.utils.checkpoint, reentrant, the 1.13 default: it keeps only B(i) and recomputes the piece in
# backward); what comes before B1 and after Bk runs normally.


def onnx_scope_output(model: onnx.ModelProto, scope: str) -> str:
    """The one tensor produced by a node of module scope `scope` (e.g. "/layer1/") and used outside it.
    Constant nodes are left out: the exporter shares equal constants between blocks."""
    produced_inside = {o for n in model.graph.node
                       if n.name.startswith(scope) and n.op_type != "Constant" for o in n.output}
    used_outside = {i for n in model.graph.node if not n.name.startswith(scope) for i in n.input}
    used_outside |= {o.name for o in model.graph.output}
    escaping = sorted(produced_inside & used_outside)
    if len(escaping) != 1:
        raise SystemExit(f"scope {scope}: expected one output tensor, found {escaping}")
    return escaping[0]


def onnx_consumer_output(model: onnx.ModelProto, inputs: Sequence[str]) -> str:
    """The output of the node that consumes all of `inputs` (e.g. the Add of two embeddings)."""
    for node in model.graph.node:
        if all(i in node.input for i in inputs):
            return node.output[0]
    raise SystemExit(f"no node consumes {inputs}")


def load_training_export(model: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(MODELS_DIR, f"{model}_train.onnx"), load_external_data=False)


class StepFunctions(NamedTuple):
    forward: Callable  # (module, inputs, use_checkpoint) -> logits
    boundaries: Callable  # () -> ONNX tensor names of the checkpoint boundaries
    build: Callable = lambda model: zoo.build_model(model).module  # (model) -> module
    inputs: Callable = lambda model, batch, seq: zoo.make_inputs(model, batch, seq)  # -> tuple of inputs
    vocab: Callable = lambda model: zoo.text_config(model).vocab  # text models: the targets' range


def resnet_forward(m, inputs, use_checkpoint: bool):
    x = m.maxpool(m.relu(m.bn1(m.conv1(inputs[0]))))
    for layer in (m.layer1, m.layer2, m.layer3, m.layer4):
        x = checkpoint(layer, x) if use_checkpoint else layer(x)
    return m.fc(torch.flatten(m.avgpool(x), 1))


def resnet_boundaries(model: str) -> List[str]:
    graph = load_training_export(model)
    return [onnx_scope_output(graph, s) for s in ("/maxpool/", "/layer1/", "/layer2/", "/layer3/", "/layer4/")]


def mobilenet_forward(m, inputs, use_checkpoint: bool):
    x = m.features[0](inputs[0])
    for block in m.features[1:]:
        x = checkpoint(block, x) if use_checkpoint else block(x)
    x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
    return m.classifier(x)


def mobilenet_boundaries(model: str) -> List[str]:
    graph = load_training_export(model)
    return [onnx_scope_output(graph, f"/features/features.{i}/") for i in range(19)]


def gpt_forward(m, inputs, use_checkpoint: bool):
    input_ids = inputs[0]
    x = m.embed(input_ids)
    mask = zoo.causal_additive_mask(input_ids.size(1), input_ids.device)
    for block in m.blocks:
        x = checkpoint(block, x, mask) if use_checkpoint else block(x, mask)
    return m.head(x)


def gpt_boundaries(model: str) -> List[str]:
    graph = load_training_export(model)
    embedded = onnx_consumer_output(graph, [onnx_scope_output(graph, "/wte/"), onnx_scope_output(graph, "/wpe/")])
    return [embedded] + [onnx_scope_output(graph, f"/blocks.{i}/") for i in range(zoo.text_config(model).layers)]


# model -> (llama config, LoRA adapters): the modules of llama_tiny_train.onnx, llama_tiny_lora_train.onnx and
# llama_tiny_lora_all_train.onnx (tests/models/export_llama.py, all_exports()).
LLAMA = {"llama_tiny": ("llama_tiny", None), "llama_tiny_lora": ("llama_tiny", llama.LORA_DEFAULT),
         "llama_tiny_lora_all": ("llama_tiny", llama.LORA_ALL_LINEAR)}
LLAMA_CONFIG = {model: config for model, (config, _) in LLAMA.items()}


def llama_build(model: str):
    """The module export_llama.py traced the model's training export from."""
    return export_llama.tiny_module(*LLAMA[model])


def llama_forward(m, inputs, use_checkpoint: bool, output_chunks: int = 0, chunk_tokens: int = 0,
                  reentrant: bool = True):
    """llama.Llama.forward, each decoder layer checkpointed when asked. output_chunks N > 0: the output projection
    applied to each of N chunks of the last hidden state, returned as a list, as torchtune's
    TransformerDecoder.chunked_output does (torchtune/modules/transformer.py: `[self.output(chunk) for chunk in
    last_hidden_state.chunk(self.num_output_chunks, dim=1)]`). chunk_tokens K > 0: the output projection applied to
    each split of K positions, as litgpt's GPT.forward with lm_head_chunk_size=K (litgpt/model.py, v0.5.13).
    reentrant False: checkpoint(..., use_reentrant=False)."""
    input_ids = inputs[0]
    seq = input_ids.size(1)
    x = m.embed_tokens(input_ids)
    if use_checkpoint and reentrant and not x.requires_grad:
        # A frozen embedding (LoRA): the reentrant checkpoint gives no grads to the adapters inside a segment
        # whose inputs do not require grad. Hugging Face's answer, which PEFT training uses with reentrant
        # checkpointing: PreTrainedModel.enable_input_require_grads (transformers/modeling_utils.py), a
        # forward hook on the input embeddings doing output.requires_grad_(True); the same, inline.
        x.requires_grad_(True)
    cos, sin = llama.rotary_cos_sin(seq, m.cfg.head_dim, m.cfg.rope_theta, input_ids.device)
    mask = llama.causal_additive_mask(seq, input_ids.device)
    for layer in m.layers:
        x = (checkpoint(layer, x, cos, sin, mask, use_reentrant=reentrant) if use_checkpoint
             else layer(x, cos, sin, mask))
    if output_chunks > 0:
        return [m.lm_head(chunk) for chunk in m.norm(x).chunk(output_chunks, dim=1)]
    if chunk_tokens > 0:
        return [m.lm_head(piece) for piece in m.norm(x).split(chunk_tokens, dim=1)]
    return m.lm_head(m.norm(x))


def llama_boundaries(model: str) -> List[str]:
    graph = load_training_export(model)
    layers = llama.CONFIGS[LLAMA_CONFIG[model]].num_hidden_layers
    return [onnx_scope_output(graph, "/embed_tokens/")] + [onnx_scope_output(graph, f"/layers.{i}/") for i in range(layers)]


def llama_steps(model: str) -> StepFunctions:
    cfg = llama.CONFIGS[LLAMA_CONFIG[model]]
    return StepFunctions(llama_forward, lambda: llama_boundaries(model), build=llama_build,
                         inputs=lambda _, batch, seq: llama.make_inputs(cfg, batch, seq, zoo.SEED),
                         vocab=lambda _: cfg.vocab_size)


# moe_tiny: a Qwen3-MoE decoder (q/k norms, grouped-query attention, 8 experts, 2 a token, normalised top-k) in
# tests/models/hf_moe.py's plain PyTorch, whose graph memplan builds node for node from the config.json below
# (tests/import/hf_moe_test.py checks that equality). Its routing is the balanced one (hf_moe.py's docstring): the
# (token, slot) pairs are dealt to the experts in turn, N·k/E each, a routing a fixed router can choose. memplan is
# given the config.json itself (--graph train), not an export.
MOE_TINY = hf_moe.MoeConfig(
    "qwen3_moe", llama.LlamaConfig("moe_tiny", "made up", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256, rope_theta=1e6,
                                   rms_norm_eps=1e-6, tie_word_embeddings=False, head_dim_override=16, qk_norm=True),
    8, 2, 64, norm_topk_prob=True)
MOE_TINY_CONFIG = "bench/cpu_ground_truth/moe_tiny.json"


def moe_build(_model: str):
    torch.manual_seed(zoo.SEED)
    module = hf_moe.decoder(MOE_TINY)
    zoo.fill_distinct(module)
    with open(os.path.join(ROOT, MOE_TINY_CONFIG), "w") as f:  # the file memplan reads, written from the same config
        json.dump(hf_moe_test.moe_config_json(MOE_TINY), f, indent=2)
        f.write("\n")
    return module


STEPS: Dict[str, StepFunctions] = {
    "resnet18": StepFunctions(resnet_forward, lambda: resnet_boundaries("resnet18")),
    "mobilenet_v2": StepFunctions(mobilenet_forward, lambda: mobilenet_boundaries("mobilenet_v2")),
    "gpt_tiny": StepFunctions(gpt_forward, lambda: gpt_boundaries("gpt_tiny")),
    "gpt": StepFunctions(gpt_forward, lambda: gpt_boundaries("gpt")),
    "llama_tiny": llama_steps("llama_tiny"),
    "llama_tiny_lora": llama_steps("llama_tiny_lora"),
    "llama_tiny_lora_all": llama_steps("llama_tiny_lora_all"),
    "moe_tiny": StepFunctions(llama_forward, lambda: [], build=moe_build,
                              inputs=lambda _, batch, seq: llama.make_inputs(MOE_TINY.base, batch, seq, zoo.SEED),
                              vocab=lambda _: MOE_TINY.base.vocab_size),
}


# ---------------------------------------------------------------------------------------------------
# One training step


def make_targets(cfg: Config, gen: torch.Generator) -> torch.Tensor:
    if cfg.seq is None:
        return torch.randint(0, zoo.NUM_CLASSES, (cfg.batch,), generator=gen)
    return torch.randint(0, STEPS[cfg.model].vocab(cfg.model), (cfg.batch, cfg.seq), generator=gen)


def set_trainable(module, pattern: Optional[str]) -> None:
    """requires_grad as memplan's --trainable PATTERN decides it: a parameter trains iff the pattern is found
    in its name. A module that froze parameters itself (the LoRA module, as PEFT does) must agree."""
    if pattern is None:
        return
    for name, p in module.named_parameters():
        trains = re.search(pattern, name) is not None
        if not p.requires_grad and trains:
            raise SystemExit(f"--trainable {pattern} trains {name}, which the module froze")
        p.requires_grad_(trains)


def chunked_ce_loss(logits: List[torch.Tensor], labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """torchtune's CEWithChunkedOutputLoss.forward (torchtune/modules/loss/ce_chunked_output_loss.py) for torch 1.13,
    without its DTensor branch: the labels cut as the logits were, each logits chunk upcast with .float() and
    cross-entropy'd with reduction="sum", the sum divided by the count of labels not ignored."""
    total_elements = (labels != ignore_index).sum()
    label_chunks = [chunk.reshape(-1) for chunk in labels.tensor_split(len(logits), dim=1)]
    logit_chunks = [chunk.reshape(-1, chunk.size(-1)) for chunk in logits]
    total_loss = 0.0
    for logits_chunk, labels_chunk in zip(logit_chunks, label_chunks):
        total_loss += F.cross_entropy(logits_chunk.float(), labels_chunk, ignore_index=ignore_index, reduction="sum")
    return total_loss / total_elements


def litgpt_chunked_ce(logits: List[torch.Tensor], targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """litgpt's chunked_cross_entropy (litgpt/utils.py, v0.5.13) on a head chunked by the model: each chunk flattened
    to rows, the targets split by the first chunk's length, F.cross_entropy per chunk with reduction="none" in the
    logits' own dtype (no .float()), the per-row losses concatenated and summed, divided by the count of targets
    not ignored (at least 1)."""
    rows = [piece.reshape(-1, piece.size(-1)) for piece in logits]
    labels = [piece.reshape(-1) for piece in targets.split(logits[0].size(1), dim=1)]
    per_row = [F.cross_entropy(r, t, ignore_index=ignore_index, reduction="none") for r, t in zip(rows, labels)]
    count = (targets != ignore_index).sum()
    return torch.cat(per_row).sum() / count.maximum(torch.ones_like(count))


def training_step(module, inputs, targets, optimizer, forward, use_checkpoint: bool, loss_name: str,
                  reentrant: bool = True) -> None:
    if loss_name.startswith("chunked-ce-tokens:"):
        # litgpt's finetune/lora.py fit(): model(input_ids, lm_head_chunk_size=K), the last chunk's last position
        # dropped (a view), the loss on targets[..., 1:]; `logits` stays referenced through backward and the step.
        logits = forward(module, inputs, use_checkpoint, chunk_tokens=int(loss_name.split(":")[1]))
        logits[-1] = logits[-1][..., :-1, :]
        loss = litgpt_chunked_ce(logits, targets[..., 1:])
    elif loss_name.startswith("chunked-ce:"):
        # torchtune's recipes (recipes/full_finetune_single_device.py, _loss_step) drop the output list after the
        # loss, before backward: `del logits  # free logits otherwise it peaks backward memory` (memplan's
        # --free-output).
        logits = forward(module, inputs, use_checkpoint, int(loss_name.split(":")[1]))
        loss = chunked_ce_loss(logits, targets)
        del logits
    else:
        logits = forward(module, inputs, use_checkpoint, **({} if reentrant else {"reentrant": False}))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    loss.backward()
    optimizer.step()


def profile_steady_step(module, optimizer, tensors, step: Callable[[], None]) -> Dict:
    """Protocol steps 2-6 (README): a warm-up step, zero_grad(set_to_none=True), the baseline summed from the live
    tensors (parameters, buffers, optimizer states, the batch's `tensors`), then one profiled step. Returns the
    baseline's parts, the peak fields of peak_of, peak_bytes, baseline_bytes and the profiled step's seconds."""
    step()
    optimizer.zero_grad(set_to_none=True)
    parts = {
        "parameter_bytes": tensor_bytes(module.parameters()),
        "buffer_bytes": tensor_bytes(module.buffers()),
        "optimizer_state_bytes": tensor_bytes(optimizer_state_tensors(optimizer)),
        "input_bytes": tensor_bytes(tensors),
    }
    started = time.time()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    seconds = time.time() - started
    peak = peak_of(allocation_events(prof))
    baseline = sum(parts.values())
    return {"peak_bytes": baseline + peak["peak_increment_bytes"], "baseline_bytes": baseline, **parts, **peak,
            "profiled_step_seconds": round(seconds, 2)}


def measure(cfg: Config) -> Dict:
    steps = STEPS[cfg.model]
    module = steps.build(cfg.model).train()
    set_trainable(module, cfg.trainable)
    # Only the trainable parameters go to the optimizer, as PEFT and the Hugging Face Trainer pass them.
    optimizer = make_optimizer(cfg.optimizer, [p for p in module.parameters() if p.requires_grad])
    gen = torch.Generator().manual_seed(zoo.SEED + 2)
    inputs = steps.inputs(cfg.model, cfg.batch, cfg.seq or 0)
    targets = make_targets(cfg, gen)

    measured = profile_steady_step(
        module, optimizer, list(inputs) + [targets],
        lambda: training_step(module, inputs, targets, optimizer, steps.forward, cfg.checkpoint, cfg.loss,
                              cfg.checkpoint_impl == "reentrant"))
    extra = {}
    if cfg.trainable is not None:
        extra = {"trainable": cfg.trainable,
                 "trainable_parameter_bytes": tensor_bytes(p for p in module.parameters() if p.requires_grad)}
    return {
        "model": cfg.model,
        "onnx": MOE_TINY_CONFIG if cfg.model == "moe_tiny" else f"tests/models/{cfg.model}_train.onnx",
        "batch": cfg.batch,
        "seq": cfg.seq,
        "precision": "fp32",
        "optimizer": cfg.optimizer,
        "optimizer_settings": describe_optimizer(optimizer),
        "loss": cfg.loss,
        # torchtune's chunked loss drops the output before backward (--free-output); litgpt's keeps it.
        **({"output_freed": True} if cfg.loss.startswith("chunked-ce:") else {}),
        "checkpoint": steps.boundaries() if cfg.checkpoint else [],
        **({"checkpoint_impl": cfg.checkpoint_impl} if cfg.checkpoint and cfg.checkpoint_impl != "reentrant" else {}),
        **extra,
        **measured,
    }


def describe_optimizer(optimizer: torch.optim.Optimizer) -> str:
    group = optimizer.param_groups[0]
    keys = ["lr", "momentum", "betas", "eps", "weight_decay", "foreach"]
    settings = ", ".join(f"{k}={group[k]}" for k in keys if k in group)
    return f"{type(optimizer).__name__}({settings})"


def config_key(entry: Dict) -> tuple:
    return (entry["model"], entry["batch"], entry["seq"] or 0, entry["optimizer"], len(entry["checkpoint"]) > 0,
            entry.get("trainable") or "", entry.get("loss", "cross-entropy"), entry.get("checkpoint_impl", "reentrant"))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", choices=sorted(STEPS), help="measure only these models")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "measurements.json"),
                        help="JSON file; entries of other configs already in it are kept")
    parser.add_argument("--loss", default="cross-entropy",
                        help="cross-entropy, chunked-ce:N or chunked-ce-tokens:K (Llama models: torchtune's or litgpt's "
                             "chunked loss, full fine-tune "
                             "without checkpointing only)")
    parser.add_argument("--checkpoint-impl", default="reentrant", choices=["reentrant", "non-reentrant"],
                        help="non-reentrant: the checkpointed full fine-tunes of Llama models only, each decoder layer "
                             "under checkpoint(use_reentrant=False)")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)

    if args.loss != "cross-entropy" and not (args.loss.startswith("chunked-ce") and args.models and
                                             all(m in LLAMA for m in args.models)):
        raise SystemExit("--loss chunked-ce:N / chunked-ce-tokens:K needs --models with Llama models only")
    configs = default_configs(args.models or DEFAULT_MODELS, args.loss)
    if args.checkpoint_impl != "reentrant":
        if not (args.models and all(m in LLAMA for m in args.models)) or args.loss != "cross-entropy":
            raise SystemExit("--checkpoint-impl non-reentrant needs --models with Llama models only, cross-entropy")
        configs = [c._replace(checkpoint_impl=args.checkpoint_impl) for c in configs if c.checkpoint]
    existing = {"measurements": []}
    if os.path.exists(args.out):
        with open(args.out) as f:
            existing = json.load(f)
    command = "/usr/bin/python3 bench/cpu_ground_truth/measure.py" + (
        " " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])) if (argv or sys.argv[1:]) else "")
    run_info = {
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
    }
    results = {config_key(e): e for e in existing["measurements"]}
    for cfg in configs:
        entry = measure(cfg)
        entry["run"] = run_info
        results[config_key(entry)] = entry
        print(f"{cfg.model:13s} batch {cfg.batch} seq {cfg.seq or '-':>4} {cfg.optimizer:8s} "
              f"ckpt {('yes' if cfg.checkpoint_impl == 'reentrant' else 'nre') if cfg.checkpoint else 'no ':3s} "
              f"{cfg.trainable or 'all':12s} {cfg.loss:13s} peak {entry['peak_bytes'] / 2**20:9.2f} MiB "
              f"(baseline {entry['baseline_bytes'] / 2**20:8.2f} + {entry['peak_increment_bytes'] / 2**20:8.2f}) "
              f"[{entry['profiled_step_seconds']} s]", flush=True)
    existing["measurements"] = [results[k] for k in sorted(results)]
    existing["protocol"] = "bench/cpu_ground_truth/README.md"
    with open(args.out, "w") as f:
        json.dump(existing, f, indent=1)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
