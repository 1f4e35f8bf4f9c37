"""DeepSeek sparse-attention helpers: the lightning indexer (paged decode scores over the FP8
indexer-key pool) and exact top-k (ours against torch.topk)."""
from __future__ import annotations

from dataclasses import dataclass

from bench_context import BenchContext, rel_l2
from bench_counts import INDEX_DIM, INDEX_KEY_BYTES, indexer_paged_bytes, indexer_paged_flops, topk_bytes
from bench_inputs import cdiv, randn
from bench_reference import index_keys_of_request, indexer_logits_row


def _k(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


# ---- indexer ----------------------------------------------------------------------------------------

@dataclass
class IndexerCase:
    b: int
    ctx: int
    heads: int
    page: int = 64
    next_n: int = 1

    @property
    def name(self) -> str:
        return f"indexer paged b{self.b} ctx{self.ctx} heads{self.heads} page{self.page}"

    @property
    def shape(self) -> str:
        return f"paged b {self.b} × {_k(self.ctx)}, {self.heads} heads, page {self.page}, FP8 keys"


def indexer_cases(quick: bool, smoke: bool) -> list[IndexerCase]:
    if smoke:
        return [IndexerCase(2, 512, 8)]
    return [IndexerCase(128, 32768, 64)]


def make_index_pool(ctx: BenchContext, c: IndexerCase):
    """Pool [num_pages, page * 132] u8 filled through our set_index_k with random bf16 keys, and a
    shuffled page table."""
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    pages_per = cdiv(c.ctx, c.page)
    num_pages = c.b * pages_per
    slots = num_pages * c.page
    pool = torch.empty(num_pages, c.page * INDEX_KEY_BYTES, dtype=torch.uint8, device=dev)
    chunk = 1 << 20
    for s in range(0, slots, chunk):
        n = min(chunk, slots - s)
        keys = randn(torch, (n, INDEX_DIM), torch.bfloat16, dev)
        loc = torch.arange(s, s + n, dtype=torch.int32, device=dev)
        A.set_index_k(keys, pool, loc, page_size=c.page)
    page_table = torch.randperm(num_pages, device=dev).to(torch.int32).view(c.b, pages_per).contiguous()
    return pool, page_table


def run_indexer_case(ctx: BenchContext, c: IndexerCase):
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    pool, page_table = make_index_pool(ctx, c)
    rows = c.b * c.next_n
    seqlens = torch.full((c.b,), c.ctx, dtype=torch.int32, device=dev)
    n_sets = ctx.sets_for(rows * c.heads * (INDEX_DIM + 4))
    q_sets = [randn(torch, (rows, c.heads, INDEX_DIM), torch.float8_e4m3fn, dev) for _ in range(n_sets)]
    weights = torch.rand(rows, c.heads, dtype=torch.float32, device=dev) * 0.2
    logits = torch.empty(rows, c.ctx, dtype=torch.float32, device=dev)

    check_rows = [0, rows - 1] if rows > 1 else [0]
    ref = torch.stack([
        indexer_logits_row(torch, q_sets[0][r], weights[r],
                           index_keys_of_request(torch, pool, page_table[r], c.page, c.ctx))
        for r in check_rows])

    def call(i):
        A.indexer_paged(q_sets[i], weights, pool, page_table, seqlens, logits, page_size=c.page, next_n=c.next_n)
        return logits

    params = {"b": c.b, "ctx": c.ctx, "heads": c.heads, "page": c.page}
    ctx.run_impl("indexer", "attnserve", c.shape, call, n_sets, flops=indexer_paged_flops(c.b, c.ctx, c.heads),
                 bytes_=indexer_paged_bytes(c.b, c.ctx, c.heads), check=lambda o: rel_l2(o[check_rows], ref),
                 note="keys written by our set_index_k", params=params)
    ctx.skip("indexer", "DeepGEMM", c.shape, "no same-run peer: DeepGEMM is not installed on the device",
             note="users report ~1000 TFLOP/s for its fp8 MQA logits (H 64)", params=params)


# ---- top-k --------------------------------------------------------------------------------------------

@dataclass
class TopkCase:
    rows: int
    width: int
    k: int = 2048

    @property
    def name(self) -> str:
        return f"top-k {self.k} of {self.width} x {self.rows}"

    @property
    def shape(self) -> str:
        return f"top-{self.k} of {_k(self.width)} × {self.rows} rows, f32"


def topk_cases(quick: bool, smoke: bool) -> list[TopkCase]:
    if smoke:
        return [TopkCase(4, 4096, 256)]
    cases = [TopkCase(128, 65536)]
    if not quick:
        cases += [TopkCase(128, 16384), TopkCase(1, 65536), TopkCase(128, 131072)]
    return cases


def same_set_check(torch, scores, k: int):
    """check(indices) -> 'same set ok' when the chosen scores equal torch.topk's (ties by value)."""
    want = torch.topk(scores, k, dim=1, sorted=True).values

    def check(indices):
        got = torch.gather(scores, 1, indices.long()).sort(dim=1, descending=True).values
        bad = int((got != want).any(dim=1).sum())
        return "same set ok" if bad == 0 else f"{bad} rows differ FAIL"

    return check


def run_topk_case(ctx: BenchContext, c: TopkCase):
    torch, dev, A = ctx.torch, ctx.device, ctx.A
    n_sets = ctx.sets_for(c.rows * c.width * 4)
    score_sets = [torch.randn(c.rows, c.width, dtype=torch.float32, device=dev) for _ in range(n_sets)]
    lengths = torch.full((c.rows,), c.width, dtype=torch.int32, device=dev)
    out = torch.empty(c.rows, c.k, dtype=torch.int32, device=dev)
    check = same_set_check(torch, score_sets[0], c.k)
    params = {"rows": c.rows, "width": c.width, "k": c.k}
    bytes_ = topk_bytes(c.rows, c.width)

    def ours(i):
        A.topk(score_sets[i], lengths, out, topk=c.k)
        return out

    ctx.run_impl("top-k", "attnserve", c.shape, ours, n_sets, bytes_=bytes_, check=check, note="exact, unsorted",
                 params=params)
    ctx.run_impl("top-k", "torch.topk", c.shape, lambda i: torch.topk(score_sets[i], c.k, dim=1, sorted=False).indices,
                 n_sets, bytes_=bytes_, check=check, note="sorted=False", params=params)


# ---- groups -------------------------------------------------------------------------------------------

def run_indexer(ctx: BenchContext):
    ctx.run_cases(indexer_cases(ctx.cfg.quick, ctx.cfg.smoke), run_indexer_case, lambda c: "indexer")


def run_topk(ctx: BenchContext):
    ctx.run_cases(topk_cases(ctx.cfg.quick, ctx.cfg.smoke), run_topk_case, lambda c: "top-k")
