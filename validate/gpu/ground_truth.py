#!/usr/bin/env python3
"""GPU ground truth for memplan: what PyTorch really allocates for the zoo models, and what memplan-validate
measures when it replays memplan's plans on the GPU.

    python3 validate/gpu/ground_truth.py --out DIR [--plans DIR --validate-bin PATH] [--budget-s 420]
    /usr/bin/python3 validate/gpu/ground_truth.py --dry-run --out /tmp/dry    # CPU, tiny sizes, every path

Needs nothing of memplan for the PyTorch part: only torch, torchvision, onnx (to read the checkpoint boundary
names from the zoo's ONNX exports) and tests/models/zoo.py. Runs under torch 1.13 (Debian, CPU dry run) and
torch 2.x (the GPU machine). The protocol is in validate/gpu/README.md; in short, per configuration:

  1. clean: gc, torch.cuda.empty_cache(), cuBLAS workspaces cleared where torch can (2.x), so each
     configuration starts from an empty allocator as a fresh process would;
  2. a fresh copy of the model on the GPU, its optimizer, inputs and targets;
  3. training: iteration 1 (creates the grads and optimizer states) measured alone as `first_iteration`;
     iteration 2 as warm-up; then reset_peak_memory_stats() and `iterations` more measured as `steady`.
     Each iteration is zero_grad(set_to_none=True), forward and loss (under autocast for AMP), backward,
     optimizer step (through GradScaler for AMP fp16);
     inference: one warm-up forward under inference_mode, reset_peak_memory_stats(), `iterations` forwards;
  4. read torch.cuda.max_memory_allocated / max_memory_reserved, then device used from cudaMemGetInfo
     (torch.cuda.mem_get_info) and from NVML (what nvidia-smi reads), and the CUDA context and everything else
     outside the caching allocator as device used - memory_reserved.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from gt_checkpoint import CHECKPOINT_BLOCKS, REPO, onnx_boundaries  # noqa: E402
from gt_fit import run_fit  # noqa: E402
from gt_memory import Deadline, Memory, environment, is_oom, log, slug  # noqa: E402
from gt_steps import run_inference, run_training, zoo  # noqa: E402

MiB = 1 << 20

# Training configurations: (precision as memplan names it, optimizer as memplan names it).
TRAIN_CONFIGS = [("fp32", "momentum"), ("amp-fp16", "adamw"), ("amp-bf16", "adamw")]
INFERENCE_PRECISIONS = ["fp32", "fp16"]  # fp16 = model.half(), memplan's `--dtype fp16`

# The GPU run's sizes: (batch sizes, sequence length). Image models are 3x224x224 (zoo.IMAGE_SIZE).
GPU_SIZES = {"image": ([8, 32], None), "text": ([2, 8], 512)}
DRY_SIZES = {"image": ([1, 2], None), "text": ([1, 2], 16)}

# The largest batch under an emulated card: (model, precision, optimizer), under caps of these many GiB.
FIT_CONFIGS = [("resnet50", "fp32", "momentum"), ("gpt", "amp-bf16", "adamw")]
DRY_FIT_CONFIGS = [("resnet18", "fp32", "momentum"), ("gpt_tiny", "amp-bf16", "adamw")]
FIT_CAPS_GIB = [16, 24]

DEFAULT_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16", "gpt_tiny", "bert", "gpt"]
DRY_MODELS = ["resnet18", "gpt_tiny"]


def memplan_args(model: str, mode: str, precision: str, batch: int, seq: Optional[int], optimizer: str = "",
                 boundaries: Optional[List[str]] = None, attention: str = "none",
                 checkpoint_impl: str = "reentrant") -> List[str]:
    """The memplan invocation for the same configuration (docs/validate.md: how results are compared)."""
    onnx_file = f"tests/models/{model}_train.onnx" if mode == "train" else f"tests/models/{model}.onnx"
    args = ["estimate", onnx_file, "--batch", str(batch), "--runtime", "pytorch"]
    if seq is not None and zoo.is_text(model):
        args += ["--dim", f"seq={seq}"]
    if attention.startswith("sdpa"):
        args += ["--attention", "sdpa"]
    elif attention == "eager":
        args += ["--attention", "eager"]
    if mode == "inference":
        return args + ["--dtype", precision]
    args += ["--mode", "train", "--precision", precision, "--optimizer", optimizer, "--loss", "cross-entropy"]
    if boundaries:
        args += ["--checkpoint", "at:" + ",".join(boundaries)]
        if checkpoint_impl != "reentrant":
            args += ["--checkpoint-impl", checkpoint_impl]
    return args


def sizes_for(model: str, dry_run: bool) -> Tuple[List[int], Optional[int]]:
    table = DRY_SIZES if dry_run else GPU_SIZES
    return table["text" if zoo.is_text(model) else "image"]


def run_matrix(models: List[str], device: torch.device, mem: Memory, iterations: int, dry_run: bool,
               deadline: Deadline, reserve_s: float, save: Callable[[List[Dict[str, Any]]], None]) -> List[Dict[str, Any]]:
    results: List[Dict[str, Any]] = []
    for model in models:
        if deadline.left() < reserve_s:
            log(f"time budget: skipping {model} and later models")
            results.append({"model": model, "skipped": "time budget"})
            continue
        log(f"building {model}")
        base = zoo.build_model(model).module  # CPU, fp32, eval mode, seeded distinct values
        boundaries = onnx_boundaries(model, CHECKPOINT_BLOCKS[model])
        batches, seq = sizes_for(model, dry_run)
        # checkpoint: "" none, else torch.utils.checkpoint's implementation; the text models also run their
        # autocast-bf16 step non-reentrant (torch 2's checkpoint_wrapper default, with the early stop of torch >= 2.1).
        configs: List[Tuple[str, str, str, str]] = [("inference", p, "", "") for p in INFERENCE_PRECISIONS]
        configs += [("train", p, o, c) for p, o in TRAIN_CONFIGS for c in ("", "reentrant")]
        if zoo.is_text(model):
            configs += [("train", "amp-bf16", "adamw", "non-reentrant")]
        for mode, precision, optimizer, checkpoint in configs:
            for batch in batches:
                if deadline.left() < reserve_s:
                    break
                entry: Dict[str, Any] = {"model": model, "mode": mode, "precision": precision, "batch": batch,
                                         "seq": seq if zoo.is_text(model) else None, "iterations": iterations}
                if mode == "train":
                    entry.update({"optimizer": optimizer, "loss": "cross-entropy",
                                  "checkpoint": {"blocks": CHECKPOINT_BLOCKS[model], "impl": checkpoint,
                                                 **boundaries} if checkpoint else None})
                try:
                    if mode == "inference":
                        entry.update(run_inference(base, model, precision, batch, entry["seq"], device, mem, iterations))
                    else:
                        entry.update(run_training(base, model, precision, optimizer, checkpoint, batch, entry["seq"],
                                                  device, mem, iterations))
                except RuntimeError as error:  # an OOM or an unsupported op: recorded, the matrix goes on
                    entry["error"] = str(error).splitlines()[0][:300]
                    entry["oom"] = is_oom(error)
                    mem.clean()
                entry["memplan_args"] = memplan_args(
                    model, mode, precision, batch, entry["seq"], optimizer,
                    boundaries["names"] if checkpoint and all(boundaries["names"]) else None,
                    entry.get("attention", "none"), checkpoint or "reentrant")
                steady = entry.get("steady", {})
                log(f"  {model} {mode} {precision} {optimizer} ckpt={checkpoint or 'no'} b={batch}: "
                    f"allocated {fmt(steady.get('max_allocated_bytes'))} reserved {fmt(steady.get('max_reserved_bytes'))}"
                    + (f" ERROR {entry['error'][:80]}" if "error" in entry else ""))
                results.append(entry)
        del base
        save(results)
    return results


def fmt(n: Optional[int]) -> str:
    return "-" if n is None else f"{n / MiB:.1f}MiB"


def run_validate(binary: Optional[str], plans_dir: Optional[str], device: torch.device,
                 deadline: Deadline) -> Dict[str, Any]:
    """Replays every *.plan.json in plans_dir with memplan-validate (all modes) and keeps its JSON reports."""
    if not binary or not plans_dir:
        return {"skipped": "no --validate-bin or --plans given"}
    plans = sorted(glob.glob(os.path.join(plans_dir, "*.plan.json")))
    if not os.access(binary, os.X_OK):
        return {"skipped": f"{binary} is not an executable", "plans": plans}
    kind = "cuda" if device.type == "cuda" else "cpu"
    reports = []
    for plan in plans:
        if deadline.left() < 30:
            reports.append({"plan": plan, "skipped": "time budget"})
            continue
        try:
            proc = subprocess.run([binary, plan, "--device", kind, "--mode", "all", "--json"],
                                  capture_output=True, text=True, timeout=max(10, int(deadline.left())))
        except subprocess.TimeoutExpired:
            reports.append({"plan": plan, "skipped": "time budget ran out during the replay"})
            log(f"  validate {os.path.basename(plan)}: stopped, time budget")
            continue
        try:
            report = json.loads(proc.stdout)
        except ValueError:
            report = {"plan": plan, "stdout": proc.stdout[-2000:]}
        report["exit_code"] = proc.returncode
        if proc.stderr:
            report["stderr"] = proc.stderr[-2000:]
        reports.append(report)
        modes = ", ".join(f"{m['mode']} {m['error_pct']}%" for m in report.get("modes", []))
        log(f"  validate {os.path.basename(plan)}: exit {proc.returncode} ({modes})")
    return {"binary": binary, "device": kind, "reports": reports}


def write_json(path: str, doc: Dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "validate", "results"), help="where the JSON results go")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, 1 measured iteration, pretend OOM cap")
    ap.add_argument("--models", nargs="*", help="zoo models (default: all on a GPU, resnet18 and gpt_tiny dry)")
    ap.add_argument("--iterations", type=int, help="measured steady-state iterations (default 3; dry run 1)")
    ap.add_argument("--budget-s", type=float, default=420, help="stop starting new work after this many seconds")
    ap.add_argument("--plans", help="folder of *.plan.json files made by `memplan plan`")
    ap.add_argument("--validate-bin", help="the memplan-validate binary")
    ap.add_argument("--validate-budget-s", type=float, default=90, help="time for all memplan-validate replays")
    ap.add_argument("--skip", nargs="*", default=[], choices=["matrix", "fit", "validate"])
    args = ap.parse_args(argv)

    deadline = Deadline(args.budget_s)
    if not args.dry_run and not torch.cuda.is_available():
        print("no CUDA device: run with --dry-run on the CPU", file=sys.stderr)
        return 2
    device = torch.device("cpu" if args.dry_run else "cuda")
    torch.backends.cudnn.benchmark = False  # benchmark mode's search may allocate very large workspaces
    models = args.models or (DRY_MODELS if args.dry_run else DEFAULT_MODELS)
    iterations = args.iterations or (1 if args.dry_run else 3)
    mem = Memory(device)
    if device.type == "cuda":
        torch.zeros(1, device=device)  # create the context before the first reading
    env = environment(device, args.dry_run)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d")
    tag = f"{stamp}-{slug(env['gpu_name'] if not args.dry_run else 'cpu-dryrun')}"
    os.makedirs(args.out, exist_ok=True)
    paths = {k: os.path.join(args.out, f"{k}-{tag}.json") for k in ("torch", "fit", "validate")}
    log(f"{env['gpu_name']}, torch {env['torch']}; results in {args.out} as *-{tag}.json")

    if "validate" not in args.skip:
        write_json(paths["validate"], {"environment": env,
                                       **run_validate(args.validate_bin, args.plans, device,
                                                      Deadline(min(args.validate_budget_s, deadline.left())))})
    fit_reserve = 0 if "fit" in args.skip else (30 if args.dry_run else 120)
    if "matrix" not in args.skip:
        protocol = {"iterations": iterations, "warmup": "training: iteration 1 measured alone (first_iteration), "
                    "iteration 2 unmeasured; inference: 1 forward", "peak_reset": "reset_peak_memory_stats() "
                    "after warm-up", "cleanup": "gc.collect, cuBLAS workspaces cleared, empty_cache before each config",
                    "zero_grad": "set_to_none=True at the start of each iteration", "cudnn_benchmark": False}
        run_matrix(models, device, mem, iterations, args.dry_run, deadline, fit_reserve,
                   lambda rows: write_json(paths["torch"], {"environment": env, "protocol": protocol,
                                                            "configs": rows}))
    if "fit" not in args.skip:
        fit_configs = [(m, p, o, sizes_for(m, args.dry_run)[1]) for m, p, o in
                       (DRY_FIT_CONFIGS if args.dry_run else FIT_CONFIGS)]
        write_json(paths["fit"], {"environment": env, "caps_gib": FIT_CAPS_GIB,
                                  "fits": run_fit(fit_configs, FIT_CAPS_GIB, device, mem, args.dry_run, deadline)})
    log(f"done in {deadline.elapsed():.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
