#!/usr/bin/python3
"""Inference of moe_tiny (measure.py's MOE_TINY) on the CPU under torch.no_grad, against memplan: not gated.

    /usr/bin/python3 bench/cpu_ground_truth/moe_inference.py [--memplan build/memplan]

The same protocol as measure.py's training step, for one forward: a warm-up forward, then one forward under
torch.profiler(profile_memory=True); measured = parameters + inputs + the peak of the allocation events.
memplan: estimate bench/cpu_ground_truth/moe_tiny.json --graph train --mode inference --runtime pytorch, live
bytes at the peak (resident + lower bound) less the cuBLAS workspace a GPU run holds and the CPU does not.
"""
import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import measure  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--memplan", default=os.path.join(ROOT, "build", "memplan"))
    a = ap.parse_args()
    torch.set_num_threads(2)
    steps = measure.STEPS["moe_tiny"]
    print(f"{'batch':>5} {'seq':>4} {'measured B':>11} {'memplan B':>10} {'error %':>8}")
    for batch in (2, 8):
        module = steps.build("moe_tiny").eval()
        inputs = steps.inputs("moe_tiny", batch, 64)
        with torch.no_grad():
            steps.forward(module, inputs, False)
            baseline = measure.tensor_bytes(module.parameters()) + measure.tensor_bytes(list(inputs))
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
                steps.forward(module, inputs, False)
        measured = baseline + measure.peak_of(measure.allocation_events(prof))["peak_increment_bytes"]
        e = json.loads(subprocess.run(
            [a.memplan, "estimate", measure.MOE_TINY_CONFIG, "--graph", "train", "--mode", "inference", "--runtime",
             "pytorch", "--batch", str(batch), "--dim", "seq=64", "--precision", "fp32", "--json"],
            cwd=ROOT, capture_output=True, text=True, check=True).stdout)
        predicted = e["resident_bytes"] + e["lower_bound_bytes"] - e["breakdown"]["workspace"]
        print(f"{batch:>5} {64:>4} {measured:>11,} {predicted:>10,} {100 * (predicted - measured) / measured:+8.2f}")


if __name__ == "__main__":
    main()
