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
    """Arrays whose dtype DLPack cannot carry from their framework, re-typed for the C++ core:
    torch float8_e4m3fn -> a uint8 view (the core reads uint8 caches as fp8); NumPy arrays of the
    ml_dtypes bfloat16 / float8_e4m3fn dtypes (NumPy's __dlpack__ refuses them) -> an
    attnserve.ArrayView of the same memory with the dtype bf16 / fp8_e4m3. Others pass through."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if a.dtype == getattr(torch, "float8_e4m3fn", None):
            return a.view(torch.uint8)
        return a
    np = sys.modules.get("numpy")
    if np is not None and isinstance(a, np.ndarray) and a.dtype.kind == "V":
        name = a.dtype.name
        if name in _ML_DTYPES:
            raw_dtype, core_dtype = _ML_DTYPES[name]
            from . import _attnserve

            return _attnserve._retyped(a, a.view(raw_dtype), core_dtype)
    return a


# ml_dtypes dtype name -> (the NumPy dtype of its bytes, the core's dtype name)
_ML_DTYPES = {"bfloat16": ("uint16", "bf16"), "float8_e4m3fn": ("uint8", "fp8_e4m3")}
