"""The accuracy gate: memplan's predictions against committed measurements.

Reads the CPU ground truth (bench/cpu_ground_truth/measurements.json: torch 1.13 training steps under
torch.profiler, protocol in its README) and, when present, GPU results (validate/results/torch-*.json), runs
memplan on the same configurations, prints config, measured, predicted and error %, and fails when an error
exceeds the tolerance (10 % for CPU peaks, 15 % for GPU peaks). Needs no torch.

  /usr/bin/python3 tests/accuracy/accuracy.py                 # the gate (ctest runs this)
  /usr/bin/python3 tests/accuracy/accuracy.py --write bench/accuracy.md

Peers' answers are shown for the same configurations where they are formulas anyone can compute:
accelerate's `estimate-memory` (training with Adam = 4 x the weights: accelerate/commands/estimate.py,
estimate_training_usage, model + grads + 2 Adam states at the weights' size, over every parameter: it has no
notion of frozen ones) and the model-states figure of ZeRO (Rajbhandari et al. 2020, section 3.1: 16 bytes per
parameter for mixed-precision Adam; for fp32 Adam also 16: weights, grads, 2 states), counted here as that
accounting states it for a trainable parameter (16 bytes) and a frozen one (its fp32 weights, 4 bytes).
DeepSpeed's own estimator (estimate_zero2_model_states_mem_needs, deepspeed/runtime/zero/stage_1_and_2.py)
counts every parameter of model.parameters() as trainable, which is the full-fine-tune figure.
Neither counts activations.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import published_gpu  # noqa: E402  (the published-figures section of bench/accuracy.md)

SRC = os.environ.get("MEMPLAN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MEMPLAN_BIN", os.path.join(SRC, "build", "memplan"))
# Measured, never hidden: printed and published, but not gated, each with the reason. Found by profiling the step
# (tests/cost_models/cpu_ground_truth.json, "excluded"): the peak is inside aten::_slow_conv2d_backward.
CPU_EXCLUDED = {
    "mobilenet_v2": "on the CPU, depthwise convolutions run aten::_slow_conv2d, whose backward allocates im2col "
                    "buffers that the CUDA kernels do not; memplan models the GPU, so it is under here",
}
CPU_TOLERANCE = 10.0
# Issue 23 asks a training step of a tiny mixture of experts, balanced routing, within 3 %; moe_tiny is held to 1 %
# (float32 within 0.01 %, bfloat16 with its float32 routing softmax within 0.03 %: -0.28 to -0.36 % before that was
# modelled).
# The tiny DeepSeek-V3 within 1 % (float32, and bfloat16 with its float32 router: -4.4 to -6.0 % before that was
# modelled): before matmul's operand copies were modelled it read +1.4 to +2.0 % (its values,
# a slice of kv_b_proj's output, copied by bmm), which this gate would have caught. The tiny DeepSeek-V2 in bfloat16
# within 1 % (its gate's float32 copies, scores and top-k weights: -2.25 to -2.97 % before they were modelled).
CPU_TOLERANCE_BY_MODEL = {"moe_tiny": 1.0, "deepseek_tiny": 1.0, "deepseek_v2_tiny": 1.0}
# Issue 22: the float32 islands of a bfloat16 Hugging Face model (--upcast), on the tiny Llama, within 3 %.
CPU_TOLERANCE_UPCAST = 3.0
GPU_TOLERANCE = 15.0
# Issue 23's eager inference: one forward under torch.no_grad of moe_tiny (its config.json) and llama_tiny (its
# inference export), bench/cpu_ground_truth/moe_inference.py, within 3 % (-2.8 to -14.0 % before transformers'
# Python references in the attention were modelled, cost_models/python_references.h).
INFERENCE_TOLERANCE = 3.0


def memplan(args):
    p = subprocess.run([BIN, *args, "--json"], cwd=SRC, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"memplan {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return json.loads(p.stdout)


def cpu_measurements():
    # measurements.json: fp32 steps; hf_islands.json: the tiny Llama in bfloat16 with transformers' float32
    # islands (bench/cpu_ground_truth/hf_islands.py), each row saying its --upcast and --free-output.
    # kbit_prep.json: a LoRA step over a 4-bit base after PEFT's k-bit preparation (bench/cpu_ground_truth/kbit_prep.py).
    # gptq_lora.json: a LoRA step over a GPTQ base in bfloat16 (bench/cpu_ground_truth/gptq_lora.py).
    # amp_stored.json: the tiny Llama in bfloat16 stepped under torch.autocast (bench/cpu_ground_truth/amp_stored.py).
    # fabric_outputs.json: litgpt's chunked loss on the bf16 tiny Llama's head chunks, read directly or as Lightning
    # Fabric's float32 copies (bench/cpu_ground_truth/fabric_outputs.py). litgpt_full.json: litgpt's full fine-tune,
    # its loss in chunks of 128 rows on the whole head's logits or Fabric's float32 copy of them
    # (bench/cpu_ground_truth/litgpt_full.py).
    # deepseek_truth.json: the tiny DeepSeek-V3 config (latent attention, sigmoid router, eager loop or grouped_mm
    # experts) in float32 (bench/cpu_ground_truth/grouped_mm_deepseek.py); deepseek_bf16_truth.json: the same model
    # stored in bfloat16, its router and accumulator in float32 (bench/cpu_ground_truth/deepseek_bf16.py).
    # moe_bf16_truth.json: moe_tiny (Qwen3-MoE) stored in bfloat16, its routing softmax in float32
    # (bench/cpu_ground_truth/moe_bf16.py). deepseek_v2_bf16_truth.json: a tiny DeepSeek-V2 stored in bfloat16, its
    # gate in float32 (bench/cpu_ground_truth/deepseek_v2_bf16.py). lora_parameters_truth.json: moe_tiny's grouped_mm
    # experts with LoRA on their stacked parameters, PEFT's target_parameters (bench/cpu_ground_truth/lora_parameters.py).
    # lora_half.json: LoRA with float32 adapters over the tiny Llama in bfloat16, PEFT's default on a half model
    # (bench/cpu_ground_truth/lora_half.py).
    for name in ("measurements.json", "hf_islands.json", "kbit_prep.json", "gptq_lora.json", "amp_stored.json",
                 "fabric_outputs.json", "litgpt_full.json", "deepseek_truth.json", "deepseek_bf16_truth.json",
                 "moe_bf16_truth.json", "deepseek_v2_bf16_truth.json", "lora_parameters_truth.json", "lora_half.json"):
        with open(os.path.join(SRC, "bench", "cpu_ground_truth", name)) as f:
            yield from json.load(f)["measurements"]


def cpu_rows():
    for m in cpu_measurements():
        args = ["estimate", m["onnx"], "--mode", "train", "--runtime", "ideal", "--batch", str(m["batch"]),
                "--precision", m["precision"], "--optimizer", m["optimizer"], "--loss", m.get("loss", "cross-entropy"),
                # torch 1.13 (its autograd's saved tensors), foreach Adam (the measurements ran foreach=True)
                # and zero_grad(set_to_none=True) (the protocol's step 3), not 1.13's default.
                "--torch", "1.13", "--optimizer-impl", "foreach-torch1", "--zero-grad", "set-to-none"]
        if m.get("seq"):
            args += ["--dim", f"seq={m['seq']}"]
        if m["onnx"].endswith(".json"):  # a config.json: memplan builds its training graph
            args += ["--graph", "train"]
        if m["checkpoint"]:
            args += ["--checkpoint", "at:" + ",".join(m["checkpoint"])]
        if m.get("checkpoint_impl"):  # use_reentrant=False (the measurements' default is the reentrant one)
            args += ["--checkpoint-impl", m["checkpoint_impl"]]
        if m.get("trainable"):
            args += ["--trainable", m["trainable"]]
        if m.get("upcast"):
            args += ["--upcast", m["upcast"]]
        if m.get("param_dtype"):  # autocast over parameters stored in this type
            args += ["--param-dtype", m["param_dtype"]]
        # the step dropped the model's output after the loss (the Trainer's compute_loss, torchtune's `del logits`)
        if m.get("free_output") or m.get("output_freed"):
            args += ["--free-output"]
        if m.get("lora"):
            args += ["--lora-rank", str(m["lora"]["rank"]), "--lora-targets", m["lora"]["targets"]]
        if m.get("lora_dtype"):
            args += ["--lora-dtype", m["lora_dtype"]]
        if m.get("frozen_dtype"):
            args += ["--frozen-dtype", m["frozen_dtype"]]
        if m.get("kbit_prep"):
            args += ["--kbit-prep"]
        if m.get("outputs_to_default_dtype"):  # Lightning Fabric's convert_output: float32 copies the loss reads
            args += ["--outputs-to-default-dtype"]
        if m.get("experts_implementation"):  # a config's experts as the eager loop or transformers 5's grouped_mm
            args += ["--experts-implementation", m["experts_implementation"]]
        e = memplan(args)
        # The profiler counts live tensor bytes (the CPU allocator has no cache): compare with memplan's
        # live bytes at the peak, resident included, not with an arena.
        predicted = e["resident_bytes"] + e["lower_bound_bytes"]
        config = (f"{m['model']} b{m['batch']}" + (f" s{m['seq']}" if m.get("seq") else "") +
                  f" {m['precision']}" + (f" params {m['param_dtype']}" if m.get("param_dtype") else "") +
                  f" {m['optimizer']}" + (f" ckpt{len(m['checkpoint'])}" if m["checkpoint"] else "") +
                  (f" {m['checkpoint_impl']}" if m.get("checkpoint_impl") else "") +
                  (f" upcast {m['upcast']}" if m.get("upcast") else "") + (" free-output" if m.get("free_output") else "") +
                  (f" LoRA r{m['lora']['rank']} on {m['lora']['targets'].replace('|', ',')}" if m.get("lora") else "") +
                  (f" {m['frozen_dtype']}" if m.get("frozen_dtype") else "") + (" kbit-prep" if m.get("kbit_prep") else "") +
                  (" fabric-outputs" if m.get("outputs_to_default_dtype") else "") +
                  (f" experts {m['experts_implementation']}" if m.get("experts_implementation") else "") +
                  (f" train /{m['trainable']}/" if m.get("trainable") else "") +
                  (f" {m['loss']}" if m.get("loss", "cross-entropy") != "cross-entropy" else ""))
        yield {"source": "cpu", "config": config, "measured": m["peak_bytes"], "predicted": predicted,
               "tolerance": CPU_TOLERANCE_UPCAST if m.get("upcast") or m.get("kbit_prep") else CPU_TOLERANCE_BY_MODEL.get(m["model"], CPU_TOLERANCE), "param_bytes": m["parameter_bytes"],
               "trainable_bytes": m.get("trainable_parameter_bytes", m["parameter_bytes"]), "optimizer": m["optimizer"],
               "excluded": CPU_EXCLUDED.get(m["model"])}


def inference_rows():
    with open(os.path.join(SRC, "bench", "cpu_ground_truth", "inference_truth.json")) as f:
        rows = json.load(f)["measurements"]
    for m in rows:
        args = ["estimate", m["onnx"], "--mode", "inference", "--runtime", "pytorch", "--batch", str(m["batch"]),
                "--dim", f"seq={m['seq']}", "--precision", m["precision"]]
        if m["onnx"].endswith(".json"):
            args += ["--graph", "train"]
        e = memplan(args)
        # Live bytes at the peak, less the cuBLAS workspace a GPU holds and the CPU does not.
        predicted = e["resident_bytes"] + e["lower_bound_bytes"] - e["breakdown"]["workspace"]
        yield {"source": "cpu", "config": f"{m['model']} b{m['batch']} s{m['seq']} {m['precision']} inference",
               "measured": m["peak_bytes"], "predicted": predicted, "tolerance": INFERENCE_TOLERANCE,
               "param_bytes": m["parameter_bytes"], "trainable_bytes": m["parameter_bytes"], "optimizer": "",
               "excluded": None}


def gpu_rows():
    for path in sorted(glob.glob(os.path.join(SRC, "validate", "results", "torch-*.json"))):
        with open(path) as f:
            data = json.load(f)
        gpu = data.get("environment", {}).get("gpu_name", os.path.basename(path))
        for c in data.get("configs", []):
            if "memplan_args" not in c or "steady" not in c or c.get("error"):
                continue
            e = memplan(c["memplan_args"])
            yield {"source": f"gpu {gpu}", "config": c.get("name", " ".join(c["memplan_args"][1:])),
                   "measured": c["steady"]["max_reserved_bytes"], "predicted": e["total_bytes"],
                   "tolerance": GPU_TOLERANCE, "param_bytes": c.get("param_bytes", 0),
                   "trainable_bytes": c.get("param_bytes", 0), "optimizer": c.get("optimizer", ""), "excluded": None}


def peers(row):
    """(accelerate, model states) in MiB for fp32 Adam rows. p, t: fp32 bytes of all and of the trainable
    parameters (P = p / 4 parameters): accelerate 4 x p; model states 16 B per trainable parameter (4 t)
    + 4 B per frozen one (p - t)."""
    p, t = row["param_bytes"], row["trainable_bytes"]
    if row["optimizer"] in ("adam", "adamw") and p:
        return f"{4 * p / 2**20:.1f}", f"{(4 * t + (p - t)) / 2**20:.1f}"
    return "–", "–"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", help="also write the table as markdown to this file")
    args = ap.parse_args()
    rows = list(cpu_rows()) + list(inference_rows()) + list(gpu_rows())
    header = f"{'source':<8} {'config':<52} {'measured MiB':>13} {'memplan MiB':>12} {'error %':>8}"
    print(header)
    failures = 0
    md = ["| source | config | measured MiB | memplan MiB | error % | accelerate (4x weights) MiB | "
          "model states (16 B/trainable, 4 B/frozen param) MiB |",
          "|---|---|---:|---:|---:|---:|---:|"]
    errors = []
    gated = 0
    for r in rows:
        err = 100.0 * (r["predicted"] - r["measured"]) / r["measured"]
        bad = abs(err) > r["tolerance"] and not r["excluded"]
        if not r["excluded"]:
            errors.append(abs(err))
            gated += 1
        failures += bad
        flag = "  excluded*" if r["excluded"] else ("  FAIL (tolerance " + str(r["tolerance"]) + "%)" if bad else "")
        print(f"{r['source']:<8} {r['config']:<52} {r['measured'] / 2**20:13.1f} {r['predicted'] / 2**20:12.1f} "
              f"{err:+8.2f}{flag}")
        acc, ds = peers(r)
        config = r["config"].replace("\\", "\\\\")  # markdown: a regex's backslash stays visible
        md.append(f"| {r['source']} | {config}{' (excluded*)' if r['excluded'] else ''} | "
                  f"{r['measured'] / 2**20:.1f} | {r['predicted'] / 2**20:.1f} | {err:+.2f} | {acc} | {ds} |")
    reasons = sorted({r["excluded"] for r in rows if r["excluded"]})
    summary = (f"{gated} gated configurations: mean |error| {sum(errors) / len(errors):.2f}%, "
               f"max |error| {max(errors):.2f}%")
    if reasons:
        summary += f"; {len(rows) - gated} excluded* ({'; '.join(reasons)})"
    print(summary)
    if args.write:
        with open(args.write, "w") as f:
            f.write("# Accuracy: memplan against measured peaks\n\n")
            f.write("Produced by `/usr/bin/python3 tests/accuracy/accuracy.py --write bench/accuracy.md` (the same script is "
                    "the CI gate: it fails above 10 % error on CPU peaks, 15 % on GPU peaks).\n\n")
            f.write("CPU rows: torch 1.13 training steps measured under `torch.profiler` "
                    "(`bench/cpu_ground_truth/`, protocol in its README), against `memplan estimate --mode train "
                    "--runtime ideal --torch 1.13 --zero-grad set-to-none` (live bytes at the peak, resident included). GPU rows appear once "
                    "`validate/results/torch-*.json` exist (a session with a GPU runs `validate/gpu/run_gpu.sh`).\n\n")
            f.write("Peers, for Adam rows, are formulas that count model states only (no activations): accelerate's "
                    "`estimate-memory` (4 x weights, every parameter: it has no notion of frozen ones; "
                    "accelerate/commands/estimate.py) and the model-states figure of ZeRO (Rajbhandari et al. 2020, "
                    "section 3.1) for fp32 Adam: 16 bytes per trainable parameter (weights, grads, 2 states) and 4 per "
                    "frozen one (its weights). DeepSpeed's estimator (`estimate_zero2_model_states_mem_needs`) counts "
                    "every parameter as trainable, so on the frozen and LoRA rows its answer is the full fine-tune's.\n\n"
                    "Llama rows (tests/models/llama.py; `llama_tiny_lora` has LoRA r 8 on q/v, `llama_tiny_lora_all` on "
                    "all seven projections): `train /REGEX/` is memplan's `--trainable REGEX`, applied identically to "
                    "the PyTorch parameters; `/lora_/` trains the adapters only, `/^layers\\.3\\./` only the last "
                    "decoder layer. `ckpt5`: each decoder layer checkpointed (reentrant; `ckpt5 non-reentrant`: under "
                    "`checkpoint(..., use_reentrant=False)`, memplan `--checkpoint-impl non-reentrant`). `chunked-ce:8`: torchtune's "
                    "CEWithChunkedOutputLoss over the decoder's 8 output chunks, the output dropped after the loss as "
                    "torchtune's recipes do (memplan `--loss chunked-ce:8 --free-output`; "
                    "bench/cpu_ground_truth/README.md).\n\n"
                    "moe_tiny rows (gated at 3 %): a Qwen3-MoE decoder of 4 layers, 8 experts, 2 a token "
                    "(bench/cpu_ground_truth/moe_tiny.json, tests/models/hf_moe.py), balanced routing; memplan is given "
                    "the config.json itself (`--graph train`), not an export.\n\n"
                    "bf16 rows (gated at 3 %): the tiny Llama loaded in bfloat16 with transformers' float32 islands "
                    "(LlamaRMSNorm's float32 copy, eager attention's softmax(dtype=float32), ForCausalLMLoss's "
                    "logits.float(); bench/cpu_ground_truth/hf_islands.py) against `--precision bf16 --upcast "
                    "rmsnorm,softmax,loss`; `free-output` drops the logits before backward, as the Trainer does. "
                    "Without `--upcast` memplan reads 24 to 31 % low on these rows.\n\n"
                    "amp-bf16 params bf16 rows (gated at 3 %): the same bf16 model stepped under torch.autocast, as "
                    "transformers 5's Trainer runs bf16=True over a bf16 checkpoint (bench/cpu_ground_truth/"
                    "amp_stored.py), against `--precision amp-bf16 --param-dtype bf16`; with float32 master weights "
                    "(`--param-dtype fp32`) memplan reads 21 to 46 % high on them.\n\n"
                    "bf16 LoRA rows (gated at 3 %): LoRA r 8 on q/v with float32 adapters over the tiny Llama in "
                    "bfloat16, PEFT's lora.Linear casting the input to float32 and the sum back (bench/cpu_ground_truth/"
                    "lora_half.py), against `--precision bf16 --lora-rank 8 --lora-targets 'q_proj|v_proj'`; "
                    "lora_dropout 0 (the CPU's dropout saves a float noise tensor where the GPU's fused kernel saves a "
                    "one-byte mask).\n\n"
                    "kbit-prep rows (gated at 3 %): LoRA r 8 on q/v over a 4-bit base after PEFT's "
                    "prepare_model_for_kbit_training (bench/cpu_ground_truth/kbit_prep.py: a stand-in of bitsandbytes' "
                    "Linear4bit and MatMul4Bit), against `--precision bf16 --frozen-dtype nf4 --kbit-prep`; without "
                    "`--kbit-prep` memplan reads 42 % low on them.\n\n"
                    "gptq-int4 rows (gated at 3 %): LoRA r 8 on q/v, adapters in bf16, over a GPTQ base "
                    "(bench/cpu_ground_truth/gptq_lora.py: gptqmodel's packed buffers and TorchQuantLinear's "
                    "dequantize, .to(x.dtype) and torch.matmul, the dequantization a stand-in allocating its one "
                    "output), against `--precision bf16 --upcast rmsnorm,softmax,loss --lora-dtype base "
                    "--frozen-dtype gptq-int4`.\n\n"
                    "chunked-ce-tokens:32 bf16 rows (gated at 3 %): litgpt's chunked loss on the bf16 tiny Llama's "
                    "head chunks (bench/cpu_ground_truth/fabric_outputs.py), full fine-tune and LoRA r 8 on q/v in "
                    "bf16; `fabric-outputs` reads them as Lightning Fabric's float32 copies (_FabricModule.forward's "
                    "convert_output), against `--outputs-to-default-dtype`.\n\n"
                    "chunked-ce-rows:128 bf16 rows (gated at 3 %): litgpt's full fine-tune (finetune/full.py) on the "
                    "bf16 tiny Llama: the head whole, chunked_cross_entropy on the shifted logits in chunks of 128 rows "
                    "(bench/cpu_ground_truth/litgpt_full.py), at batch 1, 2 and 8; `fabric-outputs` on Fabric's float32 "
                    "copy of the whole logits, against `--loss chunked-ce-rows:128 --outputs-to-default-dtype`.\n\n"
                    "inference rows (gated at 3 %): one forward under torch.no_grad of moe_tiny (its config.json) and "
                    "llama_tiny (its inference export), eager attention (bench/cpu_ground_truth/moe_inference.py), "
                    "against `--mode inference --runtime pytorch`, less the cuBLAS workspace the CPU does not hold; "
                    "the twin's decoder layers keep the attention weights as transformers' do; before transformers' "
                    "Python references in the decoder layer were modelled memplan read 2.8 to 14.0 % low on them "
                    "(bench/cpu_ground_truth/README.md).\n\n")
            f.write("\n".join(md) + "\n\n" + summary + ".\n")
            f.write("\n" + published_gpu.section())
    print(f"{gated - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
