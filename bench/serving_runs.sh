#!/usr/bin/env bash
# memplan serve --engine vllm against start-up logs published from real vLLM runs (bench/serving.md).
# Prints the commands it runs, then the comparison tables in Markdown.
# Usage: bench/serving_runs.sh [path/to/memplan]   (default: build/memplan)
# The logged figures below are copied from the sources listed in bench/serving.md; nothing here tunes memplan.
set -euo pipefail
cd "$(dirname "$0")/.."
MEMPLAN="${1:-${MEMPLAN_BIN:-build/memplan}}"
CFG=tests/models/hf_configs
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# id | config | memplan settings (the log's own) | logged: weights GiB | non-torch GiB | activation GiB |
#      available KV GiB | KV tokens | concurrency      ("-" where the log does not print it)
ROWS=(
"A|Llama-3.1-8B.json|--gpu L40S --context 32768 --dtype bf16|14.9889|-|-|-|158656|4.84"
"B|Llama-3.1-8B.json|--memory 22.07GiB --context 131072 --dtype bf16 --max-batched-tokens 2048 --max-num-seqs 256|14.99|0.05|0.22|4.60|37696|0.29"
"C|Qwen2.5-32B-Instruct.json|--memory 44.42GiB --tp 2 --context 10000 --dtype bf16 --max-batched-tokens 10000 --max-num-seqs 256|30.71|0.30|1.26|7.71|63152|-"
"D|Llama-3.1-8B.json|--gpu A100-40GB --context 131072 --dtype bf16 --max-batched-tokens 8192 --max-num-seqs 256 --engine-version 0.15.1|14.99|-|-|19.28|157936|1.20"
"E|Qwen2.5-7B.json|--gpu V100-32GB --context 32768 --dtype fp16 --max-batched-tokens 8192 --max-num-seqs 256 --engine-version 0.18.0|14.25|-|-|13.1|245360|7.49"
"F|Qwen3-8B.json|--gpu RTX-5090 --gpu-memory-utilization 0.92 --context 32768 --dtype bf16 --engine-version 0.24.0|15.27|-|-|-|89040|-"
"G|Qwen2.5-0.5B.json|--memory 23.99GiB --gpu-memory-utilization 0.92 --context 32768 --dtype bf16 --max-batched-tokens 8192 --max-num-seqs 256 --engine-version 0.27.1|0.93|0.30|0.31|20.52|1793232|-"
"H|Qwen3-8B.json|--gpu A100-40GB --context 40960 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.19.1|15.27|-|-|19.36|140960|3.44"
"I|Qwen3-8B.json|--gpu A100-40GB --context 40960 --max-batched-tokens 8192 --max-num-seqs 256 --engine-version 0.19.1|15.27|-|-|19.2|139792|3.41"
"J|Llama-3.1-8B.json|--gpu RTX-3090 --context 8192 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.17.1|14.99|-|-|5.68|46544|-"
"K|Llama-3.1-8B.json|--gpu RTX-3090 --gpu-memory-utilization 0.75 --context 8192 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.17.1|14.99|-|-|2.13|17424|-"
"L|Qwen2.5-7B.json|--gpu RTX-3090 --context 8192 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.17.1|14.25|-|-|6.32|118304|-"
"M|Qwen2.5-7B.json|--gpu RTX-3090 --gpu-memory-utilization 0.65 --context 8192 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.17.1|14.25|-|-|0.49|9088|-"
"N|Qwen2.5-72B-Instruct.json|--gpu L40S --tp 4 --context 8192 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.19.0|33.98|-|-|5.11|67024|8.18"
"O|bench/serving_configs/Meta-Llama-3-70B-Instruct-AWQ.json|--gpu L40S --tp 2 --context 8192 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.16.0|18.55|-|-|20.16|132128|16.13"
"P|Qwen3-8B.json|--gpu RTX-4090 --gpu-memory-utilization 0.9 --context 8192 --max-batched-tokens 2048 --max-num-seqs 256 --engine-version 0.27.1|15.27|-|0.19|-|43040|-"
"Q|Qwen2.5-7B.json|--gpu L40S --gpu-memory-utilization 0.95 --context 4096 --dtype bf16 --max-batched-tokens 2048 --max-num-seqs 128 --engine-version 0.22.0 --cuda-graph-memory 0.37GiB|14.29|-|-|26.32|492912|120.34"
"R|bench/serving_configs/Qwen2.5-1.5B-Instruct.json|--memory 23.47GiB --arch sm75 --dtype fp16 --gpu-memory-utilization 0.9 --context 4096 --usage-context llm --engine-version 0.28.1 --enforce-eager|2.98|0.27|0.5|17.36|650208|158.74"
"S|bench/serving_configs/Qwen3-4B.json|--memory 50897289216B --arch sm86 --context 8192 --max-num-seqs 8 --engine-version 0.22.0|-|-|-|35.23|256544|31.32"
"T|Qwen2.5-0.5B.json|--gpu RTX-4090 --gpu-memory-utilization 0.85 --context 2048 --engine-version 0.24.0 --cuda-graph-memory 0.28GiB|0.93|-|-|18.08|1579808|771.39"
)

echo "## Commands"
echo
for row in "${ROWS[@]}"; do
  IFS='|' read -r id cfg opts _ nt _ <<<"$row"
  [[ "$cfg" == */* ]] || cfg="$CFG/$cfg"  # a config of tests/models/hf_configs/, or a path from the source root
  cmd="$MEMPLAN serve $cfg --graph decode $opts --json"
  echo "    [$id] $cmd"
  # shellcheck disable=SC2086
  # exit 1 = vLLM would refuse to start (as the logged run did in row B); the JSON still holds the figures
  $MEMPLAN serve "$cfg" --graph decode $opts --json >"$TMP/$id.default.json" || [[ $? -eq 1 ]]
  if [[ "$nt" != "-" ]]; then
    echo "    [$id, --reserve as logged] ${cmd% --json} --reserve ${nt}GiB --json"
    # shellcheck disable=SC2086
    $MEMPLAN serve "$cfg" --graph decode $opts --reserve "${nt}GiB" --json >"$TMP/$id.reserve.json" || [[ $? -eq 1 ]]
  fi
done
echo

printf '%s\n' "${ROWS[@]}" >"$TMP/rows"
/usr/bin/python3 - "$TMP" <<'PY'
import json, os, sys

tmp = sys.argv[1]
GiB = float(1 << 30)

def pct(mine, logged):
    return f"{(mine - logged) / logged * 100:+.1f}%"

def cell(mine, logged, fmt):
    if logged is None:
        return f"{fmt(mine)} / –"
    return f"{fmt(mine)} / {fmt(logged)} ({pct(mine, logged)})"

g = lambda v: f"{v:.2f}"
n = lambda v: f"{v:,.0f}"
x = lambda v: f"{v:.2f}x"
errs = {"default": [], "reserve": []}
tables = {"default": [], "reserve": []}
for line in open(os.path.join(tmp, "rows")).read().splitlines():
    rid, cfg, opts, w, nt, act, kv, tok, conc = line.split("|")
    logged = [None if s == "-" else float(s) for s in (w, nt, act, kv, tok, conc)]
    for kind in ("default", "reserve"):
        path = os.path.join(tmp, f"{rid}.{kind}.json")
        if not os.path.exists(path):
            continue
        d = json.load(open(path))
        m = d["memory"]
        mine = [m["weights_bytes"] / GiB, m["non_torch_bytes"] / GiB, m["activation_peak_bytes"] / GiB,
                m["available_kv_cache_bytes"] / GiB, d["gpu_kv_cache_tokens"], d["max_concurrency"]]
        errs[kind].append(abs((mine[4] - logged[4]) / logged[4] * 100))
        tables[kind].append("| " + " | ".join([
            rid, cell(mine[0], logged[0], g), cell(mine[1], logged[1], g), cell(mine[2], logged[2], g),
            cell(mine[3], logged[3], g), cell(mine[4], logged[4], n), cell(mine[5], logged[5], x)]) + " |")

head = ("| log | weights GiB | non-torch GiB | activation peak GiB | available KV GiB | KV tokens | concurrency |\n"
        "|---|---|---|---|---|---|---|")
print("## memplan's defaults (non-torch memory: none under the baseline rules, cost_models/vllm_engine.h)")
print()
print("memplan / logged (error); `–`: the log does not print it.")
print()
print(head)
print("\n".join(tables["default"]))
e = errs["default"]
print()
print(f"KV tokens, |error|: mean {sum(e) / len(e):.1f}%, max {max(e):.1f}% over {len(e)} logs.")
print()
print("## --reserve set to the non-torch memory the log prints")
print()
print(head)
print("\n".join(tables["reserve"]))
e = errs["reserve"]
print()
print(f"KV tokens, |error|: mean {sum(e) / len(e):.1f}%, max {max(e):.1f}% over {len(e)} logs.")
PY
