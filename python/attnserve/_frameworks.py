"""Framework glue: the caller's current CUDA stream, and fp8 arrays passed as raw bytes.

The C++ core sees every array through DLPack. Two things DLPack does not carry are handled here:
the stream a framework is currently launching on, and fp8 dtypes (DLPack v0.6 has none), which
travel as uint8 views of the same memory.
"""
from __future__ import annotations

import sys


def current_stream(arrays) -> int:
    """Raw cudaStream_t of the caller's current stream for the first GPU array found, else 0."""
    torch = sys.modules.get("torch")
    cupy = sys.modules.get("cupy")
    for a in arrays:
        if torch is not None and isinstance(a, torch.Tensor) and a.is_cuda:
            return torch.cuda.current_stream(a.device).cuda_stream
        if cupy is not None and isinstance(a, cupy.ndarray):
            return cupy.cuda.get_current_stream().ptr
    return 0


def as_dlpack_compatible(a):
    """fp8 tensors (torch float8_e4m3fn, ml_dtypes float8) become uint8 views; others pass through."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if a.dtype == getattr(torch, "float8_e4m3fn", None):
            return a.view(torch.uint8)
        return a
    dt = getattr(a, "dtype", None)
    if dt is not None and str(dt) == "float8_e4m3fn" and hasattr(a, "view"):
        try:
            import numpy as np

            return a.view(np.uint8)
        except Exception:  # pragma: no cover - framework without a byte view
            return a
    return a
