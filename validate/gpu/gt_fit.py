"""The largest training batch that really fits under an emulated card (set_per_process_memory_fraction),
found by doubling and bisection with OOMs caught, for comparison with `memplan fit`."""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
import torch.nn as nn

from gt_memory import Deadline, Memory, is_oom, log
from gt_steps import classes_of, make_optimizer, make_scaler, make_targets, model_inputs, train_step, zoo

GiB = 1 << 30
FIT_MAX_BATCH = 4096
DRY_FIT_LIMIT = {16: 5, 24: 11}  # the dry run's pretend OOM: batches above these "do not fit"


def search_max_batch(fits: Callable[[int], bool], limit: int) -> Tuple[int, List[Tuple[int, bool]]]:
    """Largest b in [1, limit] with fits(b), assuming fitting is monotone: doubling until the first failure,
    then bisection. Returns (0, probes) when batch 1 does not fit."""
    probes: List[Tuple[int, bool]] = []

    def probe(b: int) -> bool:
        ok = fits(b)
        probes.append((b, ok))
        return ok

    if not probe(1):
        return 0, probes
    good, bad = 1, None
    while bad is None and good < limit:
        nxt = min(good * 2, limit)
        if probe(nxt):
            good = nxt
        else:
            bad = nxt
    if bad is None:
        return good, probes
    while bad - good > 1:
        mid = (good + bad) // 2
        if probe(mid):
            good = mid
        else:
            bad = mid
    return good, probes


def run_fit(configs: List[Tuple[str, str, str, Optional[int]]], caps_gib: List[int], device: torch.device,
            mem: Memory, dry_run: bool, deadline: Deadline) -> List[Dict[str, Any]]:
    results = []
    for model, precision, optimizer, seq in configs:
        base = zoo.build_model(model).module
        for cap in caps_gib:
            if deadline.left() < 20:
                results.append({"model": model, "cap_gib": cap, "skipped": "time budget"})
                continue
            results.append(fit_one(base, model, precision, optimizer, seq, cap, device, mem, dry_run, deadline))
            mem.clean()  # the model and optimizer of that search are gone now
            results[-1]["context_and_other_bytes"] = mem.now()["context_and_other_bytes"]
            log(f"  fit {model} {precision} {optimizer} under {cap} GiB: batch {results[-1].get('max_batch')}")
        del base
    return results


def fit_one(base: nn.Module, model: str, precision: str, optimizer: str, seq: Optional[int], cap_gib: int,
            device: torch.device, mem: Memory, dry_run: bool, deadline: Deadline) -> Dict[str, Any]:
    """Training steps at growing batch sizes under torch.cuda.set_per_process_memory_fraction(cap / total):
    the caching allocator refuses to reserve more than the cap, as a card of that size would (its CUDA
    context aside: the cap counts reserved bytes only, so compare with memplan fit on cap - context)."""
    mem.clean()
    module = copy.deepcopy(base).to(device).train()
    opt = make_optimizer(optimizer, module.parameters())
    scaler = make_scaler(precision, device)
    fraction = None
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(0).total_memory
        fraction = min(1.0, cap_gib * GiB / total)
        torch.cuda.set_per_process_memory_fraction(fraction, 0)

    def attempt(batch: int) -> None:
        if dry_run and batch > DRY_FIT_LIMIT[cap_gib]:
            raise RuntimeError(f"CUDA out of memory (dry-run pretend cap: batch {batch})")
        inputs = model_inputs(model, batch, seq, device)
        targets = make_targets(model, (classes_of(model),), batch, seq, device)
        for _ in range(2):  # the second step runs with every optimizer state present
            train_step(module, inputs, targets, opt, scaler, precision, device)
        mem.sync()

    def fits(batch: int) -> bool:
        if deadline.left() < 10:
            raise TimeoutError("time budget")
        failed = None
        try:
            attempt(batch)
        except RuntimeError as error:
            if not is_oom(error):
                raise
            failed = str(error).splitlines()[0][:200]
        # Outside the except block, so the traceback's frames (and their tensors) are gone before cleaning.
        opt.zero_grad(set_to_none=True)
        mem.clean()
        return failed is None

    entry: Dict[str, Any] = {"model": model, "precision": precision, "optimizer": optimizer, "seq": seq,
                             "cap_gib": cap_gib, "memory_fraction": fraction, "loss": "cross-entropy"}
    try:
        best, probes = search_max_batch(fits, FIT_MAX_BATCH)
        entry.update({"max_batch": best, "probes": probes})
    except TimeoutError:
        entry["skipped"] = "time budget ran out during the search"
    finally:
        if device.type == "cuda":
            torch.cuda.set_per_process_memory_fraction(1.0, 0)
    entry["memplan_args"] = ["fit", f"tests/models/{model}_train.onnx", "--mode", "train", "--precision", precision,
                             "--optimizer", optimizer, "--loss", "cross-entropy", "--runtime", "pytorch",
                             "--budget", f"{cap_gib}GiB"] + (["--dim", f"seq={seq}"] if seq else [])
    return entry
