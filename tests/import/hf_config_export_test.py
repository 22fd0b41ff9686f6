#!/usr/bin/python3
"""memplan export: a config.json's graph written as a weight-less ONNX file.

Every exported file must be (1) a model onnx.checker accepts (check_model on the path, so the external-data file
it names is looked up beside it; then ONNX's shape inference in strict mode with type checks; the test creates
that file as an all-zero sparse file of the size the offsets name, since memplan writes no weights), and (2) the
same model to memplan: `estimate --json` and `inspect --json` on the file are byte for byte those on the config,
but for the "model" field that names the path and inspect's "file_bytes", that path's size. The graph itself is
checked against torch.onnx.export by hf_config_test.py; this test checks the file carries all of it. Then the refusals: an ONNX file as input, the
config as output, no --graph, -o -, each one message and exit 2, the config untouched.

Needs MEMPLAN_BIN (set by ctest).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIGS = os.path.join(ROOT, "tests", "models", "hf_configs")
MEMPLAN = os.environ.get("MEMPLAN_BIN", os.path.join(ROOT, "build", "memplan"))

DECODE_DIMS = ["--batch", "2", "--dim", "sequence_length=1", "--dim", "past_sequence_length=127",
               "--dim", "total_sequence_length=128"]
PREFILL_DIMS = ["--batch", "2", "--dim", "sequence_length=64", "--dim", "total_sequence_length=64"]
TRAIN_DIMS = ["--batch", "2", "--dim", "seq=32"]
DIMS = {"train": TRAIN_DIMS, "decode": DECODE_DIMS, "prefill": PREFILL_DIMS}
# (config, graph, the estimates compared). Llama-3.2-1B: tied head; Qwen2.5-0.5B: q/k/v biases; Mistral-7B-v0.1:
# a sliding window (train only: its decode and prefill are refused for the config and so for export); Qwen3-8B:
# q_norm and k_norm.
CASES = [
    ("Llama-3.2-1B", "train", [TRAIN_DIMS + ["--mode", "train"], TRAIN_DIMS + ["--mode", "train", "--lora-rank", "8",
                                                                                "--lora-targets", "q_proj|v_proj"]]),
    ("Llama-3.2-1B", "decode", [DECODE_DIMS, DECODE_DIMS + ["--runtime", "onnxruntime", "--dtype", "fp16"]]),
    ("Llama-3.2-1B", "prefill", [PREFILL_DIMS]),
    ("Qwen2.5-0.5B", "train", [TRAIN_DIMS + ["--mode", "train", "--precision", "amp-bf16"]]),
    ("Qwen2.5-0.5B", "decode", [DECODE_DIMS]),
    ("Mistral-7B-v0.1", "train", [TRAIN_DIMS + ["--mode", "train", "--checkpoint", "sqrt"]]),
    ("Qwen3-8B", "decode", [DECODE_DIMS + ["--dtype", "bf16"]]),
]


def memplan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([MEMPLAN, *args], capture_output=True, text=True, timeout=300)


def without_model(text: str) -> str:
    d = json.loads(text)
    d.pop("model", None)  # the path given
    d.pop("file_bytes", None)  # inspect: that path's size (the config's, the ONNX file's)
    return json.dumps(d, sort_keys=True)


def check_file(tmp: str, name: str, graph: str, estimates: list) -> list:
    errors = []
    config = os.path.join(CONFIGS, f"{name}.json")
    out = os.path.join(tmp, f"{name}_{graph}.onnx")
    p = memplan("export", config, "--graph", graph, "-o", out)
    if p.returncode != 0 or not os.path.isfile(out):
        return [f"{name} {graph}: export exit {p.returncode}: {p.stderr}"]
    if not p.stderr.startswith(f"memplan: wrote {out}: "):
        errors.append(f"{name} {graph}: export said {p.stderr!r}")
    model = onnx.load(out, load_external_data=False)
    size, locations = 0, set()
    for t in model.graph.initializer:
        entries = {e.key: e.value for e in t.external_data}
        locations.add(entries.get("location"))
        size = max(size, int(entries["offset"]) + int(entries["length"]))
    if locations != {os.path.basename(out) + ".data"}:
        errors.append(f"{name} {graph}: the weights' file is {sorted(map(str, locations))}, not <OUT>.data")
    with open(out + ".data", "wb") as f:
        f.truncate(size)  # sparse: no disk is used for the zeros
    try:
        onnx.checker.check_model(out)
        # check_model's full_check would write the inferred shapes over the file: infer into another one.
        onnx.shape_inference.infer_shapes_path(out, out + ".inferred", check_type=True, strict_mode=True)
        os.remove(out + ".inferred")
    except Exception as e:  # onnx.checker.ValidationError, onnx.shape_inference.InferenceError
        errors.append(f"{name} {graph}: onnx.checker refuses the exported file: {e}")
    os.remove(out + ".data")
    for command, extra in [("inspect", DIMS[graph])] + \
                          [("estimate", e) for e in estimates]:
        a = memplan(command, config, "--graph", graph, *extra, "--json")
        b = memplan(command, out, *extra, "--json")
        if a.returncode != 0 or b.returncode != 0:
            errors.append(f"{name} {graph}: {command} {' '.join(extra)}: exit {a.returncode} on the config, "
                          f"{b.returncode} on the file: {a.stderr}{b.stderr}")
        elif without_model(a.stdout) != without_model(b.stdout):
            errors.append(f"{name} {graph}: {command} {' '.join(extra)} differs between the config and its export")
    return errors


def check_refusals(tmp: str) -> list:
    errors = []
    config = os.path.join(tmp, "config.json")
    shutil.copy(os.path.join(CONFIGS, "Llama-3.2-1B.json"), config)
    with open(config, "rb") as f:
        before = f.read()
    onnx_file = os.path.join(ROOT, "tests", "models", "gpt_tiny.onnx")
    out = os.path.join(tmp, "out.onnx")
    for args, says in [
        ([onnx_file, "--graph", "train", "-o", out], "converts a Hugging Face config.json"),
        ([onnx_file, "-o", out], "converts a Hugging Face config.json"),
        ([config, "--graph", "train", "-o", config], "is the model itself"),
        ([config, "-o", out], "say which with --graph"),
        ([config, "--graph", "decoder", "-o", out], "--graph decoder"),
        ([config, "--graph", "train", "-o", "-"], "give it a path"),
        ([config, "--graph", "train"], "--output is required"),
        ([config, "--graph", "train", "-o", out, "--batch", "2"], "--batch"),
    ]:
        p = memplan("export", *args)
        if p.returncode != 2 or says not in p.stderr or "Traceback" in p.stderr:
            errors.append(f"export {' '.join(args)}: exit {p.returncode}, {p.stderr!r} (expected exit 2 saying {says!r})")
        if os.path.exists(out):
            errors.append(f"export {' '.join(args)} wrote {out}")
    with open(config, "rb") as f:
        if f.read() != before:
            errors.append("the config was changed")
    # An existing output is replaced, as plan's -o replaces its file.
    with open(out, "wb") as f:
        f.write(b"old")
    p = memplan("export", config, "--graph", "train", "-o", out)
    if p.returncode != 0 or onnx.load(out, load_external_data=False).graph.name == "":
        errors.append(f"export over an existing file: exit {p.returncode}: {p.stderr}")
    return errors


def main() -> int:
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, graph, estimates in CASES:
            errors += check_file(tmp, name, graph, estimates)
        errors += check_refusals(tmp)
    for e in errors:
        print("FAIL:", e)
    print(f"{len(CASES)} exported graphs, refusals: {'ok' if not errors else f'{len(errors)} failures'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
