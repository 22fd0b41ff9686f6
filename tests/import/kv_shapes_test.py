#!/usr/bin/python3
"""memplan's inferred shapes of the KV-cache decoders against ONNX Runtime running them, tensor by tensor.

tests/models/kv/ort_shapes.json holds the shape and dtype of every top-level tensor of llama_tiny_kv,
llama_tiny_kv_prefill, llama_tiny_kv_merged and llama_tiny_gqa as onnxruntime-node computed them at prefill
and decode points (validate/ort/run_shapes.py, validate/ort/README.md): an independent source, recorded once;
ONNX Runtime is not needed here. For each run this binds the same dimensions (`memplan inspect --json
--dim ...`) and requires every recorded tensor to appear in memplan's `tensors` with the same shape and
dtype.

    /usr/bin/python3 tests/import/kv_shapes_test.py            # the plain, prefill and GQA decoders
    /usr/bin/python3 tests/import/kv_shapes_test.py --merged   # the merged decoder, at --value use_cache_branch=0/1

The merged decoder's runs need `--value NAME=V` (the If's condition). Where the binary does not know the
flag, --merged exits 77 (CTest's skip code, SKIP_RETURN_CODE) saying so.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("MEMPLAN_BIN", os.path.join(SRC, "build", "memplan"))
RECORD = os.path.join(SRC, "tests", "models", "kv", "ort_shapes.json")
SKIP = 77


def memplan_tensors(model: str, dims, values):
    cmd = [BIN, "inspect", os.path.join(SRC, "tests", "models", model), "--json"]
    for k, v in sorted(dims.items()):
        cmd += ["--dim", f"{k}={v}"]
    for k, v in sorted(values.items()):
        cmd += ["--value", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"exit {proc.returncode}: {proc.stderr.strip()}"
    return {t["name"]: t for t in json.loads(proc.stdout)["tensors"]}, None


def main(argv) -> int:
    merged = "--merged" in argv
    with open(RECORD) as f:
        record = json.load(f)
    if merged:
        help_text = subprocess.run([BIN, "inspect", "--help"], capture_output=True, text=True).stdout
        if "--value" not in help_text:
            print(f"SKIP: {BIN} inspect has no --value flag, which the merged decoder's runs need to pick the "
                  "If branch (use_cache_branch); the flag comes with the control-flow work (issue 14)")
            return SKIP
    runs = [r for r in record["runs"] if (r["model"] == "llama_tiny_kv_merged.onnx") == merged]
    matched = total = 0
    failures = []
    for run in runs:
        tensors, error = memplan_tensors(run["model"], run["dims"], run["values"])
        expected = run["tensors"]
        total += len(expected)
        if tensors is None:
            failures.append(f"{run['id']}: memplan failed: {error}")
            continue
        bad = []
        for name, want in expected.items():
            got = tensors.get(name)
            if got is None:
                bad.append(f"{name}: not in memplan's tensors (ORT: {want['dtype']} {want['shape']})")
            elif got["shape"] != want["shape"] or got["dtype"] != want["dtype"]:
                bad.append(f"{name}: memplan {got['dtype']} {got['shape']}, ORT {want['dtype']} {want['shape']}")
        matched += len(expected) - len(bad)
        print(f"{run['id']}: {len(expected) - len(bad)}/{len(expected)} tensors match")
        failures += [f"{run['id']}: {b}" for b in bad]
    print(f"{matched}/{total} tensor shapes match ONNX Runtime ({record['runner']}) over {len(runs)} runs")
    for f in failures[:40]:
        print("MISMATCH", f)
    if len(failures) > 40:
        print(f"... and {len(failures) - 40} more")
    return 1 if failures or not runs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
