#!/usr/bin/python3
"""Record the shape of every tensor of the KV-cache decoders (tests/models/export_llama_kv.py) as ONNX Runtime
computes it running them, into tests/models/kv/ort_shapes.json. tests/import/kv_shapes_test.py compares
memplan's inferred shapes with the recording, tensor by tensor.

    /usr/bin/python3 tests/models/export_llama_kv.py          # the tiny exports' weights (.onnx.data)
    ORT_NODE_DIR=/work/ort-node /usr/bin/python3 validate/ort/run_shapes.py

(validate/ort/README.md: installing onnxruntime-node.) For each model a temporary copy lists every node
output of its top-level graph as a graph output, so that ONNX Runtime returns all of them; the committed
models are not touched. The tensors inside the merged decoder's If branches are not graph-level values:
the branches are llama_tiny_kv and llama_tiny_kv_prefill, whose own runs record them.

Points (batch, new tokens, past length): prefill at past 0 and decode steps, for every style; the merged
decoder with use_cache_branch false (prefill, past tensors of length 0, as optimum feeds them) and true;
GroupQueryAttention also with a shared KV buffer (past and present one buffer of SHARED_BUFFER positions,
ONNX Runtime GenAI's past_present_share_buffer).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "tests", "models")
OUT = os.path.join(MODELS, "kv", "ort_shapes.json")
LAYERS, KV_HEADS, HEAD_DIM, VOCAB = 4, 2, 32, 1000  # llama_tiny (tests/models/llama.py)
SHARED_BUFFER = 32

PREFILL = [(1, 7, 0), (2, 5, 0), (3, 1, 0)]
DECODE = [(1, 1, 7), (2, 1, 16), (3, 4, 9)]


def points():
    runs = []
    for b, n, p in PREFILL + DECODE:
        runs.append(("llama_tiny_kv", b, n, p, {}, p))
        runs.append(("llama_tiny_kv_merged", b, n, p, {"use_cache_branch": int(p > 0)}, p))
        # ONNX Runtime's GroupQueryAttention refuses more than one new token with a past at batch > 1
        # ("batch_size must be 1 when sequence_length > 1 and past context is given"): that point at batch 1
        runs.append(("llama_tiny_gqa", 1 if n > 1 and p > 0 else b, n, p, {}, p))
    for b, n, p in PREFILL:
        runs.append(("llama_tiny_kv_prefill", b, n, 0, {}, None))
    for b, n, p in [(1, 5, 0), (2, 1, 16), (1, 4, 20)]:  # shared buffer: past tensors SHARED_BUFFER long
        runs.append(("llama_tiny_gqa", b, n, p, {"shared_buffer": SHARED_BUFFER}, SHARED_BUFFER))
    return runs


def feeds(model: onnx.ModelProto, b: int, n: int, p: int, past_len, values, rng):
    names = [i.name for i in model.graph.input]
    out = {}
    for name in names:
        if name == "input_ids":
            out[name] = {"type": "int64", "dims": [b, n], "data": rng.integers(0, VOCAB, b * n).tolist()}
        elif name == "attention_mask":
            out[name] = {"type": "int64", "dims": [b, p + n], "data": [1] * (b * (p + n))}
        elif name == "position_ids":
            out[name] = {"type": "int64", "dims": [b, n], "data": [p + j for _ in range(b) for j in range(n)]}
        elif name.startswith("past_key_values."):
            dims = [b, KV_HEADS, past_len, HEAD_DIM]
            out[name] = {"type": "float32", "dims": dims,
                         "data": [round(float(x), 4) for x in rng.standard_normal(int(np.prod(dims))) * 0.5]}
        elif name == "use_cache_branch":
            out[name] = {"type": "bool", "dims": [1], "data": [bool(values["use_cache_branch"])]}
        else:
            raise SystemExit(f"run_shapes.py: no feed for input {name}")
    return out


def with_all_outputs(stem: str, tmp: str) -> str:
    model = onnx.load(os.path.join(MODELS, f"{stem}.onnx"), load_external_data=False)
    have = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name and name not in have:
                model.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
    data = os.path.join(MODELS, f"{stem}.onnx.data")
    if not os.path.exists(data):
        raise SystemExit(f"run_shapes.py: {data} is missing; run tests/models/export_llama_kv.py first")
    shutil.copyfile(data, os.path.join(tmp, f"{stem}.onnx.data"))  # a symlink out of the folder is refused
    path = os.path.join(tmp, f"{stem}.onnx")
    onnx.save(model, path)
    return path


def write(record) -> None:
    """JSON with one line per run header and one per tensor (small diffs when a shape changes)."""
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in record.items() if k != "runs"] + [' "runs": [']
    for i, run in enumerate(record["runs"]):
        head = {k: v for k, v in run.items() if k != "tensors"}
        lines.append("  " + json.dumps(head)[:-1] + ', "tensors": {')
        items = list(run["tensors"].items())
        lines += [f"   {json.dumps(k)}: {json.dumps(v)}" + ("," if j < len(items) - 1 else "") for j, (k, v) in enumerate(items)]
        lines.append("  }}" + ("," if i < len(record["runs"]) - 1 else ""))
    lines += [" ]", "}"]
    with open(OUT, "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> int:
    ort_dir = os.environ.get("ORT_NODE_DIR")
    if not ort_dir:
        raise SystemExit("run_shapes.py: set ORT_NODE_DIR (validate/ort/README.md)")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        paths, jobs, meta = {}, [], []
        for stem, b, n, p, values, past_len in points():
            if stem not in paths:
                paths[stem] = with_all_outputs(stem, tmp)
            model = onnx.load(os.path.join(MODELS, f"{stem}.onnx"), load_external_data=False)
            run_id = f"{stem} batch={b} new={n} past={p}" + "".join(f" {k}={v}" for k, v in sorted(values.items()))
            dims = {"batch_size": b, "sequence_length": n, "total_sequence_length": p + n}
            if past_len is not None:
                dims["past_sequence_length"] = past_len
            jobs.append({"id": run_id, "model": paths[stem],
                         "inputs": feeds(model, b, n, p, past_len, values, rng)})
            meta.append({"id": run_id, "model": f"{stem}.onnx", "batch": b, "new_tokens": n, "past": p,
                         "dims": dims, "values": {k: v for k, v in values.items() if k == "use_cache_branch"},
                         "shared_buffer": values.get("shared_buffer")})
        job_path, result_path = os.path.join(tmp, "job.json"), os.path.join(tmp, "result.json")
        with open(job_path, "w") as f:
            json.dump({"runs": jobs}, f)
        subprocess.run(["node", os.path.join(ROOT, "validate", "ort", "run_shapes.mjs"), job_path, result_path],
                       check=True, env=dict(os.environ, ORT_NODE_DIR=ort_dir))
        with open(result_path) as f:
            result = json.load(f)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    record = {
        "what": "shape and dtype of every top-level tensor of the KV-cache decoders, as ONNX Runtime computed them",
        "runner": f"onnxruntime-node {result['onnxruntime_node']} (npm), CPU execution provider, graph optimizations disabled",
        "command": "ORT_NODE_DIR=... /usr/bin/python3 validate/ort/run_shapes.py",
        "runs": [dict(m, tensors=dict(sorted(result["runs"][m["id"]].items()))) for m in meta],
    }
    write(record)
    total = sum(len(r["tensors"]) for r in record["runs"])
    print(f"{OUT}: {len(record['runs'])} runs, {total} tensor shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
