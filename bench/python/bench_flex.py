"""FlexAttention peer (torch.compile'd flex_attention), reading our paged cache directly.

Paged mode (BlockMask.from_kv_blocks present): the whole pool is one key sequence,
[1, h_kv, num_pages * page_size, d] (a view of our cache, no copy), and the block mask's KV blocks
are pages: block size = page size, the kv indices of request r are its page-table row. Pages that
every row of a query block sees are "full" blocks (no mask evaluation); the pages at the causal edge
are partial blocks whose mask_mod maps a physical slot back to its logical position through a
page -> logical-page table. Without from_kv_blocks: gather K/V contiguous and use a causal block mask.
"""
from __future__ import annotations

import inspect

from bench_inputs import cdiv

Q_BLOCK = 128  # flex's query tile of the block mask


def configure_dynamo(torch):
    """Every shape compiles once; raise the recompile limits so no shape falls back to eager."""
    try:
        cfg = torch._dynamo.config
    except Exception:  # noqa: BLE001
        return
    for name, value in (("cache_size_limit", 256), ("recompile_limit", 256),
                        ("accumulated_cache_size_limit", 4096), ("accumulated_recompile_limit", 4096)):
        if hasattr(cfg, name):
            try:
                setattr(cfg, name, max(int(getattr(cfg, name)), value))
            except Exception:  # noqa: BLE001
                pass


class FlexPeer:
    def __init__(self, torch):
        from torch.nn.attention import flex_attention as fa

        self.torch = torch
        self.fa = fa
        configure_dynamo(torch)
        self.compiled = torch.compile(fa.flex_attention, dynamic=False)
        self.paged = hasattr(fa.BlockMask, "from_kv_blocks")
        self.impl = "flex-paged" if self.paged else "flex-gather"
        self.mode = ("paged block mask (BlockMask.from_kv_blocks over our page table; block = page)"
                     if self.paged else "K/V gathered contiguous + causal block mask (no from_kv_blocks)")

    # ---- paged -------------------------------------------------------------------------------
    def paged_block_mask(self, page_table, ctx: int, q_len: int, page_size: int, num_pages: int):
        return paged_block_mask(self.torch, self.fa.BlockMask, page_table, ctx, q_len, page_size, num_pages)

    def paged_runner(self, kv, q_len: int, scale: float):
        """f(q [b, h_q, q_len, d]) -> out [b, h_q, q_len, d] over the paged cache."""
        slots = kv.num_pages * kv.page_size
        k = kv.k_cache.view(1, slots, kv.h_kv, kv.d).transpose(1, 2)
        v = kv.v_cache.view(1, slots, kv.h_kv, kv.d).transpose(1, 2)
        mask = self.paged_block_mask(kv.page_table, kv.ctx, q_len, kv.page_size, kv.num_pages)
        opts = kernel_options(q_len, kv.page_size)
        compiled = self.compiled

        def run(q):
            return compiled(q, k, v, block_mask=mask, scale=scale, enable_gqa=q.shape[1] != kv.h_kv,
                            kernel_options=opts)

        return run

    # ---- contiguous (prefill, or no paged API) -------------------------------------------------
    def causal_runner(self, k4, v4, q_len: int, scale: float):
        """f(q [b, h_q, q_len, d]) over contiguous k4/v4 [b, h_kv, kv_len, d], bottom-right causal."""
        kv_len = k4.shape[2]
        offset = kv_len - q_len

        def causal(b, h, q_idx, kv_idx):
            return kv_idx <= q_idx + offset

        mask = self.fa.create_block_mask(causal, None, None, q_len, kv_len, device=k4.device)
        compiled = self.compiled

        def run(q):
            return compiled(q, k4, v4, block_mask=mask, scale=scale, enable_gqa=q.shape[1] != k4.shape[1])

        return run


def kernel_options(q_len: int, page_size: int):
    """The main (non-decoding) flex kernel needs a KV tile that divides the block (page) size; the
    decoding kernel (q_len < 128) clamps its tile itself."""
    if q_len >= Q_BLOCK and page_size < 128:
        return {"BLOCK_N": min(page_size, 64)}
    return None


def paged_block_mask(torch, BlockMask, page_table, ctx: int, q_len: int, page_size: int, num_pages: int):
    """BlockMask whose KV blocks are the pages of each request (all requests hold ctx keys)."""
    b, max_pages = page_table.shape
    dev = page_table.device
    n_qb = cdiv(q_len, Q_BLOCK)
    qb = torch.arange(n_qb, device=dev)
    first_pos = (ctx - q_len) + qb * Q_BLOCK                        # position of each q block's first row
    last_pos = torch.clamp(first_pos + Q_BLOCK - 1, max=ctx - 1)    # ... and of its last row
    full = torch.clamp(torch.div(first_pos + 1, page_size, rounding_mode="floor"), 0, max_pages)
    total = torch.clamp(torch.div(last_pos, page_size, rounding_mode="floor") + 1, 0, max_pages)
    partial = total - full

    def per_block(n):
        return n.to(torch.int32).view(1, 1, n_qb).expand(b, 1, n_qb).contiguous()

    # kv index rows are as wide as the pool has pages (block ids go up to num_pages - 1; torch's own
    # paged attention pads them the same way); only the first num_blocks entries of a row are read.
    cols = torch.arange(max_pages, device=dev)
    full_idx = torch.zeros(b, 1, n_qb, num_pages, dtype=torch.int32, device=dev)
    full_idx[..., :max_pages] = page_table.view(b, 1, 1, max_pages)
    shifted = torch.clamp(cols.view(1, -1) + full.view(-1, 1), max=max_pages - 1)  # [n_qb, max_pages]
    part_idx = torch.zeros_like(full_idx)
    part_idx[..., :max_pages] = page_table[:, shifted].view(b, 1, n_qb, max_pages)

    page_to_logical = torch.full((b, num_pages), -1, dtype=torch.int32, device=dev)
    page_to_logical.scatter_(1, page_table.long(), cols.to(torch.int32).view(1, -1).expand(b, -1).contiguous())
    offset = ctx - q_len

    def mask_mod(bi, h, q_idx, kv_idx):
        logical = page_to_logical[bi, kv_idx // page_size] * page_size + kv_idx % page_size
        return (logical >= 0) & (logical <= q_idx + offset)

    kwargs = {}
    accepted = inspect.signature(BlockMask.from_kv_blocks).parameters
    if "seq_lengths" in accepted:
        kwargs["seq_lengths"] = (q_len, num_pages * page_size)
    if "compute_q_blocks" in accepted:
        kwargs["compute_q_blocks"] = False  # the q-major copy serves only the backward pass
    return BlockMask.from_kv_blocks(per_block(partial), part_idx, per_block(full), full_idx,
                                    BLOCK_SIZE=(Q_BLOCK, page_size), mask_mod=mask_mod, **kwargs)
