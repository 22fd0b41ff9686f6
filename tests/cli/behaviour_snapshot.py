"""Behaviour snapshot: the JSON of inspect, estimate, plan and fit for every zoo model, byte for byte.

The snapshot was recorded from the code *before* the cost-model/CLI redesign (issue 11) and proves only
that the redesign changed nothing; it derives no number independently (the other tests do that). A real
bug fixed later updates the snapshot in its own commit, with the reason in the message.

  /usr/bin/python3 tests/cli/behaviour_snapshot.py --write   # record (from the source root)
  /usr/bin/python3 tests/cli/behaviour_snapshot.py           # check (ctest: cli_behaviour_snapshot)

Needs MEMPLAN_BIN (default build/memplan) and runs from MEMPLAN_SOURCE_DIR (default: the source root).
"""
import concurrent.futures
import json
import os
import subprocess
import sys

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN = os.environ.get("MEMPLAN_BIN", os.path.join(SRC, "build", "memplan"))
SNAPSHOT = os.path.join(SRC, "tests", "cli", "behaviour.snapshot.json")

M = "tests/models/"
SEQ = ["--dim", "seq=128"]
INFERENCE = {  # model -> dims it needs
    "resnet18": [], "resnet50": [], "mobilenet_v2": [], "efficientnet_b0": [], "vit_b_16": [],
    "gpt": SEQ, "gpt_tiny": SEQ, "bert": SEQ, "gpt_tiny_op13": SEQ, "bert_op13": SEQ,
}
TRAIN = {
    "resnet18_train": [], "resnet50_train": [], "mobilenet_v2_train": [], "efficientnet_b0_train": [],
    "vit_b_16_train": [], "gpt_train": SEQ, "gpt_tiny_train": SEQ, "bert_train": SEQ,
}


def cases():
    out = []
    for name, dims in INFERENCE.items():
        model = M + name + ".onnx"
        out.append(["inspect", model, "--batch", "2", *dims, "--json"])
        for runtime in ("pytorch", "onnxruntime", "ideal"):
            out.append(["estimate", model, "--batch", "4", *dims, "--runtime", runtime, "--json"])
        out.append(["estimate", model, "--batch", "4", *dims, "--runtime", "pytorch", "--dtype", "fp16", "--json"])
        out.append(["estimate", model, "--batch", "4", *dims, "--schedule", "memory", "--json"])
        out.append(["estimate", model, "--batch", "4", *dims, "--runtime", "pytorch", "--attention", "sdpa",
                    "--arch", "sm80", "--dtype", "bf16", "--json"])
        out.append(["plan", model, "--batch", "4", *dims, "--runtime", "pytorch"])
        out.append(["plan", model, "--batch", "4", *dims, "--runtime", "onnxruntime", "--alignment", "256"])
        out.append(["fit", model, *dims, "--gpu", "A100-80GB", "--json"])
    for name, dims in TRAIN.items():
        model = M + name + ".onnx"
        train = ["estimate", model, "--batch", "4", *dims, "--mode", "train"]
        out.append(["inspect", model, "--batch", "2", *dims, "--json"])
        for precision in ("fp32", "amp-fp16", "amp-bf16", "bf16"):
            out.append([*train, "--precision", precision, "--json"])
        out.append([*train, "--precision", "amp-bf16", "--checkpoint", "sqrt", "--json"])
        out.append([*train, "--checkpoint", "every:2", "--optimizer", "momentum", "--json"])
        out.append([*train, "--gpus", "4", "--shard", "zero3", "--precision", "amp-fp16", "--json"])
        out.append([*train, "--gpus", "4", "--shard", "zero2", "--grad-accum", "4", "--json"])
        out.append([*train, "--gpus", "4", "--shard", "fsdp", "--precision", "amp-bf16", "--checkpoint", "sqrt", "--json"])
        # torchvision's ViT names its blocks encoder_layer_N: no <prefix>.<N>. blocks, so --fsdp-wrap names them.
        wrap = ["--fsdp-wrap", "(encoder_layer_[0-9]+)"] if name.startswith("vit") else []
        out.append([*train, "--pp", "2", "--micro-batches", "4", *wrap, "--precision", "amp-bf16", "--json"])
        out.append([*train, "--gpus", "2", "--shard", "ddp", "--optimizer", "adam", "--optimizer-impl", "single-tensor", "--json"])
        out.append([*train, "--runtime", "ideal", "--optimizer", "sgd", "--loss", "mse", "--json"])
        out.append([*train, "--precision", "fp16", "--optimizer-impl", "foreach-torch1", "--loss", "none", "--json"])
        out.append([*train, "--precision", "amp-fp16", "--attention", "sdpa", "--arch", "sm80",
                    "--optimizer-impl", "fused", "--json"])
        out.append([*train, "--gpus", "2", "--shard", "ddp", "--gradient-as-bucket-view", "--grad-accum", "2", "--json"])
        out.append([*train, "--checkpoint", "auto", "--budget", "200MiB", "--json"])
        out.append(["fit", model, *dims, "--mode", "train", "--precision", "amp-bf16", "--gpu", "A100-80GB",
                    "--global-batch", "512", "--json"])
    # The catalog table (one probe sequence per GPU today) and a search over seq, on the small models.
    out.append(["fit", M + "gpt_tiny_train.onnx", "--dim", "seq=128", "--mode", "train", "--json"])
    out.append(["fit", M + "resnet18.onnx", "--json"])
    out.append(["fit", M + "gpt_tiny.onnx", "--batch", "8", "--search", "seq", "--memory", "1GiB", "--json"])
    out.append(["check", M + "gpt_tiny.onnx", "--batch", "8", *SEQ, "--budget", "1GiB", "--json"])
    # serve and estimate on the tiny decoder with a KV cache (tests/models/serve/make_kv_tiny.py).
    kv = M + "serve/kv_tiny.onnx"
    eager = ["--engine", "eager"]
    out.append(["serve", kv, *eager, "--memory", "1GiB", "--context", "4096", "--json"])
    out.append(["serve", kv, *eager, "--gpu", "T4", "--context", "333", "--block-size", "32", "--max-batched-tokens",
                "128", "--dtype", "fp16", "--json"])
    out.append(["serve", kv, *eager, "--memory", "1MiB", "--context", "100", "--runtime", "ideal", "--json"])
    out.append(["serve", kv, *eager, "--memory", "64MiB", "--context", "100", "--runtime", "onnxruntime", "--json"])
    out.append(["serve", kv, *eager, "--context", "512", "--json"])
    # vLLM's start-up rule (the default engine): one budget, and the catalog table.
    out.append(["serve", kv, "--memory", "64MiB", "--reserve", "0", "--context", "64", "--max-batched-tokens", "64",
                "--max-num-seqs", "64", "--json"])
    out.append(["serve", kv, "--gpu", "T4", "--context", "333", "--block-size", "32", "--dtype", "fp16",
                "--kv-cache-dtype", "fp8", "--json"])
    out.append(["serve", kv, "--context", "512", "--json"])
    # --data-parallel-size on a dense model: each rank a replica of the one-rank answer, the tokens twice in all.
    out.append(["serve", kv, "--memory", "64MiB", "--reserve", "0", "--context", "64", "--max-batched-tokens", "64",
                "--max-num-seqs", "64", "--data-parallel-size", "2", "--json"])
    out.append(["estimate", kv, "--batch", "3", "--dim", "past_sequence_length=99", "--dim", "sequence_length=16",
                "--json"])
    return out


def run(args):
    p = subprocess.run([BIN, *args], cwd=SRC, capture_output=True, text=True, timeout=900)
    return {"args": args, "exit_code": p.returncode, "stdout": p.stdout}


# Under ASan+UBSan (scripts/test.sh sets MEMPLAN_SANITIZED=1) the invocations on the small models only, so that
# CI's time stays bounded; the full set runs in the plain build.
SANITIZED_MODELS = ("gpt_tiny", "gpt_tiny_op13", "resnet18", "gpt_tiny_train", "resnet18_train", "mobilenet_v2_train")


def main():
    write = "--write" in sys.argv[1:]
    todo = cases()
    if os.environ.get("MEMPLAN_SANITIZED") and not write:
        todo = [c for c in todo if os.path.basename(c[1])[:-len(".onnx")] in SANITIZED_MODELS]
        print(f"sanitized run: {len(todo)} of {len(cases())} invocations (the small models)")
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(run, todo))
    if write:
        with open(SNAPSHOT, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
        print(f"wrote {len(results)} outputs to {SNAPSHOT}")
        return 0
    with open(SNAPSHOT) as f:
        expected = {json.dumps(r["args"]): r for r in json.load(f)}
    failed = 0
    for got in results:
        key = json.dumps(got["args"])
        want = expected.get(key)
        if want is None:
            print(f"NOT IN SNAPSHOT: memplan {' '.join(got['args'])}")
            failed += 1
        elif want["exit_code"] != got["exit_code"] or want["stdout"] != got["stdout"]:
            print(f"DIFFERS: memplan {' '.join(got['args'])} (exit {got['exit_code']}, snapshot {want['exit_code']})")
            for a, b in zip(want["stdout"].splitlines(), got["stdout"].splitlines()):
                if a != b:
                    print(f"  snapshot: {a[:300]}\n  now:      {b[:300]}")
                    break
            failed += 1
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
