"""Import speed and peak memory: `memplan inspect` against Python's onnx.load + onnx.shape_inference.infer_shapes
on the same files: resnet50 and vit_b_16 exported WITH inline weights (made by the export script, never committed).

  /usr/bin/python3 bench/import/bench.py [--memplan build/memplan] [--dir /tmp/memplan-import-bench]

Each command runs in its own child process; time is wall-clock (median of --repeat runs), peak RSS is the
child's ru_maxrss from wait4.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}")
    return elapsed, usage.ru_maxrss / 1024  # KiB -> MiB


def measure(cmd, repeat):
    runs = [run(cmd) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), max(r[1] for r in runs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memplan", default=os.path.join(SRC, "build", "memplan"))
    ap.add_argument("--dir", default="/tmp/memplan-import-bench")
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    if not all(os.path.exists(os.path.join(a.dir, f"{m}.onnx")) for m in ("resnet50", "vit_b_16")):
        subprocess.run(["/usr/bin/python3", os.path.join(SRC, "tests/models/export_zoo.py"), "--inline-weights", a.dir],
                       check=True, stdout=subprocess.DEVNULL)
    print(f"{'model':<10} {'file MiB':>9} {'memplan s':>10} {'RSS MiB':>8} {'onnx py s':>10} {'RSS MiB':>8} {'speedup':>8}")
    for m in ("resnet50", "vit_b_16"):
        f = os.path.join(a.dir, f"{m}.onnx")
        ms, mr = measure([a.memplan, "inspect", f, "--batch", "1", "--json"], a.repeat)
        code = f"import onnx, onnx.shape_inference as si; si.infer_shapes(onnx.load({f!r}))"
        ps, pr = measure(["/usr/bin/python3", "-c", code], max(1, a.repeat // 2))
        print(f"{m:<10} {os.path.getsize(f) / 2**20:9.1f} {ms:10.3f} {mr:8.1f} {ps:10.2f} {pr:8.1f} {ps / ms:7.0f}x")


if __name__ == "__main__":
    main()
