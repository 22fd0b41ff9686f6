"""Issue 23: `memplan serve` on mixtures of experts must answer byte for byte as before a speed change.

Runs every command of the matrix below under an old binary and a new one, each twice (the JSON answer with --json,
and the table without), and compares exit code, stdout and stderr byte for byte. A difference is printed (the
first differing line) and the script exits 1. The matrix: the MoE configs of tests/models/hf_configs (mixtral,
qwen2_moe, qwen3_moe, deepseek_v2, deepseek_v3, gpt_oss) and fuzz/corpus/hf_config's tiny MoE configs, under
--engine vllm (its default and --engine-version rules), sglang, trtllm, ortgenai and all, with --tp 1/2/8,
--enable-expert-parallel, --quantization fp8 or the checkpoint's own quantization (DeepSeek-V3's block fp8,
gpt-oss's MXFP4), --kv-cache-dtype fp8, one GPU and the catalog table. Refusals (exit 2) are answers too.

  /usr/bin/python3 bench/serve_moe_identity.py --old /tmp/sgm_old_memplan --new build/memplan
  --cache DIR      keep each binary's outputs in DIR/<binary's name>/ and reuse them (the old binary's while
                   iterating on the new one)
  --only SUBSTR    the commands whose line contains SUBSTR (repeatable)
  --jobs N         commands run at once (default 1)

Runs from the source root; prints one line per command (same / DIFF, the new binary's user seconds) and a summary.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import tempfile

H = "tests/models/hf_configs/"
F = "fuzz/corpus/hf_config/"
DECODE = ["--graph", "decode"]
TINY = ["tiny_mixtral", "tiny_mixtral_fp8", "tiny_qwen2_moe", "tiny_qwen2_moe_fp8_block", "tiny_qwen3_moe",
        "tiny_deepseek_v2_grouped", "tiny_deepseek_v2_lite_greedy", "tiny_deepseek_v2_norm_topk_prob",
        "tiny_deepseek_v3", "tiny_deepseek_v3_lora"]
BIG = ["Mixtral-8x7B-v0.1", "Qwen1.5-MoE-A2.7B", "Qwen2-57B-A14B", "Qwen3-30B-A3B", "Qwen3-235B-A22B",
       "DeepSeek-V2-Lite", "DeepSeek-V3", "gpt-oss-20b", "gpt-oss-120b"]
OLD_STEPS = ["--max-batched-tokens", "2048", "--max-num-seqs", "256"]


def variants(big):
    """The options each config runs under (the config path and --graph decode go before them)."""
    gpu = ["--gpu", "H200" if big else "H100-80GB"]
    v = [
        [*gpu],
        [*gpu, "--tp", "2"],
        [*gpu, "--tp", "8"],
        [*gpu, "--tp", "2", "--enable-expert-parallel"],
        [*gpu, "--tp", "8", "--enable-expert-parallel"],
        [*gpu, "--quantization", "fp8"],
        [*gpu, "--tp", "8", "--quantization", "fp8", "--enable-expert-parallel"],
        [*gpu, "--kv-cache-dtype", "fp8"],
        [*gpu, "--tp", "2", "--engine-version", "0.8", *OLD_STEPS],
        [*gpu, "--tp", "2", "--enable-expert-parallel", "--engine-version", "0.10.1", *OLD_STEPS],
        [*gpu, "--engine-version", "0.6.5", *OLD_STEPS],
        [*gpu, "--enforce-eager", "--engine-version", "0.21"],
        [*gpu, "--tp", "2", "--data-parallel-size", "2", "--enable-expert-parallel"],
        [*gpu, "--engine", "sglang", "--tp", "2"],
        [*gpu, "--engine", "trtllm", "--tp", "2"],
        [*gpu, "--engine", "ortgenai"],
        [*gpu, "--engine", "all", "--tp", "8"],
        ["--tp", "8"],  # the catalog table
    ]
    if big:  # the slow ones: one GPU's answers and one catalog table
        v = [v[0], v[2], v[4], v[5], v[7], v[13], v[16], v[17]]
    else:
        v += [["--tp", "8", "--enable-expert-parallel"], ["--memory", "4GiB", "--arch", "sm90", "--tp", "2"]]
    return v


def commands():
    out = []
    for name in TINY:
        for v in variants(False):
            out.append(["serve", F + name + ".json", *DECODE, *v])
    for name in BIG:
        for v in variants(True):
            out.append(["serve", H + name + ".json", *DECODE, *v])
    return out


def run(binary, args, cache):
    """(exit code, stdout, stderr, user seconds) of one run, from `cache` when it holds them."""
    key = hashlib.sha256(json.dumps(args).encode()).hexdigest()[:20]
    path = os.path.join(cache, key + ".json") if cache else None
    if path and os.path.exists(path):
        with open(path) as f:
            r = json.load(f)
        return r["rc"], r["stdout"], r["stderr"], r["user"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([binary, *args], stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0), err.seek(0)
        r = {"args": args, "rc": os.waitstatus_to_exitcode(status), "stdout": out.read().decode(),
             "stderr": err.read().decode(), "user": usage.ru_utime}
    if path:
        os.makedirs(cache, exist_ok=True)
        with open(path, "w") as f:
            json.dump(r, f)
    return r["rc"], r["stdout"], r["stderr"], r["user"]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a.splitlines(), b.splitlines())):
        if x != y:
            return f"line {i + 1}:\n    old: {x[:300]}\n    new: {y[:300]}"
    return f"lengths {len(a)} and {len(b)}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--old", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--cache")
    p.add_argument("--only", action="append", default=[])
    p.add_argument("--jobs", type=int, default=1)
    a = p.parse_args()
    cmds = [c for c in commands() if not a.only or any(s in " ".join(c) for s in a.only)]
    # The table of every tiny config's command; of the big ones', one GPU's (H200, --tp 1) and the catalog's.
    table = lambda c: c[1].startswith(F) or c[-2:] == ["--gpu", "H200"] or "--gpu" not in c
    runs = [c + j for c in cmds for j in (["--json"], []) if j or table(c)]
    caches = [os.path.join(a.cache, os.path.basename(b)) if a.cache else None for b in (a.old, a.new)]

    def both(args):
        return run(a.old, args, caches[0]), run(a.new, args, caches[1])

    differ = 0
    rcs = {}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        for args, (old, new) in zip(runs, pool.map(both, runs)):
            same = old[:3] == new[:3]
            rcs[old[0]] = rcs.get(old[0], 0) + 1
            line = " ".join(args)
            print(f"{'same' if same else 'DIFF'} rc={old[0]} new_user={new[3]:.2f}s old_user={old[3]:.2f}s  {line}",
                  flush=True)
            if not same:
                differ += 1
                for what, i in (("exit", 0), ("stdout", 1), ("stderr", 2)):
                    if old[i] != new[i]:
                        print(f"  {what}: " + (f"{old[i]} -> {new[i]}" if i == 0 else first_difference(old[i], new[i])))
    print(f"{len(runs)} runs, {len(runs) - differ} identical, {differ} differ; old exit codes: "
          + ", ".join(f"{k}: {v}" for k, v in sorted(rcs.items())))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
