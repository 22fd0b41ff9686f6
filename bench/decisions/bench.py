#!/usr/bin/python3
"""Wall and CPU time of memplan's decision commands, two binaries side by side (issue 11).

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


def commands(model, args, batch):
    return [
        (f"estimate --batch {batch}", ["estimate", model, "--batch", batch, *args]),
        ("fit --gpu A100-80GB", ["fit", model, *args, "--gpu", "A100-80GB"]),
        ("fit (catalog table)", ["fit", model, *args]),
        (f"check --batch {batch} --budget 80GiB", ["check", model, "--batch", batch, *args, "--budget", "80GiB"]),
    ]


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
    header = (f"| {'model':<30} | {'command':<32} | {'before wall':>11} | {'before CPU':>10} | {'x est':>6} | "
              f"{'after wall':>10} | {'after CPU':>9} | {'x est':>6} | {'same':<4} |")
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for name, model, args, batch in CONFIGS:
        est = {}
        for label, argv in commands(model, args, batch):
            b = measure(before, argv, a.repeat)
            f = measure(after, argv, a.repeat)
            if label.startswith("estimate"):
                est = {"before": b[1], "after": f[1]}
            same = "yes" if (b[2], b[3]) == (f[2], f[3]) else "NO"
            print(f"| {name:<30} | {label:<32} | {b[0]:>10.3f}s | {b[1]:>9.3f}s | {b[1] / est['before']:>6.1f} | "
                  f"{f[0]:>9.3f}s | {f[1]:>8.3f}s | {f[1] / est['after']:>6.1f} | {same:<4} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
