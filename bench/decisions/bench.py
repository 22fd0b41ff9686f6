#!/usr/bin/python3
"""Wall and CPU time of memplan's decision commands, two binaries side by side (issues 11 and 20).

  /usr/bin/python3 bench/decisions/bench.py BEFORE_BINARY AFTER_BINARY [--repeat N]

Runs from the source root (the models are tests/models/). Each command runs N times with each binary (default 3)
and the run with the least CPU is kept (its wall and CPU time: user + system of the child,
from wait4). The `same` column says whether both binaries printed the same standard output and exit code.
"""
import argparse
import os
import subprocess
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CONFIGS = [
    ("resnet50_train amp-bf16 adamw", "tests/models/resnet50_train.onnx",
     ["--mode", "train", "--precision", "amp-bf16", "--optimizer", "adamw"], "32"),
    ("gpt_train seq=1024", "tests/models/gpt_train.onnx", ["--mode", "train", "--dim", "seq=1024"], "8"),
]

# Issue 20's commands: checkpoint auto where a boundary set fits the budget and where none does (then both binaries
# fall back to the lowest set they find), keyed by CONFIGS' name; then the inference groups, each led by the
# estimate its `x est` divides by.
CHECKPOINT_BUDGETS = {"resnet50_train amp-bf16 adamw": ("1.5GiB", "512MiB"), "gpt_train seq=1024": ("12GiB", "4GiB")}
KV = "tests/models/llama3_1_8b_kv.onnx"
KV_DIMS = ["--dim", "sequence_length=1", "--dim", "past_sequence_length=4095", "--dim", "total_sequence_length=4096"]
GROUPS = [
    ("llama3_1_8b_kv bf16 (decode)", [
        ("estimate --batch 4 (past 4095)", ["estimate", KV, "--dtype", "bf16", "--batch", "4", *KV_DIMS]),
        ("plan --batch 4 (past 4095)", ["plan", KV, "--dtype", "bf16", "--batch", "4", *KV_DIMS]),
        ("serve --gpu H100-80GB --ctx 4096", ["serve", KV, "--gpu", "H100-80GB", "--context", "4096",
                                              "--dtype", "bf16"]),
        ("  same, --tied-embeddings no", ["serve", KV, "--gpu", "H100-80GB", "--context", "4096",
                                          "--dtype", "bf16", "--tied-embeddings", "no"]),
    ]),
    ("serve/kv_tiny", [
        ("estimate --batch 1 (past 99)", ["estimate", "tests/models/serve/kv_tiny.onnx", "--batch", "1",
                                          "--dim", "past_sequence_length=99", "--dim", "sequence_length=1",
                                          "--runtime", "ideal"]),
        ("serve --memory 1MiB --context 100", ["serve", "tests/models/serve/kv_tiny.onnx", "--memory", "1MiB",
                                               "--context", "100", "--runtime", "ideal"]),
    ]),
    ("gpt seq=1024 (inference)", [
        ("estimate --batch 8", ["estimate", "tests/models/gpt.onnx", "--batch", "8", "--dim", "seq=1024"]),
        ("plan --batch 8", ["plan", "tests/models/gpt.onnx", "--batch", "8", "--dim", "seq=1024"]),
    ]),
    ("resnet50 (inference)", [
        ("estimate --batch 32", ["estimate", "tests/models/resnet50.onnx", "--batch", "32"]),
        ("plan --batch 32", ["plan", "tests/models/resnet50.onnx", "--batch", "32"]),
    ]),
]


def commands(name, model, args, batch):
    rows = [
        (f"estimate --batch {batch}", ["estimate", model, "--batch", batch, *args]),
        ("fit --gpu A100-80GB", ["fit", model, *args, "--gpu", "A100-80GB"]),
        ("fit (catalog table)", ["fit", model, *args]),
        (f"check --batch {batch} --budget 80GiB", ["check", model, "--batch", batch, *args, "--budget", "80GiB"]),
    ]
    if name in CHECKPOINT_BUDGETS:
        fits, none_fits = CHECKPOINT_BUDGETS[name]
        for budget, what in ((fits, "fits"), (none_fits, "none fits")):
            rows.append((f"ckpt auto --budget {budget} ({what})",
                         ["estimate", model, "--batch", batch, *args, "--checkpoint", "auto", "--budget", budget]))
    return rows


def run_once(binary, argv):
    start = time.perf_counter()
    p = subprocess.Popen([binary, *argv], cwd=SRC, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    return wall, usage.ru_utime + usage.ru_stime, out, p.returncode


def measure(binary, argv, repeat):
    best = None
    for _ in range(repeat):
        wall, cpu, out, rc = run_once(binary, argv)
        if best is None or cpu < best[1]:
            best = (wall, cpu, out, rc)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    before, after = os.path.abspath(a.before), os.path.abspath(a.after)

    print(f"before: {before}\nafter:  {after}\nfastest of {a.repeat} runs each; CPU = user + system; "
          f"x est = CPU / CPU of one estimate of the same binary\n")
    header = (f"| {'model':<30} | {'command':<37} | {'before wall':>11} | {'before CPU':>10} | {'x est':>6} | "
              f"{'after wall':>10} | {'after CPU':>9} | {'x est':>6} | {'same':<4} |")
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    groups = [(name, commands(name, model, args, batch)) for name, model, args, batch in CONFIGS] + GROUPS
    for name, rows in groups:
        est = {}
        for label, argv in rows:
            b = measure(before, argv, a.repeat)
            f = measure(after, argv, a.repeat)
            if label.startswith("estimate"):
                est = {"before": b[1], "after": f[1]}
            same = "yes" if (b[2], b[3]) == (f[2], f[3]) else "NO"
            print(f"| {name:<30} | {label:<37} | {b[0]:>10.3f}s | {b[1]:>9.3f}s | {b[1] / est['before']:>6.1f} | "
                  f"{f[0]:>9.3f}s | {f[1]:>8.3f}s | {f[1] / est['after']:>6.1f} | {same:<4} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
