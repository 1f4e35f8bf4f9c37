"""Attention backends with the seeds' engine-facing lifecycle (sglang's AttentionBackend).

An engine swaps these in where it drives its attention backend each step::

    backend.init_forward_metadata(forward_batch)                # once per step
    o = backend.forward_extend(q, k, v, layer, forward_batch)   # per layer (forward_decode in decode)

with CUDA graphs: ``init_cuda_graph_state``, ``init_forward_metadata_capture_cuda_graph`` (before
capturing) and ``init_forward_metadata_replay_cuda_graph`` (before each replay).

Arrays are any DLPack arrays (PyTorch, CuPy, JAX, NumPy); kernels run on the caller's current stream
(PyTorch/CuPy) or on ``stream=``. Lengths are read on the host: pass ``seq_lens_cpu`` etc. (device
tensors are copied to the host, which synchronizes). Everything is allocated when the backend is
built; forward writes ``out`` when given, else a new array like ``q`` ([rows, heads * v_head_dim]).
A guide: docs/backends.md.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Optional

from . import _attnserve
from ._frameworks import as_dlpack_compatible as _compat
from ._frameworks import current_stream as _current_stream

ForwardMode = _attnserve.ForwardMode
NsaImpl = _attnserve.NsaImpl
MlaCacheFormat = _attnserve.MlaCacheFormat

__all__ = ["ForwardBatch", "LayerSpec", "DenseBackend", "SparseBackend", "DenseMultiStepBackend",
           "SparseMultiStepBackend", "NSAIndexerMetadata"]


@dataclass
class ForwardBatch:
    """The fields the seeds' backends read from sglang's ForwardBatch.

    Lengths and indices are read on the host (lists, NumPy arrays or tensors; a ``*_cpu`` field wins
    over its device twin). ``out_cache_loc`` stays on the device: the slots the new tokens' K/V are
    stored at, one per query row. ``draft_slots`` (draft decode): [bs, num_steps] slots of the draft
    tokens, request-major ([bs, topk, num_steps] with draft trees). For draft_extend, ``extend_seq_lens``
    are the accepted lengths. Draft trees (``speculative_eagle_topk`` > 1), target_verify: the tree of
    every request as ``tree_parents`` ([bs, draft_tokens] parent draft token, -1 for a root) or
    ``tree_mask`` ([bs, draft_tokens] packed ancestor bits, bit j: the token sees draft token j).
    """

    forward_mode: Any
    seq_lens: Any
    req_pool_indices: Any
    out_cache_loc: Any = None
    extend_seq_lens: Any = None
    extend_prefix_lens: Any = None
    draft_slots: Any = None
    seq_lens_cpu: Any = None
    extend_seq_lens_cpu: Any = None
    extend_prefix_lens_cpu: Any = None
    req_to_token: Any = None  # overrides the backend's table for this batch
    tree_parents: Any = None
    tree_mask: Any = None

    @property
    def batch_size(self) -> int:
        return len(_host_ints(_first(self.seq_lens_cpu, self.seq_lens)) or [])


@dataclass
class LayerSpec:
    """Per-layer parameters (sglang's RadixAttention fields; any object with them works). None takes
    the backend's default."""

    layer_id: int = 0
    scaling: Optional[float] = None
    logit_cap: Optional[float] = None
    sliding_window_size: Optional[int] = None
    use_irope: bool = False
    k_scale: Optional[float] = None
    v_scale: Optional[float] = None


# ---- Conversions ------------------------------------------------------------------------------------

def _first(*xs):
    return next((x for x in xs if x is not None), None)


def _host_ints(x):
    """A flat list of Python ints from a list, tuple, NumPy array or tensor (None stays None)."""
    if x is None:
        return None
    if hasattr(x, "tolist"):
        x = x.tolist()
    out = []

    def flat(v):
        if isinstance(v, (list, tuple)):
            for e in v:
                flat(e)
        else:
            out.append(int(v))

    flat(x)
    return out


def _host_masks(x):
    """Ancestor bit masks as signed 64-bit ints (bit 63 set: negative), as the core takes them."""
    m = _host_ints(x)
    return None if m is None else [v - (1 << 64) if v >= (1 << 63) else v for v in m]


def _opt_float(v):
    if v is None:
        return None
    if hasattr(v, "item"):
        v = v.item()
    return float(v)


def _layer_kwargs(layer):
    sw = getattr(layer, "sliding_window_size", None)
    return dict(layer_id=int(getattr(layer, "layer_id", 0)), scaling=_opt_float(getattr(layer, "scaling", None)),
                logit_cap=_opt_float(getattr(layer, "logit_cap", None)),
                sliding_window_size=None if sw is None else int(sw),
                use_irope=bool(getattr(layer, "use_irope", False)),
                k_scale=_opt_float(getattr(layer, "k_scale", None)),
                v_scale=_opt_float(getattr(layer, "v_scale", None)))


def _batch_kwargs(fb: ForwardBatch):
    table = fb.req_to_token
    return dict(mode=fb.forward_mode, seq_lens=_host_ints(_first(fb.seq_lens_cpu, fb.seq_lens)),
                req_pool_indices=_host_ints(fb.req_pool_indices),
                extend_seq_lens=_host_ints(_first(fb.extend_seq_lens_cpu, fb.extend_seq_lens)),
                extend_prefix_lens=_host_ints(_first(fb.extend_prefix_lens_cpu, fb.extend_prefix_lens)),
                draft_slots=_host_ints(fb.draft_slots), req_to_token=None if table is None else _compat(table),
                tree_parents=_host_ints(fb.tree_parents), tree_mask=_host_masks(fb.tree_mask))


def _device_of(array) -> str:
    """"cpu" or "cuda:N" from an array's __dlpack_device__ (1 = CPU, 2 = CUDA, 3 = CUDA host)."""
    dev = getattr(array, "__dlpack_device__", None)
    if dev is None:
        return "cpu"
    kind, index = dev()
    return f"cuda:{int(index)}" if int(kind) == 2 else "cpu"


def _empty(like, shape):
    """A new array of `shape` with `like`'s dtype and device (PyTorch, CuPy, NumPy)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(like, torch.Tensor):
        return like.new_empty(shape)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(like, cupy.ndarray):
        return cupy.empty(shape, dtype=like.dtype)
    import numpy as np

    if isinstance(like, np.ndarray):
        return np.empty(shape, dtype=like.dtype)
    raise _attnserve.Error(f"attnserve: cannot allocate an output like a {type(like).__name__} (a JAX array or "
                           f"another immutable type): pass argument 'out' (a writable array)")


def _rows_2d(a):
    """[slots, 1, dim] (sglang's MLA buffers) as [slots, dim] (raw DLPack capsules pass through)."""
    shape = tuple(getattr(a, "shape", ()))
    if len(shape) == 3 and shape[1] == 1:
        return a.reshape(shape[0], shape[2])
    return a


def _kv_layers(pool, mla: bool, num_layers=None):
    """Per-layer (k, v, k_scale, v_scale) from: a list [(k, v), ...] (MLA: [cache, ...]); an attnserve
    MhaKvPool / MlaKvPool; or an sglang-style pool (get_kv_buffer / get_key_buffer, layer_num)."""
    ks, vs, k_scales, v_scales = [], [], [], []
    if isinstance(pool, (list, tuple)):
        for item in pool:
            if isinstance(item, (list, tuple)):
                ks.append(item[0])
                vs.append(item[1] if len(item) > 1 else None)
            else:
                ks.append(item)
                vs.append(None)
    elif isinstance(pool, _attnserve.MhaKvPool):
        n = num_layers or pool.num_layers
        ks = [pool.k(i) for i in range(n)]
        vs = [pool.v(i) for i in range(n)]
        k_scales = [pool.k_scale(i) for i in range(n)]
        v_scales = [pool.v_scale(i) for i in range(n)]
    elif isinstance(pool, _attnserve.MlaKvPool):
        n = num_layers or pool.num_layers
        ks = [pool.cache(i) for i in range(n)]
        vs = [None] * n
    elif hasattr(pool, "get_kv_buffer") or hasattr(pool, "get_key_buffer"):
        n = num_layers or getattr(pool, "layer_num")
        if mla:
            ks = [pool.get_key_buffer(i) for i in range(n)]
            vs = [None] * n
        else:
            pairs = [pool.get_kv_buffer(i) for i in range(n)]
            ks = [p[0] for p in pairs]
            vs = [p[1] for p in pairs]
    else:
        raise _attnserve.Error("attnserve: argument 'token_to_kv_pool' must be a list of per-layer buffers, an attnserve MhaKvPool / "
                        "MlaKvPool, or a pool with get_kv_buffer(layer_id) / get_key_buffer(layer_id)")
    if mla:
        ks = [_rows_2d(k) for k in ks]
    return [_compat(k) for k in ks], [None if v is None else _compat(v) for v in vs], k_scales, v_scales


def _set_common(cfg, *, page_size, softmax_scale, softcap, deterministic, draft_token_num, num_steps, step_id,
                max_bs, max_num_tokens, max_context_len, req_to_token, device):
    cfg.page_size = page_size
    cfg.softmax_scale = float(softmax_scale)
    cfg.softcap = float(softcap)
    cfg.deterministic = bool(deterministic)
    cfg.draft_token_num, cfg.num_steps, cfg.step_id = draft_token_num, num_steps, step_id
    cfg.max_bs, cfg.max_num_tokens, cfg.max_context_len = max_bs, max_num_tokens, max_context_len
    cfg.device = device or _device_of(req_to_token)
    cfg.set_req_to_token(_compat(req_to_token))


def _dense_config(*, num_q_heads, num_kv_heads, head_dim, v_head_dim=0, use_mla=False, kv_dtype="bf16",
                  softmax_scale=0.0, softcap=0.0, sliding_window_size=-1, page_size=1, attention_chunk_size=0,
                  deterministic=False, speculative_num_draft_tokens=0, speculative_num_steps=0, step_id=0, max_bs,
                  max_num_tokens, max_context_len, req_to_token, token_to_kv_pool, num_layers=None, device=None,
                  speculative_eagle_topk=1):
    cfg = _attnserve.DenseBackendConfig()
    cfg.topk = int(speculative_eagle_topk or 1)  # > 1: draft trees (docs/backends.md)
    cfg.arch = _attnserve.AttentionArch.mla if use_mla else _attnserve.AttentionArch.mha
    cfg.num_q_heads, cfg.num_kv_heads, cfg.head_dim, cfg.v_head_dim = num_q_heads, num_kv_heads, head_dim, v_head_dim
    cfg.kv_dtype = kv_dtype
    cfg.sliding_window_size = sliding_window_size
    cfg.attention_chunk_size = attention_chunk_size
    _set_common(cfg, page_size=page_size, softmax_scale=softmax_scale, softcap=softcap, deterministic=deterministic,
                draft_token_num=speculative_num_draft_tokens, num_steps=speculative_num_steps, step_id=step_id,
                max_bs=max_bs, max_num_tokens=max_num_tokens, max_context_len=max_context_len,
                req_to_token=req_to_token, device=device)
    ks, vs, k_scales, v_scales = _kv_layers(token_to_kv_pool, use_mla, num_layers)
    cfg.set_kv_buffers(ks, [] if use_mla else vs, k_scales, v_scales, fp8=kv_dtype == "fp8_e4m3")
    info = dict(heads=num_q_heads, v_head_dim=(v_head_dim or head_dim), table=req_to_token)
    return cfg, info


def _sparse_config(*, num_q_heads, kv_cache_format="bf16", index_topk=2048, index_n_heads=64, index_head_dim=128,
                   softmax_scale=0.0, softcap=0.0, page_size=64, deterministic=False,
                   nsa_prefill_backend="automatic", nsa_decode_backend="automatic", fuse_topk=True,
                   speculative_num_draft_tokens=0, speculative_num_steps=0, step_id=0, max_bs, max_num_tokens,
                   max_context_len, req_to_token, token_to_kv_pool, num_layers=None, device=None,
                   speculative_eagle_topk=1):
    cfg = _attnserve.SparseBackendConfig()
    cfg.topk = int(speculative_eagle_topk or 1)  # > 1: draft trees (docs/backends.md)
    cfg.num_q_heads = num_q_heads
    if isinstance(kv_cache_format, str):
        kv_cache_format = getattr(MlaCacheFormat, kv_cache_format)
    cfg.kv_cache_format = kv_cache_format
    cfg.index_topk, cfg.index_n_heads, cfg.index_head_dim = index_topk, index_n_heads, index_head_dim
    cfg.prefill_impl = _attnserve.parse_nsa_impl(nsa_prefill_backend) if isinstance(nsa_prefill_backend, str) \
        else nsa_prefill_backend
    cfg.decode_impl = _attnserve.parse_nsa_impl(nsa_decode_backend) if isinstance(nsa_decode_backend, str) \
        else nsa_decode_backend
    cfg.fuse_topk = bool(fuse_topk)
    _set_common(cfg, page_size=page_size, softmax_scale=softmax_scale, softcap=softcap, deterministic=deterministic,
                draft_token_num=speculative_num_draft_tokens, num_steps=speculative_num_steps, step_id=step_id,
                max_bs=max_bs, max_num_tokens=max_num_tokens, max_context_len=max_context_len,
                req_to_token=req_to_token, device=device)
    ks, _, _, _ = _kv_layers(token_to_kv_pool, True, num_layers)
    cfg.set_kv_buffers(ks)
    info = dict(heads=num_q_heads, v_head_dim=512, table=req_to_token)
    return cfg, info


# ---- Backends ---------------------------------------------------------------------------------------

class _Backend:
    """The lifecycle both backends share, over a core object (_DenseBackend / _SparseBackend)."""

    _core: Any
    _info: dict

    @classmethod
    def _wrap(cls, core, info):
        obj = cls.__new__(cls)
        obj._core, obj._info = core, info
        return obj

    def _stream(self, arrays=()):
        return int(_current_stream([*arrays, self._info["table"]]))

    # -- metadata
    def init_forward_metadata(self, forward_batch: ForwardBatch):
        self._core.init_forward_metadata(**_batch_kwargs(forward_batch), stream=self._stream())

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: Optional[int] = None):
        if max_num_tokens is None:
            max_num_tokens = self._info["max_num_tokens"]
        self._core.init_cuda_graph_state(max_bs, max_num_tokens, stream=self._stream())

    def init_forward_metadata_capture_cuda_graph(self, bs, num_tokens, req_pool_indices=None, seq_lens=None,
                                                 encoder_lens=None, forward_mode=None, spec_info=None):
        """The seeds' arguments; only bs, num_tokens and forward_mode matter (capture writes padding)."""
        if forward_mode is None:
            raise _attnserve.Error("attnserve: init_forward_metadata_capture_cuda_graph needs argument 'forward_mode'")
        self._core.init_forward_metadata_capture_cuda_graph(bs, num_tokens, forward_mode, stream=self._stream())

    def init_forward_metadata_replay_cuda_graph(self, bs, req_pool_indices=None, seq_lens=None, seq_lens_sum=None,
                                                encoder_lens=None, forward_mode=None, spec_info=None,
                                                seq_lens_cpu=None, out_cache_loc=None, *, forward_batch=None):
        """Either the seeds' arguments (draft_extend: spec_info.accept_length; draft_decode:
        spec_info.draft_slots) or a ForwardBatch (positionally or as forward_batch=)."""
        if isinstance(req_pool_indices, ForwardBatch):
            forward_batch = req_pool_indices
        if forward_batch is None:
            accept = getattr(spec_info, "accept_length", None)
            forward_batch = ForwardBatch(
                forward_mode=forward_mode, seq_lens=_first(seq_lens_cpu, seq_lens), req_pool_indices=req_pool_indices,
                extend_seq_lens=accept if forward_mode == ForwardMode.draft_extend else None,
                draft_slots=getattr(spec_info, "draft_slots", None),
                tree_parents=getattr(spec_info, "tree_parents", None) if forward_mode == ForwardMode.target_verify
                else None,
                tree_mask=getattr(spec_info, "tree_mask", None) if forward_mode == ForwardMode.target_verify else None)
        kw = _batch_kwargs(forward_batch)
        mode = kw.pop("mode")
        self._core.init_forward_metadata_replay_cuda_graph(bs, mode, **kw, stream=self._stream())

    def get_cuda_graph_seq_len_fill_value(self):
        return self._core.get_cuda_graph_seq_len_fill_value()

    @property
    def forward_metadata(self):
        """The current metadata as a dict of arrays (views of the backend's buffers) and ints."""
        return self._core.forward_metadata

    @property
    def workspace_bytes(self):
        return self._core.workspace_bytes

    @property
    def device_bytes(self):
        return self._core.device_bytes

    # -- forward
    def _forward(self, fn, q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope, topk_indices, out,
                 out_cache_loc, stream):
        if out_cache_loc is None and forward_batch is not None:
            out_cache_loc = forward_batch.out_cache_loc
        if out is None:
            out = _empty(q, (q.shape[0], self._info["heads"] * self._info["v_head_dim"]))
        opt = lambda a: None if a is None else _compat(a)  # noqa: E731
        if stream is None:
            stream = _current_stream([q, out])
        getattr(self._core, fn)(_compat(q), _compat(out), k=opt(k), v=opt(v), q_rope=opt(q_rope), k_rope=opt(k_rope),
                                out_cache_loc=opt(out_cache_loc), save_kv_cache=bool(save_kv_cache),
                                topk_indices=opt(topk_indices), stream=int(stream), **_layer_kwargs(layer))
        return out

    def forward_extend(self, q, k, v, layer, forward_batch=None, save_kv_cache=True, q_rope=None, k_rope=None,
                       topk_indices=None, *, out=None, out_cache_loc=None, stream=None):
        """Extend, target_verify and draft_extend batches: store k/v (MLA: k = kv_c, k_rope) at
        out_cache_loc when save_kv_cache, attend, return out."""
        return self._forward("forward_extend", q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                             topk_indices, out, out_cache_loc, stream)

    def forward_decode(self, q, k, v, layer, forward_batch=None, save_kv_cache=True, q_rope=None, k_rope=None,
                       topk_indices=None, *, out=None, out_cache_loc=None, stream=None):
        """Decode and draft_decode batches (as forward_extend)."""
        return self._forward("forward_decode", q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                             topk_indices, out, out_cache_loc, stream)

    def forward(self, q, k, v, layer, forward_batch=None, save_kv_cache=True, q_rope=None, k_rope=None,
                topk_indices=None, *, out=None, out_cache_loc=None, stream=None):
        """forward_decode or forward_extend, by the current metadata's mode."""
        return self._forward("forward", q, k, v, layer, forward_batch, save_kv_cache, q_rope, k_rope,
                             topk_indices, out, out_cache_loc, stream)


class DenseBackend(_Backend):
    """Dense attention (the seeds' FlashAttentionBackend): MHA/GQA/MQA or MLA (use_mla), paged KV,
    sliding window, softcap, local attention for use_irope layers (attention_chunk_size), EAGLE modes.

    token_to_kv_pool: per-layer buffers (a list of (k, v) pairs, MLA: of latent caches [slots, 576]),
    an attnserve MhaKvPool / MlaKvPool, or an sglang-style pool. The arrays must stay where they are.
    """

    def __init__(self, *, stream=None, **config):
        cfg, info = _dense_config(**config)
        info["max_num_tokens"] = cfg.max_num_tokens
        self._info = info
        self._core = _attnserve._DenseBackend(cfg, stream=int(stream or 0))


class NSAIndexerMetadata:
    """The seeds' NSAIndexerMetadata: what the lightning indexer reads, and its top-k made slots."""

    def __init__(self, backend: "SparseBackend"):
        self._backend = backend

    def get_seqlens_int32(self):
        return self._backend._core.get_seqlens_int32()

    def get_page_table_64(self):
        return self._backend._core.get_page_table_64()

    def get_seqlens_expanded(self):
        return self._backend._core.get_seqlens_expanded()

    def topk_transform(self, logits, topk: int, *, row_starts=None, stream=None):
        """[rows, topk] i32 token slots of each row's top-k logits (-1 padded), a view of the backend's
        buffer valid until the next call."""
        if stream is None:
            stream = _current_stream([logits])
        return self._backend._core.topk_transform(_compat(logits), int(topk),
                                                  row_starts=None if row_starts is None else _compat(row_starts),
                                                  stream=int(stream))


class SparseBackend(_Backend):
    """DeepSeek sparse attention (the seeds' NativeSparseAttnBackend) over an MLA latent cache
    (kv_cache_format "bf16" or "fp8_656"). nsa_prefill_backend / nsa_decode_backend pick the kernel path:
    "automatic", "sparse_bf16" (flashmla_sparse), "sparse_fp8" (flashmla_kv) or "gather" (fa3)."""

    def __init__(self, *, stream=None, **config):
        cfg, info = _sparse_config(**config)
        info["max_num_tokens"] = cfg.max_num_tokens
        self._info = info
        self._core = _attnserve._SparseBackend(cfg, stream=int(stream or 0))

    def get_indexer_metadata(self, layer_id=None, forward_batch=None) -> NSAIndexerMetadata:
        return NSAIndexerMetadata(self)

    @property
    def resolved_prefill_impl(self):
        return self._core.resolved_prefill_impl

    @property
    def resolved_decode_impl(self):
        return self._core.resolved_decode_impl


class _MultiStep:
    """One backend per EAGLE draft step (attn_backends[i] serves step i); draft_decode only."""

    _backend_cls: Any
    _core_cls: Any
    _make_config: Any

    def __init__(self, *, speculative_num_steps: int, stream=None, **config):
        cfg, info = type(self)._make_config(speculative_num_steps=speculative_num_steps, **config)
        info["max_num_tokens"] = cfg.max_num_tokens
        self._info = info
        self._core = type(self)._core_cls(cfg, stream=int(stream or 0))
        self.attn_backends = [self._backend_cls._wrap(self._core.step(i), info)
                              for i in range(self._core.num_backends)]

    def _stream(self):
        return int(_current_stream([self._info["table"]]))

    def _kw(self, fb: ForwardBatch):
        kw = _batch_kwargs(fb)
        return dict(seq_lens=kw["seq_lens"], req_pool_indices=kw["req_pool_indices"], draft_slots=kw["draft_slots"],
                    req_to_token=kw["req_to_token"])

    def init_forward_metadata(self, forward_batch: ForwardBatch):
        self._core.init_forward_metadata(**self._kw(forward_batch), stream=self._stream())

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: Optional[int] = None):
        self._core.init_cuda_graph_state(max_bs, max_num_tokens or self._info["max_num_tokens"], stream=self._stream())

    def init_forward_metadata_capture_cuda_graph(self, forward_batch: ForwardBatch):
        self._core.init_forward_metadata_capture_cuda_graph(forward_batch.batch_size, stream=self._stream())

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: ForwardBatch, bs: int):
        self._core.init_forward_metadata_replay_cuda_graph(bs, **self._kw(forward_batch), stream=self._stream())


class DenseMultiStepBackend(_MultiStep):
    _backend_cls = DenseBackend
    _core_cls = _attnserve._DenseMultiStepBackend
    _make_config = staticmethod(_dense_config)


class SparseMultiStepBackend(_MultiStep):
    _backend_cls = SparseBackend
    _core_cls = _attnserve._SparseMultiStepBackend
    _make_config = staticmethod(_sparse_config)
