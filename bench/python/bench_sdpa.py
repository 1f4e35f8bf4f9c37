"""PyTorch SDPA peers, one backend each (flash = FlashAttention-2 inside torch, cuDNN).

They are not paged: they read K/V gathered once out of our paged cache into contiguous
[b, ctx, h_kv, d] tensors (viewed as [b, h_kv, ctx, d]), outside the timed region.
Causal rows are aligned bottom-right (query row i of q_len sees keys j <= ctx - q_len + i):
- q_len == 1: no mask; q_len == ctx: is_causal=True (both alignments agree);
- otherwise (verify, extend): flash through aten's flash op, whose is_causal is bottom-right
  (what torch's causal_lower_right uses), cuDNN with an explicit boolean lower-right mask.
"""
from __future__ import annotations

BACKENDS = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION"}


def available_backends(torch) -> dict[str, str]:
    """{impl: reason it is unavailable or ''}."""
    out = {}
    try:
        from torch.nn.attention import SDPBackend
    except Exception as e:  # noqa: BLE001
        return {impl: f"torch.nn.attention missing ({e})" for impl in BACKENDS}
    for impl, name in BACKENDS.items():
        out[impl] = "" if hasattr(SDPBackend, name) else f"SDPBackend.{name} missing in torch {torch.__version__}"
    return out


def lower_right_mask(torch, q_len: int, kv_len: int, device):
    """Boolean [q_len, kv_len], True where row i may attend key j (j <= kv_len - q_len + i)."""
    rows = torch.arange(q_len, device=device).view(-1, 1) + (kv_len - q_len)
    cols = torch.arange(kv_len, device=device).view(1, -1)
    return cols <= rows


class SdpaRunner:
    """Runs one SDPA backend on q [b, h_q, q_len, d], k/v [b, h_kv, kv_len, d] (views are fine)."""

    def __init__(self, torch, impl: str, q_len: int, kv_len: int, scale: float, device):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        self.torch = torch
        self.F = torch.nn.functional
        self.impl = impl
        self.backend = getattr(SDPBackend, BACKENDS[impl])
        self.sdpa_kernel = sdpa_kernel
        self.q_len, self.kv_len, self.scale = q_len, kv_len, scale
        self.mask = None
        self.mode = "no mask" if q_len == 1 else ("causal" if q_len == kv_len else "causal bottom-right")
        if self.mode == "causal bottom-right" and impl == "sdpa-cudnn":
            self.mask = lower_right_mask(torch, q_len, kv_len, device)

    def __call__(self, q, k, v):
        gqa = q.shape[1] != k.shape[1]
        if self.mode == "causal bottom-right" and self.impl == "sdpa-flash":
            # FlashAttention-2 handles grouped heads itself; its is_causal is bottom-right.
            return self.torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, 0.0, True, False, scale=self.scale)[0]
        kwargs = {"enable_gqa": True} if gqa else {}
        with self.sdpa_kernel([self.backend]):
            return self.F.scaled_dot_product_attention(
                q, k, v, attn_mask=self.mask, is_causal=(self.mode == "causal"), scale=self.scale, **kwargs)


def expand_heads(kv4, h_q: int):
    """[b, h_kv, s, d] -> [b, h_q, s, d] contiguous (for a backend without grouped heads)."""
    g = h_q // kv4.shape[1]
    return kv4.repeat_interleave(g, dim=1)
