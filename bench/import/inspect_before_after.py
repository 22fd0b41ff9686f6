#!/usr/bin/python3
"""`memplan inspect` time of two builds side by side, in one run, on the models export_swin_convnext.py writes.

  /usr/bin/python3 bench/import/inspect_before_after.py --before /tmp/memplan-before/build/memplan \\
      --after build/memplan --dir /tmp/memplan-bench [--repeat 15]

The two binaries alternate run by run, so a busy machine slows both alike. Each run is its own child
process; wall is wall-clock, CPU is the child's user + system time from wait4 (page faults are system
time). Printed: the median of --repeat runs.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = ["swin_t", "convnext_tiny"]


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}")
    return wall, usage.ru_utime + usage.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--dir", required=True, help="folder holding swin_t.onnx and convnext_tiny.onnx")
    ap.add_argument("--repeat", type=int, default=15)
    a = ap.parse_args()
    print(f"{'model':<14} {'nodes':>6} {'before wall s':>14} {'CPU s':>7} {'after wall s':>13} {'CPU s':>7}")
    for m in MODELS:
        path = os.path.join(a.dir, f"{m}.onnx")
        runs = {"before": [], "after": []}
        for _ in range(a.repeat):
            for which in ("before", "after"):
                binary = a.before if which == "before" else a.after
                runs[which].append(run([binary, "inspect", path, "--batch", "1"]))
        nodes = json.loads(subprocess.run([a.after, "inspect", path, "--batch", "1", "--json"], capture_output=True,
                                          text=True, check=True).stdout)["node_count"]
        cols = []
        for which in ("before", "after"):
            cols.append(statistics.median(r[0] for r in runs[which]))
            cols.append(statistics.median(r[1] for r in runs[which]))
        print(f"{m:<14} {nodes:>6} {cols[0]:14.3f} {cols[1]:7.3f} {cols[2]:13.3f} {cols[3]:7.3f}")


if __name__ == "__main__":
    main()
