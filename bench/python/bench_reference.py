"""Float32 torch references for the correctness guard: a few rows of each op, computed directly."""
from __future__ import annotations

FP8_E4M3_MAX = 448.0
FP8_SCALE_FLOOR = 1e-4


def attention_rows(torch, q_rows, k, v, positions, scale: float):
    """q_rows [n, h_q, d]; k/v [ctx, h_kv, d]; row i sees keys j <= positions[i]. -> [n, h_q, d_v] f32."""
    n, h_q, d = q_rows.shape
    ctx, h_kv, _ = k.shape
    g = h_q // h_kv
    q = q_rows.float().view(n, h_kv, g, d)
    s = torch.einsum("nkgd,tkd->kgnt", q, k.float()) * scale                   # [h_kv, g, n, ctx]
    pos = torch.as_tensor(positions, device=k.device).view(n, 1)
    masked = torch.arange(ctx, device=k.device).view(1, ctx) > pos              # [n, ctx]
    s = s.masked_fill(masked.view(1, 1, n, ctx), float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("kgnt,tkd->nkgd", p, v.float()).reshape(n, h_q, v.shape[-1])


def latent_attention_rows(torch, q_rows, kv_rows, scale: float, d_v: int = 512):
    """MLA absorbed form: q_rows [n, h_q, 576] against one latent head kv_rows [n, keys, 576]
    (the keys of each row), value = the first d_v columns. -> [n, h_q, d_v] f32."""
    kv = kv_rows.float()
    s = torch.einsum("nhd,ntd->nht", q_rows.float(), kv) * scale
    p = torch.softmax(s, dim=-1)
    return torch.einsum("nht,ntd->nhd", p, kv[..., :d_v])


def decode_fp8_656(torch, rows):
    """FP8-656 cache rows (uint8 [n, 656]) -> float32 [n, 576]: 4 tiles of 128 fp8 values times their
    f32 scale, then 64 bf16 rope values (include/attnserve/cache_formats.h)."""
    n = rows.shape[0]
    fp8 = rows[:, :512].contiguous().view(torch.float8_e4m3fn).float().view(n, 4, 128)
    scales = rows[:, 512:528].contiguous().view(torch.float32).view(n, 4, 1)
    rope = rows[:, 528:656].contiguous().view(torch.bfloat16).float()
    return torch.cat([(fp8 * scales).view(n, 512), rope], dim=1)


def pow2_scale(torch, amax):
    """Smallest power of two >= max(amax, 1e-4) / 448 (numeric.h fp8_pow2_scale)."""
    s = amax.clamp_min(FP8_SCALE_FLOOR) / FP8_E4M3_MAX
    mantissa, exponent = torch.frexp(s)
    return torch.where(mantissa == 0.5, s, torch.ldexp(torch.ones_like(s), exponent))


def encode_fp8_656(torch, kv_c, k_rope):
    """kv_c [n, 512], k_rope [n, 64] (bf16) -> uint8 [n, 656], composed from torch ops."""
    n = kv_c.shape[0]
    x = kv_c.float().view(n, 4, 128)
    scale = pow2_scale(torch, x.abs().amax(dim=-1))                              # [n, 4]
    codes = (x / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).view(n, 512).view(torch.uint8)
    return torch.cat([codes, scale.contiguous().view(torch.uint8), k_rope.contiguous().view(torch.uint8)], dim=1)


def index_keys_of_request(torch, pool, page_ids, page_size: int, ctx: int):
    """Dequantized indexer keys [ctx, 128] f32 of one request from the paged pool
    (per page: page_size x 128 fp8 bytes, then page_size f32 scales)."""
    pages = pool[page_ids.long()]                                                # [n_pages, ps * 132]
    n_pages = pages.shape[0]
    codes = pages[:, : page_size * 128].contiguous().view(torch.float8_e4m3fn).float().view(n_pages * page_size, 128)
    scales = pages[:, page_size * 128:].contiguous().view(torch.float32).view(n_pages * page_size, 1)
    return (codes * scales)[:ctx]


def indexer_logits_row(torch, q_row, weights_row, keys):
    """q_row [heads, 128] (fp8), weights_row [heads], keys [ctx, 128] f32 -> [ctx] f32:
    sum_h relu(q_h . k_j) * w_h (the key scale is already in keys)."""
    dots = keys @ q_row.float().t()                                              # [ctx, heads]
    return torch.relu(dots) @ weights_row.float()
