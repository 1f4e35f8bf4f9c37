"""Random inputs on the device: never zeros, pages shuffled, query sets to rotate over."""
from __future__ import annotations

from dataclasses import dataclass


def randn(torch, shape, dtype, device, scale: float = 1.0):
    """Normal values (never all zeros) in the given dtype; fp8 through a bf16 draw."""
    fp8 = getattr(torch, "float8_e4m3fn", None)
    draw = torch.bfloat16 if fp8 is not None and dtype == fp8 else dtype
    t = torch.randn(*shape, dtype=draw, device=device)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype) if draw is not dtype else t


def random_sets(torch, n_sets: int, shape, dtype, device, scale: float = 1.0) -> list:
    return [randn(torch, shape, dtype, device, scale) for _ in range(n_sets)]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class PagedKV:
    """A paged K/V cache in attnserve's layout, [num_pages, page_size, h_kv, d], holding b requests of
    ctx keys each on shuffled pages."""
    k_cache: object
    v_cache: object
    page_table: object   # int32 [b, max_pages]
    seqlens: object      # int32 [b]
    b: int
    ctx: int
    h_kv: int
    d: int
    page_size: int

    @property
    def num_pages(self) -> int:
        return int(self.k_cache.shape[0])

    @property
    def max_pages(self) -> int:
        return int(self.page_table.shape[1])


def make_paged_kv(torch, device, b: int, ctx: int, h_kv: int, d: int, page_size: int, dtype) -> PagedKV:
    max_pages = cdiv(ctx, page_size)
    num_pages = b * max_pages
    k = randn(torch, (num_pages, page_size, h_kv, d), dtype, device)
    v = randn(torch, (num_pages, page_size, h_kv, d), dtype, device)
    perm = torch.randperm(num_pages, device=device).to(torch.int32)
    page_table = perm.view(b, max_pages).contiguous()
    seqlens = torch.full((b,), ctx, dtype=torch.int32, device=device)
    return PagedKV(k, v, page_table, seqlens, b, ctx, h_kv, d, page_size)


def request_kv(kv: PagedKV, r: int):
    """Keys and values of request r, contiguous: ([ctx, h_kv, d], [ctx, h_kv, d])."""
    n_pages = cdiv(kv.ctx, kv.page_size)
    pages = kv.page_table[r, :n_pages].long()
    k = kv.k_cache[pages].reshape(-1, kv.h_kv, kv.d)[: kv.ctx]
    v = kv.v_cache[pages].reshape(-1, kv.h_kv, kv.d)[: kv.ctx]
    return k, v


def gather_contiguous(kv: PagedKV, cache):
    """The whole batch gathered out of the pages: [b, ctx, h_kv, d] contiguous (the layout the
    non-paged peers read, as [b, h_kv, ctx, d] views)."""
    pages = kv.page_table.long()
    g = cache[pages]  # [b, max_pages, page_size, h_kv, d]
    g = g.view(kv.b, kv.max_pages * kv.page_size, kv.h_kv, kv.d)
    if kv.max_pages * kv.page_size != kv.ctx:
        g = g[:, : kv.ctx].contiguous()
    return g


def cu_seqlens(torch, b: int, q_len: int, device):
    return torch.arange(0, (b + 1) * q_len, q_len, dtype=torch.int32, device=device)
