"""Where the GPU ground truth's numbers come from: the caching allocator's counters, cudaMemGetInfo, NVML
(what nvidia-smi reads), the environment's versions, and a time budget that keeps one device call bounded."""
from __future__ import annotations

import datetime
import gc
import os
import platform
import re
import subprocess
import time
from typing import Any, Dict, Optional

import torch


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Deadline:
    """Stops starting new work once the time budget is spent, so one GPU call always returns results."""

    def __init__(self, budget_s: float):
        self.start = time.monotonic()
        self.budget_s = budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()


def nvml_handle():
    try:
        import pynvml  # nvidia-ml-py: the library nvidia-smi itself reads
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None, None


def nvml_memory(nvml) -> Dict[str, Optional[int]]:
    """Device used (all processes) and this process's used memory, as nvidia-smi reports them."""
    lib, handle = nvml
    if lib is None:
        return {"nvml_device_used_bytes": None, "nvml_process_used_bytes": None}
    info = lib.nvmlDeviceGetMemoryInfo(handle)
    mine = None
    try:
        for proc in lib.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid():
                mine = proc.usedGpuMemory
    except Exception:
        pass
    return {"nvml_device_used_bytes": int(info.used), "nvml_process_used_bytes": mine}


def nvidia_smi() -> Optional[str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or None
    except Exception:
        return None


def environment(device: torch.device, dry_run: bool) -> Dict[str, Any]:
    env: Dict[str, Any] = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "dry_run": dry_run,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
    }
    try:
        import torchvision
        env["torchvision"] = torchvision.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(0)
        free, total = torch.cuda.mem_get_info()
        env.update({
            "gpu_name": torch.cuda.get_device_name(0),
            "gpu_total_bytes": int(total),
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "cuda_runtime_torch_built_with": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
            "nvidia_smi": nvidia_smi(),
            "sdp_flags": {k: getattr(torch.backends.cuda, k)() for k in
                          ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled")
                          if hasattr(torch.backends.cuda, k)},
        })
        smi = env["nvidia_smi"]
        if smi:
            env["driver"] = smi.split(",")[1].strip()
    else:
        env["gpu_name"] = "cpu (dry run)"
    return env


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


class Memory:
    """Reads the caching allocator's counters and the device's usage; on the CPU (dry run) reads nothing."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.nvml = nvml_handle() if self.cuda else (None, None)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def clean(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear is not None:
                clear()  # torch >= 2.0 keeps a cuBLAS workspace allocated per handle and stream
            torch.cuda.empty_cache()

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def peaks(self) -> Dict[str, Optional[int]]:
        if not self.cuda:
            return {"max_allocated_bytes": None, "max_reserved_bytes": None}
        self.sync()
        return {"max_allocated_bytes": int(torch.cuda.max_memory_allocated()),
                "max_reserved_bytes": int(torch.cuda.max_memory_reserved())}

    def now(self) -> Dict[str, Optional[int]]:
        if not self.cuda:
            return {"allocated_bytes": None, "reserved_bytes": None, "device_used_bytes": None,
                    "context_and_other_bytes": None, "nvml_device_used_bytes": None, "nvml_process_used_bytes": None}
        self.sync()
        free, total = torch.cuda.mem_get_info()
        reserved = int(torch.cuda.memory_reserved())
        reading = {"allocated_bytes": int(torch.cuda.memory_allocated()), "reserved_bytes": reserved,
                   "device_used_bytes": int(total - free),
                   # The CUDA context, loaded kernels and library memory outside the allocator.
                   "context_and_other_bytes": int(total - free) - reserved}
        reading.update(nvml_memory(self.nvml))
        return reading


def is_oom(error: BaseException) -> bool:
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom_type is not None and isinstance(error, oom_type)) or "out of memory" in str(error)
