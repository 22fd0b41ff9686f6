#!/usr/bin/python3
"""Inference of moe_tiny (measure.py's MOE_TINY, memplan given its config.json) and of llama_tiny (memplan given
tests/models/llama_tiny.onnx, the inference export of the same module) on the CPU under torch.no_grad, against
memplan; the measurements are written to inference_truth.json, which tests/accuracy/accuracy.py gates at 3 %.

    /usr/bin/python3 bench/cpu_ground_truth/moe_inference.py [--memplan build/memplan] [--out FILE]

The twin's decoder layers keep the attention weights as transformers' do (DecoderLayer.keeps_attention_weights).
The same protocol as measure.py's training step, for one forward: a warm-up forward, then one forward under
torch.profiler(profile_memory=True); measured = parameters + inputs + the peak of the allocation events.
memplan: estimate MODEL --mode inference --runtime pytorch (the config with --graph train), live bytes at the peak
(resident + lower bound) less the cuBLAS workspace a GPU run holds and the CPU does not.
"""
import argparse
import datetime
import json
import os
import platform
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import measure  # noqa: E402

# Bind the attention's weights as transformers' decoder layer does (`hidden_states, _ = self.self_attn(...)`: held
# until the layer returns; tests/models/llama.py DecoderLayer.keeps_attention_weights). The forward's ops are the
# same; only how long Python references the probabilities changes.
measure.llama.DecoderLayer.keeps_attention_weights = True
measure.hf_moe.MoeDecoderLayer.keeps_attention_weights = True


# model -> what memplan is given, and the extra arguments it takes.
MODELS = {"moe_tiny": (measure.MOE_TINY_CONFIG, ["--graph", "train"]), "llama_tiny": ("tests/models/llama_tiny.onnx", [])}
SEQ = 64


def memplan_args(model: str, batch: int, seq: int):
    """memplan's arguments for one row (accuracy.py runs the same)."""
    path, extra = MODELS[model]
    return ["estimate", path, *extra, "--mode", "inference", "--runtime", "pytorch", "--batch", str(batch), "--dim",
            f"seq={seq}", "--precision", "fp32", "--json"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    ap.add_argument("--out", default=os.path.join(HERE, "inference_truth.json"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    rows = []
    print(f"{'model':>10} {'batch':>5} {'seq':>4} {'measured B':>11} {'memplan B':>10} {'error %':>8}")
    for model in MODELS:
        steps = measure.STEPS[model]
        for batch in (2, 8):
            module = steps.build(model).eval()
            inputs = steps.inputs(model, batch, SEQ)
            with torch.no_grad():
                steps.forward(module, inputs, False)
                baseline = measure.tensor_bytes(module.parameters()) + measure.tensor_bytes(list(inputs))
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                            profile_memory=True) as prof:
                    steps.forward(module, inputs, False)
            measured = baseline + measure.peak_of(measure.allocation_events(prof))["peak_increment_bytes"]
            e = json.loads(subprocess.run([a.memplan, *memplan_args(model, batch, SEQ)], cwd=ROOT, capture_output=True,
                                          text=True, check=True).stdout)
            predicted = e["resident_bytes"] + e["lower_bound_bytes"] - e["breakdown"]["workspace"]
            print(f"{model:>10} {batch:>5} {SEQ:>4} {measured:>11,} {predicted:>10,} "
                  f"{100 * (predicted - measured) / measured:+8.2f}")
            rows.append({"model": model, "onnx": MODELS[model][0], "batch": batch, "seq": SEQ, "precision": "fp32",
                         "peak_bytes": measured, "baseline_bytes": baseline,
                         "parameter_bytes": measure.tensor_bytes(module.parameters())})
    run = {"command": "/usr/bin/python3 bench/cpu_ground_truth/moe_inference.py",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
           "threads": torch.get_num_threads()}
    with open(a.out, "w") as f:
        json.dump({"measurements": [dict(r, run=run) for r in rows], "protocol": "bench/cpu_ground_truth/README.md",
                   "note": "one forward under torch.no_grad; memplan --mode inference --runtime pytorch"}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
