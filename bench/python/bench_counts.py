"""FLOP and byte counts of the benchmark workloads (pure Python, no torch).

The conventions are those of bench/NOTES.md and shared/ANCHORS.md, so the Python harness and the
C++ benches report comparable numbers:
- attention FLOPs = 2 * (query, key) pairs * h_q * (d_qk + d_v); causal rows are aligned bottom-right,
  so causal prefill counts half the square (s * (s + 1) / 2 pairs);
- decode / verify GB/s = K + V bytes read / time (q and out are noise next to the cache);
- MLA FLOPs = 2 * rows * h_q * keys * (576 + 512);
- a rate's "% of copy" divides GB/s by the measured device-copy rate, which counts bytes read plus
  bytes written; "% of GEMM" divides TFLOP/s by the measured bf16 GEMM rate.
"""
from __future__ import annotations

MLA_D_LATENT = 512
MLA_D_ROPE = 64
MLA_D_QK = MLA_D_LATENT + MLA_D_ROPE  # 576
MLA_D_V = MLA_D_LATENT                # 512
MLA_BF16_ROW_BYTES = MLA_D_QK * 2     # 1152
MLA_FP8_ROW_BYTES = 656               # 512 fp8 + 4 f32 scales + 64 bf16 rope
INDEX_DIM = 128
INDEX_KEY_BYTES = INDEX_DIM + 4       # 128 fp8 + one f32 scale


def causal_pairs(b: int, q_len: int, ctx: int, causal: bool = True) -> float:
    """(query, key) pairs computed: row i of q_len sits at position ctx - q_len + i (bottom-right)."""
    if not causal:
        return float(b) * q_len * ctx
    before = float(q_len) * (ctx - q_len)          # keys before the new rows, seen by every row
    square = float(q_len) * (q_len + 1) / 2.0       # the causal triangle of the new rows
    return float(b) * (before + square)


def attention_flops(pairs: float, h_q: int, d_qk: int, d_v: int | None = None) -> float:
    """QK^T and PV: 2 FLOPs per multiply-add, d_qk + d_v multiply-adds per pair and head."""
    return 2.0 * pairs * h_q * (d_qk + (d_qk if d_v is None else d_v))


def kv_bytes(b: int, ctx: int, h_kv: int, d: int, d_v: int | None = None, elem_bytes: int = 2) -> float:
    """Bytes of K and V read once for b requests of ctx keys."""
    return float(b) * ctx * h_kv * (d + (d if d_v is None else d_v)) * elem_bytes


def q_out_bytes(tokens: int, h_q: int, d: int, elem_bytes: int = 2) -> float:
    """Query read once plus output written once."""
    return 2.0 * tokens * h_q * d * elem_bytes


def mla_flops(rows: int, h_q: int, keys_per_row: float) -> float:
    return 2.0 * rows * h_q * keys_per_row * (MLA_D_QK + MLA_D_V)


def mla_cache_bytes(b: int, ctx: int) -> float:
    """Dense MLA decode: the bf16 latent cache read once (the C++ bench's count)."""
    return float(b) * ctx * MLA_BF16_ROW_BYTES


def sparse_mla_bytes(rows: int, h_q: int, topk: int, fp8: bool) -> float:
    """Top-k cache rows read (656 B FP8 or 1152 B bf16) + q read + out written (bf16)."""
    row = MLA_FP8_ROW_BYTES if fp8 else MLA_BF16_ROW_BYTES
    return float(rows) * topk * row + rows * h_q * MLA_D_QK * 2.0 + rows * h_q * MLA_D_V * 2.0


def indexer_paged_visible_keys(b: int, ctx: int, next_n: int = 1) -> float:
    """Row t of next_n sees ctx - next_n + t + 1 keys."""
    return float(b) * sum(ctx - next_n + t + 1 for t in range(next_n))


def indexer_paged_flops(b: int, ctx: int, heads: int, next_n: int = 1) -> float:
    return 2.0 * heads * INDEX_DIM * indexer_paged_visible_keys(b, ctx, next_n)


def indexer_paged_bytes(b: int, ctx: int, heads: int, next_n: int = 1) -> float:
    """Keys read once (132 B each) + logits written (f32) + q read (fp8 + weights)."""
    rows = b * next_n
    return float(b) * ctx * INDEX_KEY_BYTES + float(rows) * ctx * 4 + float(rows) * heads * INDEX_KEY_BYTES


def topk_bytes(rows: int, width: int) -> float:
    """f32 scores read once (the floor; the indices written are small)."""
    return float(rows) * width * 4


def store_kv_bytes(n: int, h_kv: int, d: int, src_elem_bytes: int = 2, cache_elem_bytes: int = 2) -> float:
    """K and V: read the new rows, write them into the caches."""
    return 2.0 * n * h_kv * d * (src_elem_bytes + cache_elem_bytes)


def store_mla_bytes(n: int, fp8: bool) -> float:
    """Read 576 bf16 values per token, write a 656-byte (FP8) or 1152-byte (bf16) cache row."""
    return float(n) * (MLA_BF16_ROW_BYTES + (MLA_FP8_ROW_BYTES if fp8 else MLA_BF16_ROW_BYTES))


def gemm_flops(m: int, n: int, k: int) -> float:
    return 2.0 * m * n * k


def rates(time_us: float | None, flops: float | None, bytes_: float | None,
          copy_gbs: float | None, gemm_tflops: float | None) -> dict:
    """TFLOP/s, GB/s and their percentages of the measured ceilings (None where unknown)."""
    out = {"tflops": None, "gbs": None, "pct_of_copy": None, "pct_of_gemm": None}
    if not time_us or time_us <= 0:
        return out
    if flops:
        out["tflops"] = flops / time_us * 1e-6
        if gemm_tflops:
            out["pct_of_gemm"] = 100.0 * out["tflops"] / gemm_tflops
    if bytes_:
        out["gbs"] = bytes_ / time_us * 1e-3
        if copy_gbs:
            out["pct_of_copy"] = 100.0 * out["gbs"] / copy_gbs
    return out
