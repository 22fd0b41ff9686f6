"""memplan's predicted allocation trace in the format of PyTorch's memory snapshots, so PyTorch's memory viewer
(https://pytorch.org/memory_viz, torch/cuda/_memory_viz.py) opens a prediction beside a measured snapshot.

The format is what ``torch.cuda.memory._snapshot()`` returns and ``_dump_snapshot(path)`` pickles
(torch/cuda/memory.py; c10/cuda/CUDACachingAllocator.h, ``SegmentInfo``, ``BlockInfo``, ``TraceEntry``):

    {"segments": [{"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                   "stream", "segment_type": "small"|"large", "blocks": [{"address", "size", "requested_size",
                   "state": "active_allocated"|"inactive", "frames": [...], "history": [...]}]}],
     "device_traces": [[{"action": "segment_alloc"|"alloc"|"free_requested"|"free_completed", "addr", "size",
                         "stream", "time_us", "frames": [{"filename", "line", "name"}]}]]}

Where a measured snapshot has the Python stack of the allocation, memplan puts one frame: filename
"memplan:<category>" (weights, activations, gradients, ...), line = the step index, name = "<tensor> @ <step>".
Blocks also carry torch 1.13/2.0's "history" list, so older viewers read them too. Segments are the allocator's
state at the end of the step (the snapshot is taken there), addresses are the simulated device space's.
"""
from __future__ import annotations

import os
import pickle
from typing import Any, Dict, List

from . import _core
import json

_SMALL_SIZE = 1048576  # c10/cuda/CUDACachingAllocator.cpp kSmallSize: blocks up to 1 MiB use the small pool


def _frame(buffers, step_names, buffer: int, step: int) -> List[Dict[str, Any]]:
    name, category = buffers[buffer]
    where = step_names[step] if 0 <= step < len(step_names) else "before the first step"
    return [{"filename": f"memplan:{category}", "line": step, "name": f"{name} @ {where}"}]


def build(model_path, **options: Any) -> Dict[str, Any]:
    """The snapshot dictionary of memplan's prediction for `model_path` (estimate options as keywords;
    the runtime is pytorch)."""
    t = _core.trace(model_path, **options)
    buffers, step_names = t["buffers"], t["step_names"]
    trace: List[Dict[str, Any]] = []
    segments: Dict[int, Dict[str, Any]] = {}
    live: Dict[int, Dict[str, Any]] = {}  # address -> block, at the end
    for time, (action, addr, size, requested, buffer, step) in enumerate(t["events"]):
        if action == "segment_alloc":
            segments[addr] = {"size": size, "small": None}
            trace.append({"action": "segment_alloc", "addr": addr, "size": size, "stream": 0, "time_us": time,
                          "frames": []})
            continue
        frames = _frame(buffers, step_names, buffer, step)
        if action == "alloc":
            if addr in segments and segments[addr]["small"] is None:
                segments[addr]["small"] = size <= _SMALL_SIZE
            trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": time, "frames": frames})
            live[addr] = {"address": addr, "size": size, "requested_size": requested, "state": "active_allocated",
                          "frames": frames, "history": [{"addr": addr, "real_size": requested, "frames": frames}]}
        else:
            for a in ("free_requested", "free_completed"):
                trace.append({"action": a, "addr": addr, "size": size, "stream": 0, "time_us": time, "frames": frames})
            live.pop(addr, None)

    out_segments = []
    for start in sorted(segments):
        total = segments[start]["size"]
        blocks, at = [], start
        for addr in sorted(a for a in live if start <= a < start + total):
            if addr > at:
                blocks.append({"address": at, "size": addr - at, "requested_size": 0, "state": "inactive",
                               "frames": []})
            blocks.append(live[addr])
            at = addr + live[addr]["size"]
        if at < start + total:
            blocks.append({"address": at, "size": start + total - at, "requested_size": 0, "state": "inactive",
                           "frames": []})
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        out_segments.append({
            "device": 0, "address": start, "total_size": total, "allocated_size": allocated, "active_size": allocated,
            "requested_size": sum(b["requested_size"] for b in blocks), "stream": 0,
            "segment_type": "small" if segments[start]["small"] else "large", "segment_pool_id": (0, 0),
            "is_expandable": False, "frames": [], "blocks": blocks})
    return {"segments": out_segments, "device_traces": [trace],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "memplan": "predicted, not measured"},
            "memplan": {"peak_allocated_bytes": t["peak_allocated_bytes"],
                        "peak_reserved_bytes": t["peak_reserved_bytes"], "estimate": json.loads(t["estimate"])}}


def write(model_path, out_path, **options: Any) -> Dict[str, Any]:
    snapshot = build(model_path, **options)
    with open(os.fspath(out_path), "wb") as f:
        pickle.dump(snapshot, f)
    return snapshot
