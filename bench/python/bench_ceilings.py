"""The two ceilings, measured in the same run: a large device-to-device copy (GB/s counting bytes
read plus bytes written) and a large bf16 matrix product through torch.matmul (TFLOP/s) on random
data. Also what the device and the software are."""
from __future__ import annotations

import platform

from bench_counts import gemm_flops
from bench_timing import Timer


def measure_copy(torch, timer: Timer, device: str, nbytes: int) -> float:
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 256)
    dst = torch.empty_like(src)
    us = timer.median_us(lambda i: dst.copy_(src), 1)
    return 2.0 * nbytes / us * 1e-3


def measure_gemm(torch, timer: Timer, device: str, n: int) -> float:
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = [torch.randn(n, n, dtype=dtype, device=device) for _ in range(2)]
    b = [torch.randn(n, n, dtype=dtype, device=device) for _ in range(2)]
    c = torch.empty(n, n, dtype=dtype, device=device)
    us = timer.median_us(lambda i: torch.matmul(a[i], b[i], out=c), 2)
    return gemm_flops(n, n, n) / us * 1e-6


def measure_ceilings(torch, timer: Timer, device: str, smoke: bool) -> dict:
    copy_bytes = (64 << 20) if smoke else (2 << 30)
    gemm_n = 512 if smoke else 8192
    out = {"copy_desc": f"{copy_bytes / 2**30:g} GiB", "gemm_desc": f"{gemm_n}³"}
    out["copy_gbs"] = measure_copy(torch, timer, device, copy_bytes)
    out["gemm_tflops"] = measure_gemm(torch, timer, device, gemm_n)
    return out


def device_info(torch, device: str) -> dict:
    info = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = None
    if device != "cuda":
        info["gpu"] = f"cpu ({platform.processor() or platform.machine()})"
        return info
    props = torch.cuda.get_device_properties(0)
    info["gpu"] = torch.cuda.get_device_name(0)
    info["sms"] = getattr(props, "multi_processor_count", None)
    info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
    info["l2_mib"] = round(getattr(props, "L2_cache_size", 0) / 2**20, 1) or None
    info["cuda"] = torch.version.cuda
    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        info["cudnn"] = None
    return info
