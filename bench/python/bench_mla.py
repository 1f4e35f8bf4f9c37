"""MLA workloads (d_qk 576 = 512 latent + 64 rope, d_v 512, one latent KV head): dense paged decode
(bf16 cache, page 64) at h_q 16 and 128, sparse decode over an FP8-656 cache (random top-k slots)
at h_q 128 and 16, and sparse prefill over a bf16 cache. No peer for these runs on the device
(FlashMLA and FA3 are not installed there); their figures from shared/ANCHORS.md are quoted."""
from __future__ import annotations

from dataclasses import dataclass

from bench_context import BenchContext, Workspace, rel_l2
from bench_counts import (MLA_D_QK, MLA_D_ROPE, MLA_D_V, mla_cache_bytes, mla_flops, sparse_mla_bytes)
from bench_inputs import cdiv, cu_seqlens, randn, random_sets
from bench_reference import decode_fp8_656, latent_attention_rows

SOFTMAX_SCALE = 0.1352337  # DeepSeek-V3.2: 192^-0.5 * mscale^2 (as in the C++ bench)
NO_PEER = "no same-run peer: FlashMLA and FA3 are not installed on the device"


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


# ---- dense MLA decode ---------------------------------------------------------------------------

@dataclass
class MlaDecodeCase:
    b: int
    ctx: int
    h_q: int
    page: int
    anchor: str = ""

    @property
    def name(self) -> str:
        return f"mla decode b{self.b} ctx{self.ctx} hq{self.h_q} page{self.page}"

    @property
    def shape(self) -> str:
        return f"b {self.b} × {_k(self.ctx)}, h_q {self.h_q}, page {self.page}, bf16"


def mla_decode_cases(quick: bool, smoke: bool) -> list[MlaDecodeCase]:
    if smoke:
        return [MlaDecodeCase(2, 256, 16, 64)]
    return [MlaDecodeCase(128, 8192, 16, 64, "ANCHORS (other day): FlashMLA 3896 GB/s, FA3-qv 2552 GB/s"),
            MlaDecodeCase(128, 8192, 128, 64, "ANCHORS (other day): FlashMLA 606 TFLOP/s, FA3-qv 426 TFLOP/s")]


def run_mla_decode_case(ctx: BenchContext, c: MlaDecodeCase):
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    bf16 = torch.bfloat16
    max_pages = cdiv(c.ctx, c.page)
    num_pages = c.b * max_pages
    kv = randn(torch, (num_pages, c.page, 1, MLA_D_QK), bf16, dev, 0.5)
    page_table = torch.randperm(num_pages, device=dev).to(torch.int32).view(c.b, max_pages).contiguous()
    seqlens = torch.full((c.b,), c.ctx, dtype=torch.int32, device=dev)
    cu = cu_seqlens(torch, c.b, 1, dev)
    n_sets = ctx.sets_for(c.b * c.h_q * MLA_D_QK * 2)
    q_nope = random_sets(torch, n_sets, (c.b, c.h_q, MLA_D_V), bf16, dev, 0.5)
    q_rope = random_sets(torch, n_sets, (c.b, c.h_q, MLA_D_ROPE), bf16, dev, 0.5)
    out = torch.empty(c.b, c.h_q, MLA_D_V, dtype=bf16, device=dev)
    lse = torch.empty(c.b, c.h_q, dtype=torch.float32, device=dev)
    ws = Workspace(torch, dev)

    requests = [0, c.b - 1] if c.b > 1 else [0]
    refs = []
    for r in requests:
        rows = kv[page_table[r].long()].reshape(-1, MLA_D_QK)[: c.ctx]
        q = torch.cat([q_nope[0][r], q_rope[0][r]], dim=-1).unsqueeze(0)
        refs.append(latent_attention_rows(torch, q, rows.unsqueeze(0), SOFTMAX_SCALE)[0])
    ref = torch.stack(refs)

    def call(i):
        ws.call(A.Error, A.mla_attention, q_nope[i], q_rope[i], kv, page_table, seqlens, cu, out,
                softmax_scale=SOFTMAX_SCALE, lse=lse, max_seqlen_q=1, causal=True)
        return out

    params = {"b": c.b, "ctx": c.ctx, "h_q": c.h_q, "page": c.page}
    ctx.run_impl("mla decode", "attnserve", c.shape, call, n_sets, flops=mla_flops(c.b, c.h_q, c.ctx),
                 bytes_=mla_cache_bytes(c.b, c.ctx), check=lambda o: rel_l2(o[requests], ref), note="paged",
                 params=params)
    ctx.skip("mla decode", "FlashMLA / FA3", c.shape, NO_PEER, note=c.anchor, params=params)


# ---- sparse MLA -----------------------------------------------------------------------------------

@dataclass
class SparseCase:
    workload: str     # "sparse mla decode" | "sparse mla prefill"
    rows: int
    h_q: int
    topk: int
    pool: int         # cache slots
    fp8: bool
    anchor: str = ""

    @property
    def name(self) -> str:
        return f"{self.workload} rows{self.rows} hq{self.h_q} topk{self.topk} pool{self.pool} {'fp8' if self.fp8 else 'bf16'}"

    @property
    def shape(self) -> str:
        fmt = "FP8-656" if self.fp8 else "bf16"
        return f"{self.rows} rows, h_q {self.h_q}, top-k {self.topk} of {_k(self.pool)} slots, {fmt}"


def sparse_cases(quick: bool, smoke: bool) -> list[SparseCase]:
    if smoke:
        return [SparseCase("sparse mla decode", 2, 16, 128, 4096, True),
                SparseCase("sparse mla prefill", 8, 16, 128, 512, False)]
    pool = 1 << 20  # 1M slots: 688 MB of FP8-656, far over the L2
    return [SparseCase("sparse mla decode", 128, 128, 2048, pool, True, "ANCHORS (other day): FlashMLA 367 TFLOP/s"),
            SparseCase("sparse mla decode", 128, 16, 2048, pool, True,
                       "ANCHORS (other day): FlashMLA padded to h_q 64 ~75 useful TFLOP/s; FA3-qv bf16 45"),
            SparseCase("sparse mla prefill", 4096, 128, 2048, 8192, False, "ANCHORS (other day): FlashMLA 671 TFLOP/s")]


def make_sparse_cache(ctx: BenchContext, c: SparseCase):
    """The cache: FP8-656 written through our set_mla_kv_buffer (so the store is exercised too), or
    bf16 values directly. Returns (cache, dequantized float32 view for the reference)."""
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    if not c.fp8:
        cache = randn(torch, (c.pool, MLA_D_QK), torch.bfloat16, dev, 0.5)
        return cache, lambda slots: cache[slots].float()
    cache = torch.empty(c.pool, 656, dtype=torch.uint8, device=dev)
    loc = torch.arange(c.pool, dtype=torch.int32, device=dev)
    chunk = 1 << 18
    for s in range(0, c.pool, chunk):
        n = min(chunk, c.pool - s)
        kv_c = randn(torch, (n, MLA_D_V), torch.bfloat16, dev, 0.5)
        k_rope = randn(torch, (n, MLA_D_ROPE), torch.bfloat16, dev, 0.5)
        A.set_mla_kv_buffer(kv_c, k_rope, cache, loc[s:s + n])
    return cache, lambda slots: decode_fp8_656(torch, cache[slots])


def run_sparse_case(ctx: BenchContext, c: SparseCase):
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    bf16 = torch.bfloat16
    cache, dequant = make_sparse_cache(ctx, c)
    set_bytes = c.rows * c.h_q * MLA_D_QK * 2 + c.rows * c.topk * 4
    n_sets = ctx.sets_for(set_bytes)
    q_sets = random_sets(torch, n_sets, (c.rows, c.h_q, MLA_D_QK), bf16, dev, 0.5)
    idx_sets = [torch.randint(0, c.pool, (c.rows, c.topk), dtype=torch.int32, device=dev) for _ in range(n_sets)]
    out = torch.empty(c.rows, c.h_q, MLA_D_V, dtype=bf16, device=dev)
    lse = torch.empty(c.rows, c.h_q, dtype=torch.float32, device=dev)

    check_rows = [0, c.rows - 1] if c.rows > 1 else [0]
    kv_rows = torch.stack([dequant(idx_sets[0][r].long()) for r in check_rows])        # [n, topk, 576]
    ref = latent_attention_rows(torch, q_sets[0][check_rows], kv_rows, SOFTMAX_SCALE)
    del kv_rows

    ws = Workspace(torch, dev)  # split-K partial states when the rows underfill the GPU (h_q 16)

    def call(i):
        ws.call(A.Error, A.sparse_mla, q_sets[i], cache, idx_sets[i], out, softmax_scale=SOFTMAX_SCALE, lse=lse)
        return out

    params = {"rows": c.rows, "h_q": c.h_q, "topk": c.topk, "pool": c.pool, "fp8": c.fp8}
    note = "random top-k slots per row" + ("; cache written by our set_mla_kv_buffer" if c.fp8 else "")
    ctx.run_impl(c.workload, "attnserve", c.shape, call, n_sets, flops=mla_flops(c.rows, c.h_q, c.topk),
                 bytes_=sparse_mla_bytes(c.rows, c.h_q, c.topk, c.fp8),
                 check=lambda o: rel_l2(o[check_rows], ref), note=note, params=params)
    ctx.skip(c.workload, "FlashMLA", c.shape, "no same-run peer: FlashMLA is not installed on the device",
             note=c.anchor, params=params)


# ---- groups ---------------------------------------------------------------------------------------

def run_mla(ctx: BenchContext):
    ctx.run_cases(mla_decode_cases(ctx.cfg.quick, ctx.cfg.smoke), run_mla_decode_case, lambda c: "mla decode")


def run_sparse(ctx: BenchContext):
    ctx.run_cases(sparse_cases(ctx.cfg.quick, ctx.cfg.smoke), run_sparse_case, lambda c: c.workload)
