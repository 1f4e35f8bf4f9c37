"""attnserve: the attention layer of an LLM serving engine.

Every op takes DLPack arrays (NumPy, PyTorch, JAX, CuPy, ...) and writes into the outputs you pass
(no hidden allocations). Inputs may be read-only; outputs must be writable (a JAX array or a
read-only NumPy array as an output raises attnserve.Error). bf16 / fp8 NumPy arrays use the
ml_dtypes dtypes (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn); fp8 may also travel as uint8.
On GPU arrays the op runs on the caller's current stream (PyTorch/CuPy), or on the raw
cudaStream_t given as ``stream=``. Errors are attnserve.Error (a ValueError) naming the argument.

Thread safety: ops, pools' views and separate planners may be used from several threads at once;
one planner, allocator, request pool or backend object must not be (see the README).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from . import _attnserve
from ._ops import wrap as _wrap
from ._ops import wrap_method as _wrap_method

__version__: str = _attnserve.__version__

Error = _attnserve.Error
ArrayView = _attnserve.ArrayView
TopkTransform = _attnserve.TopkTransform
cuda_available = _attnserve.cuda_available
built_with_cuda = _attnserve.built_with_cuda
ReqToTokenPool = _attnserve.ReqToTokenPool
SlotAllocator = _attnserve.SlotAllocator
MhaKvPool = _attnserve.MhaKvPool
MlaKvPool = _attnserve.MlaKvPool
MlaCacheFormat = _attnserve.MlaCacheFormat
IndexerKeyPool = _attnserve.IndexerKeyPool
ForwardMode = _attnserve.ForwardMode
DensePlanner = _attnserve.DensePlanner
SparsePlanner = _attnserve.SparsePlanner
from .backend import DenseBackend, DenseMultiStepBackend, ForwardBatch, LayerSpec, NSAIndexerMetadata, SparseBackend, SparseMultiStepBackend  # noqa: E402,E501

_OPS = [
    "paged_attention", "mla_attention", "merge_state", "merge_states", "sparse_mla",
    "quantize_fp8_groups", "indexer_ragged", "indexer_paged", "topk",
    "set_kv_buffer", "set_mla_kv_buffer", "set_index_k", "transform_index_page_table", "gather_index_k",
]

# Conversion failures of the stateful classes' methods also raise attnserve.Error naming the argument.
for _cls, _methods in [
    (_attnserve.DensePlanner, ("__init__", "init", "plan", "capture", "replay")),
    (_attnserve.SparsePlanner, ("__init__", "init", "plan", "capture", "replay")),
    (_attnserve.SlotAllocator, ("__init__", "alloc_extend", "alloc_decode", "free")),
    (_attnserve.ReqToTokenPool, ("__init__", "free", "write")),
    (_attnserve.MhaKvPool, ("__init__", "k", "v", "k_paged", "v_paged")),
    (_attnserve.MlaKvPool, ("__init__", "cache")),
    (_attnserve.IndexerKeyPool, ("__init__", "cache")),
]:
    for _m in _methods:
        _wrap_method(_cls, _m)

if TYPE_CHECKING:  # type checkers see the extension's signatures (_attnserve.pyi); `stream` is optional
    from ._attnserve import (gather_index_k, indexer_paged, indexer_ragged, merge_state, merge_states,
                             mla_attention, paged_attention, quantize_fp8_groups, set_index_k, set_kv_buffer,
                             set_mla_kv_buffer, sparse_mla, topk, transform_index_page_table)
else:
    for _name in _OPS:
        globals()[_name] = _wrap(getattr(_attnserve, _name))


# Context parallelism (docs/context_parallel.md): the per-rank plan, the communicators, the ops.
Communicator = _attnserve.Communicator
InProcessGroup = _attnserve.InProcessGroup
NcclCommunicator = _attnserve.NcclCommunicator
nccl_available = _attnserve.nccl_available
_CP_OPS = ["plan_context_parallel", "cp_route_topk", "cp_paged_attention", "cp_mla_attention", "cp_sparse_mla"]
for _name in _CP_OPS:
    globals()[_name] = _wrap(getattr(_attnserve, _name))
for _m in ("__init__", "communicator"):
    _wrap_method(_attnserve.InProcessGroup, _m)


def workspace_size(op, *args, **kwargs) -> int:
    """Bytes of workspace `op` (paged_attention, mla_attention, sparse_mla, topk) needs for these
    arguments on their device; allocate that once and pass it as workspace=."""
    return op(*args, query_workspace=True, **kwargs)


__all__ = ["__version__", "workspace_size", "Error", "ArrayView", "TopkTransform", "cuda_available",
           "built_with_cuda", "ReqToTokenPool", "SlotAllocator", "MhaKvPool", "MlaKvPool", "MlaCacheFormat",
           "IndexerKeyPool", "ForwardMode", "DensePlanner", "SparsePlanner", *_OPS]
__all__ += ["DenseBackend", "SparseBackend", "DenseMultiStepBackend", "SparseMultiStepBackend", "ForwardBatch",
            "LayerSpec", "NSAIndexerMetadata"]
__all__ += ["Communicator", "InProcessGroup", "NcclCommunicator", "nccl_available", *_CP_OPS]
