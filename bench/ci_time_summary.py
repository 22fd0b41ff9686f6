"""Sums the per-compile CPU seconds that bench/ci_time_launcher.sh logged, by target, for two logs side by side.

Usage: python3 bench/ci_time_summary.py BEFORE.log AFTER.log   (lines: "user_s sys_s wall_s object")
"""
import collections
import sys


def per_target(path):
    cpu, files = collections.Counter(), collections.Counter()
    for line in open(path):
        user, system, _wall, obj = line.split(maxsplit=3)
        parts = obj.strip().split("/")
        target = next((p[:-4] for p in parts if p.endswith(".dir")), obj.strip())
        if target.startswith("cmTC_"):
            target = "(cmake's compiler checks)"
        cpu[target] += float(user) + float(system)
        files[target] += 1
    return cpu, files


def main():
    before, after = (per_target(p) for p in sys.argv[1:3])
    targets = sorted(set(before[0]) | set(after[0]), key=lambda t: -max(before[0][t], after[0][t]))
    print("| target | files before | CPU s before | files after | CPU s after |")
    print("|---|---:|---:|---:|---:|")
    for t in targets:
        print(f"| {t} | {before[1][t]} | {before[0][t]:.0f} | {after[1][t]} | {after[0][t]:.0f} |")
    print(f"| all compiles | {sum(before[1].values())} | {sum(before[0].values()):.0f} | "
          f"{sum(after[1].values())} | {sum(after[0].values()):.0f} |")


if __name__ == "__main__":
    main()
