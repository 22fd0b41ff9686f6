"""Issue 23 ("an answer in under a second"): time memplan on Hugging Face configs, baseline binary vs new, and
prove the answers did not move.

Each command runs with --format json under both binaries, one after the other; their stdout and exit codes must
be byte-identical (a difference is printed and the script exits 1). User and system seconds and peak RSS come from
wait4's rusage of each child. The table (markdown) goes to stdout, or to --out.

  /usr/bin/python3 bench/config_speed.py --base /work/main/build/memplan --new build/memplan --out bench/config_speed.md
  --only SUBSTR     run the commands whose line contains SUBSTR (repeatable)
  --cache DIR       keep the baseline's outputs and timings in DIR and reuse them (while iterating; the recorded
                    table is made without it, so both binaries run side by side)

Runs from the source root. DeepSeek-V3's config carries a quantization_config (FP8 weights) that the train graph
refuses; a copy without that key is written to a temporary directory, as issue 23 measured it.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

H = "tests/models/hf_configs/"
TRAIN = ["--graph", "train", "--batch", "1", "--dim", "seq=2048", "--mode", "train", "--precision", "amp-bf16"]
PREFILL = ["--graph", "prefill", "--batch", "1", "--dim", "sequence_length=2048", "--dim",
           "total_sequence_length=2048", "--dtype", "bf16"]


def commands(deepseek):
    return [
        ["estimate", H + "Llama-3.1-70B.json", *TRAIN],
        ["estimate", H + "Qwen3-30B-A3B.json", *TRAIN],
        ["estimate", H + "Qwen3-235B-A22B.json", *TRAIN],
        ["estimate", H + "Mixtral-8x7B-v0.1.json", *TRAIN],
        ["estimate", H + "Qwen3-30B-A3B.json", *PREFILL],
        ["plan", H + "Qwen3-30B-A3B.json", *PREFILL],
        ["serve", H + "Qwen3-30B-A3B.json", "--graph", "decode", "--gpu", "H100-80GB", "--engine", "eager",
         "--context", "4096"],
        ["serve", H + "Qwen3-30B-A3B.json", "--graph", "decode", "--gpu", "H100-80GB", "--engine", "vllm"],
        # a decoder's estimate: the KV cache's prefill and decode steps beside the bound one
        ["estimate", H + "Qwen3-30B-A3B.json", "--graph", "decode", "--batch", "1", "--dim", "sequence_length=1",
         "--dim", "past_sequence_length=2048", "--dim", "total_sequence_length=2049", "--dtype", "bf16"],
        # fit searches the batch itself (no --batch)
        ["fit", H + "Qwen3-30B-A3B.json", "--graph", "prefill", "--dim", "sequence_length=2048", "--dim",
         "total_sequence_length=2048", "--dtype", "bf16", "--gpu", "H100-80GB"],
        ["fit", H + "Qwen1.5-MoE-A2.7B.json", "--graph", "train", "--dim", "seq=2048", "--mode", "train",
         "--precision", "amp-bf16", "--gpu", "H100-80GB"],
        ["estimate", "tests/models/gpt_train.onnx", "--batch", "8", "--dim", "seq=128", "--mode", "train",
         "--precision", "amp-bf16"],
        ["plan", "tests/models/resnet50.onnx", "--batch", "8"],
        # DeepSpeed ZeRO-3 over a mixture of experts (48 x 128 experts: about 18,000 fetch modules), with and
        # without prefetch, and with LoRA on every projection (bench/deepspeed_zero3_speed.md)
        ["estimate", H + "Qwen3-30B-A3B.json", "--graph", "train", "--dim", "batch=1", "--dim", "seq=512", "--mode",
         "train", "--gpus", "8", "--precision", "bf16", "--checkpoint", "layers", "--deepspeed",
         "bench/deepspeed/hf_zero3_auto_no_prefetch.json"],
        ["estimate", H + "Qwen3-30B-A3B.json", "--graph", "train", "--dim", "batch=1", "--dim", "seq=512", "--mode",
         "train", "--gpus", "8", "--precision", "bf16", "--checkpoint", "layers", "--deepspeed",
         "bench/deepspeed/hf_zero3_auto.json", "--lora-rank", "16", "--lora-targets",
         "q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj"],
        ["estimate", deepseek, *TRAIN],  # last: about four minutes a binary
    ]


def run(binary, args):
    """(stdout bytes, exit code, user seconds, system seconds, peak RSS in MB) of one run."""
    proc = subprocess.Popen([binary, *args, "--format", "json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return out, proc.returncode, usage.ru_utime, usage.ru_stime, usage.ru_maxrss / 1024.0


def cached_run(binary, args, cache, key):
    if not cache:
        return run(binary, args)
    path = os.path.join(cache, key)
    if os.path.exists(path + ".json"):
        with open(path + ".json") as f:
            meta = json.load(f)
        with open(path + ".out", "rb") as f:
            return f.read(), meta["rc"], meta["user"], meta["sys"], meta["rss"]
    out, rc, user, system, rss = run(binary, args)
    with open(path + ".out", "wb") as f:
        f.write(out)
    with open(path + ".json", "w") as f:
        json.dump({"rc": rc, "user": user, "sys": system, "rss": rss, "args": args}, f)
    return out, rc, user, system, rss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--base", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--out")
    p.add_argument("--only", action="append", default=[])
    p.add_argument("--cache")
    a = p.parse_args()
    if a.cache:
        os.makedirs(a.cache, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="config_speed_")
    with open(H + "DeepSeek-V3.json") as f:
        cfg = json.load(f)
    cfg.pop("quantization_config", None)
    deepseek = os.path.join(tmp, "DeepSeek-V3.json")
    with open(deepseek, "w") as f:
        json.dump(cfg, f, indent=2)

    def rev(binary):
        d = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
        r = subprocess.run(["git", "-C", d, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        return r.stdout.strip() or "?"

    rows, failed = [], False
    for i, args in enumerate(commands(deepseek)):
        line = "memplan " + " ".join(args).replace(tmp + "/", "(no quantization_config) ")
        if a.only and not any(s in line for s in a.only):
            continue
        bout, brc, bu, bs, bm = cached_run(a.base, args, a.cache, "cmd%02d" % i)
        nout, nrc, nu, ns, nm = run(a.new, args)
        same = bout == nout and brc == nrc
        failed |= not same
        if not same:
            print("DIFFERENT: %s (exit %d vs %d, %d vs %d bytes)" % (line, brc, nrc, len(bout), len(nout)),
                  file=sys.stderr)
        rows.append("| `%s` | %d | %.2f | %.2f | %.0f | %.2f | %.2f | %.0f | %s |" % (
            line, brc, bu, bs, bm, nu, ns, nm, "yes" if same else "**NO**"))
        print(rows[-1], file=sys.stderr)

    table = [
        "Run %s UTC on this machine (one command at a time, other builds sharing its 2 cores)." %
        datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"),
        "Baseline: `%s` (commit %s); new: `%s` (commit %s)." % (a.base, rev(a.base), a.new, rev(a.new)),
        "Every command also has `--format json`; *same* compares the two binaries' stdout and exit code byte for byte.",
        "",
        "| command | exit | base user s | base sys s | base peak RSS MB | new user s | new sys s | new peak RSS MB | same |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    text = "\n".join(table) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
