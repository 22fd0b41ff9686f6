#!/usr/bin/python3
"""`memplan estimate` on config.json graphs, two builds side by side in one run, and their JSON compared.

  /usr/bin/python3 bench/import/config_before_after.py --before OLD/build/memplan --after build/memplan \\
      [--repeat 3] [--timeout 120]

The two binaries alternate run by run, so a busy machine slows both alike. Each run is its own child process;
wall is wall-clock, CPU is the child's user + system time from wait4, RSS its peak. Printed: medians of
--repeat runs. Each command's --json output must be byte-identical between the builds (a speed change that
changes an answer is not a speed change): the script exits 1 otherwise. A build that runs past --timeout on a
case is shown as "> timeout" and that case is not compared. "layers" trims num_hidden_layers (a copy of the
config under /tmp) to show how the time grows with depth.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "tests", "models", "hf_configs")
TRAIN = ["--mode", "train", "--precision", "bf16"]
# (config, layers or None for the config's own, what is asked): training steps at sequence 512 in bf16, a
# 128-expert inference, and Qwen3-30B-A3B's training step at growing depth.
CASES = [
    ("Llama-3.1-8B", None, TRAIN),
    ("Llama-3.1-70B", None, TRAIN),
    ("Mixtral-8x7B-v0.1", None, TRAIN),
    ("Qwen3-30B-A3B", None, ["--mode", "inference"]),
    ("Qwen3-235B-A22B", None, ["--mode", "inference"]),
    ("Qwen3-30B-A3B", 4, TRAIN),
    ("Qwen3-30B-A3B", 8, TRAIN),
    ("Qwen3-30B-A3B", 16, TRAIN),
    ("Qwen3-30B-A3B", None, TRAIN),
]


def config_path(config, layers, tmp):
    path = os.path.join(CONFIGS, config + ".json")
    if layers is None:
        return path
    with open(path) as f:
        c = json.load(f)
    c["num_hidden_layers"] = layers
    trimmed = os.path.join(tmp, f"{config}-{layers}-layers.json")
    with open(trimmed, "w") as f:
        json.dump(c, f)
    return trimmed


def command(binary, path, extra):
    return [binary, "estimate", path, "--graph", "train", "--batch", "1", "--dim", "seq=512", *extra]


def run(cmd, timeout):
    """(wall s, CPU s, RSS MiB), or None past the timeout."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - t0 > timeout:
            p.kill()
            os.wait4(p.pid, 0)
            return None
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def json_of(cmd, timeout):
    try:
        return subprocess.run(cmd + ["--json"], capture_output=True, check=True, timeout=timeout).stdout
    except subprocess.TimeoutExpired:
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    differ = False
    print(f"{'config':<18} {'layers':>6} {'mode':<9} {'before wall s':>13} {'CPU s':>6} {'RSS MiB':>8} "
          f"{'after wall s':>12} {'CPU s':>6} {'RSS MiB':>8} {'JSON':>9}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for config, layers, extra in CASES:
            path = config_path(config, layers, tmp)
            outs = {w: json_of(command(b, path, extra), a.timeout) for w, b in (("before", a.before), ("after", a.after))}
            if outs["before"] is None or outs["after"] is None:
                same = "-"
            else:
                same = "same" if outs["before"] == outs["after"] else "DIFFERENT"
            differ |= same == "DIFFERENT"
            runs = {"before": [], "after": []}
            for _ in range(a.repeat):
                for which, binary in (("before", a.before), ("after", a.after)):
                    if outs[which] is not None:
                        runs[which].append(run(command(binary, path, extra), a.timeout))
            cells = []
            for w in ("before", "after"):
                if outs[w] is None or None in runs[w]:
                    cells.append(f"{'> ' + format(a.timeout, 'g'):>13} {'':>6} {'':>8}")
                else:
                    med = [statistics.median(r[k] for r in runs[w]) for k in range(3)]
                    cells.append(f"{med[0]:13.2f} {med[1]:6.2f} {med[2]:8.0f}")
            shown = layers if layers is not None else "all"
            print(f"{config:<18} {shown:>6} {extra[1]:<9} {cells[0]} {cells[1]} {same:>9}", flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
