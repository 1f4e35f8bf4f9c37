"""attnserve: the attention layer of an LLM serving engine.

Every op takes DLPack arrays (NumPy, PyTorch, JAX, CuPy, ...) and writes into the outputs you pass
(no hidden allocations). On GPU arrays the op runs on the caller's current stream (PyTorch/CuPy),
or on the raw cudaStream_t given as ``stream=``.
"""
from __future__ import annotations

import functools as _functools

from . import _attnserve
from ._frameworks import as_dlpack_compatible as _compat
from ._frameworks import current_stream as _current_stream

Error = _attnserve.Error
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


def _wrap(fn):
    @_functools.wraps(fn)
    def op(*args, stream=None, **kwargs):
        args = [_compat(a) for a in args]
        kwargs = {k: _compat(v) for k, v in kwargs.items()}
        if stream is None:
            stream = _current_stream(list(args) + list(kwargs.values()))
        return fn(*args, stream=int(stream), **kwargs)

    return op


for _name in _OPS:
    globals()[_name] = _wrap(getattr(_attnserve, _name))


def workspace_size(op, *args, **kwargs) -> int:
    """Bytes of workspace `op` (paged_attention, mla_attention, sparse_mla, topk) needs for these
    arguments on their device; allocate that once and pass it as workspace=."""
    return op(*args, query_workspace=True, **kwargs)

__all__ = ["workspace_size", "Error", "TopkTransform", "cuda_available", "built_with_cuda", "ReqToTokenPool", "SlotAllocator",
           "MhaKvPool", "MlaKvPool", "MlaCacheFormat", "IndexerKeyPool", "ForwardMode", "DensePlanner",
           "SparsePlanner", *_OPS]
__all__ += ["DenseBackend", "SparseBackend", "DenseMultiStepBackend", "SparseMultiStepBackend", "ForwardBatch", "LayerSpec", "NSAIndexerMetadata"]
