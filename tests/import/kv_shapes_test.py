#!/usr/bin/python3
"""memplan's inferred shapes of the KV-cache decoders against ONNX Runtime running them, tensor by tensor.

tests/models/kv/ort_shapes.json holds the shape and dtype of every top-level tensor of llama_tiny_kv,
llama_tiny_kv_prefill, llama_tiny_kv_merged and llama_tiny_gqa as onnxruntime-node computed them at prefill
and decode points (validate/ort/run_shapes.py, validate/ort/README.md): an independent source, recorded once;
ONNX Runtime is not needed here. For each run this binds the same dimensions (`memplan inspect --json
--dim ...`) and requires every recorded tensor to appear in memplan's `tensors` with the same shape and
dtype.

    /usr/bin/python3 tests/import/kv_shapes_test.py            # plain, prefill, GQA; merged at prefill
    /usr/bin/python3 tests/import/kv_shapes_test.py --merged   # the merged decoder, at --value use_cache_branch=0/1

The real-size exports (llama3_1_8b_kv, llama3_2_1b_kv: weight-less, ONNX Runtime cannot run them) are
checked against PyTorch instead: tests/models/kv/pytorch_shapes.json holds every graph output's shape from
the full-size module on the meta device (export_llama_kv.py), and the parameter count must be PyTorch's
sum(p.numel()) from expected_shapes.json (plus, for the tied Llama-3.2-1B, the embedding's folded
transposed copy the inference export stores a second time: vocab x hidden = 128256 x 2048).

The merged decoder's decode runs need `--value NAME=V` (the If's condition: at past > 0 the prefill branch
cannot even be inferred, its mask being longer than its tokens); its prefill runs (past 0, where both branches
agree) are checked without it. Where the binary does not know the
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
PYTORCH = os.path.join(SRC, "tests", "models", "kv", "pytorch_shapes.json")
EXPECTED = os.path.join(SRC, "tests", "models", "expected_shapes.json")
# (PyTorch's parameter count's entry in expected_shapes.json, elements stored twice by the inference export)
REAL = {"llama3_1_8b_kv": ("llama3_1_8b", 0), "llama3_2_1b_kv": ("llama3_2_1b", 128256 * 2048)}
SKIP = 77


def inspect(model: str, dims, values):
    cmd = [BIN, "inspect", os.path.join(SRC, "tests", "models", model), "--json"]
    for k, v in sorted(dims.items()):
        cmd += ["--dim", f"{k}={v}"]
    for k, v in sorted(values.items()):
        cmd += ["--value", f"{k}={v}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, f"exit {proc.returncode}: {proc.stderr.strip()}"
    return json.loads(proc.stdout), None


def real_sizes():
    """The weight-less real-size decoders against PyTorch's meta-device shapes and parameter count."""
    with open(PYTORCH) as f:
        recorded = json.load(f)
    with open(EXPECTED) as f:
        expected = json.load(f)["models"]
    failures, checked, wrong = [], 0, 0
    for stem, (source, doubled) in REAL.items():
        for point in recorded[stem]["points"]:
            out, error = inspect(recorded[stem]["model"], point["dims"], {})
            if out is None:
                failures.append(f"{stem} {point['dims']}: memplan failed: {error}")
                continue
            got = {o["name"]: o["shape"] for o in out["outputs"]}
            for name, shape in point["outputs"].items():
                checked += 1
                if got.get(name) != shape:
                    wrong += 1
                    failures.append(f"{stem} {point['dims']}: {name}: memplan {got.get(name)}, PyTorch {shape}")
            want = expected[source]["pytorch_parameters"] + doubled
            if out["parameters"]["count"] != want:
                failures.append(f"{stem}: memplan counts {out['parameters']['count']} parameters, PyTorch {want}")
    print(f"real sizes: {checked - wrong}/{checked} output shapes as PyTorch's meta-device run")
    return failures


def memplan_tensors(model: str, dims, values):
    out, error = inspect(model, dims, values)
    return ({t["name"]: t for t in out["tensors"]}, None) if out else (None, error)


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
    is_merged = lambda r: r["model"] == "llama_tiny_kv_merged.onnx"
    if merged:
        runs = [r for r in record["runs"] if is_merged(r)]
    else:
        # The merged decoder's prefill runs (past 0) need no --value: there both If branches compute the
        # same shapes (the with-past graph at past 0 is the prefill graph), so they are checked here too.
        runs = [r for r in record["runs"] if not is_merged(r) or r["values"].get("use_cache_branch") == 0]
    runs = [dict(r, values=r["values"] if merged else {}) for r in runs]
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
    if not merged:
        failures += real_sizes()
    print(f"{matched}/{total} tensor shapes match ONNX Runtime ({record['runner']}) over {len(runs)} runs")
    for f in failures[:40]:
        print("MISMATCH", f)
    if len(failures) > 40:
        print(f"... and {len(failures) - 40} more")
    return 1 if failures or not runs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
