"""mla_attention over an FP8-656 cache (uint8 rows of 656 bytes, as MlaKvPool(fp8_656) and
set_mla_kv_buffer write them): the same result, bit for bit, as over the cache dequantized in NumPy
(fp8 * scale per 128-value tile, bf16 rope), and the errors of a wrongly shaped FP8 cache."""
import ml_dtypes
import numpy as np
import pytest

import attnserve as A


def dequantize_656(cache):
    """[slots, 656] uint8 -> [slots, 576] float32: fp8 e4m3 latent times its tile's f32 scale, bf16 rope."""
    slots = cache.shape[0]
    lat = cache[:, :512].copy().view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(slots, 4, 128)
    scales = cache[:, 512:528].copy().view(np.float32)
    rope = cache[:, 528:].copy().view(ml_dtypes.bfloat16).astype(np.float32)
    return np.concatenate([(lat * scales[:, :, None]).reshape(slots, 512), rope], axis=1)


def test_mla_attention_fp8_656_equals_dequantized_cache():
    rng = np.random.default_rng(15)
    page, pages, h = 4, 7, 4
    slots = page * pages
    kv = rng.standard_normal((slots, 576)).astype(np.float32)
    kv[3, 128:256] = 0.0  # a zero tile
    cache = np.zeros((slots, 656), np.uint8)
    A.set_mla_kv_buffer(np.ascontiguousarray(kv[:, :512]), np.ascontiguousarray(kv[:, 512:]), cache,
                        np.arange(slots, dtype=np.int32))
    deq = dequantize_656(cache)
    assert np.all(deq[3, 128:256] == 0.0)
    q = rng.uniform(-1, 1, (3, h, 576)).astype(np.float32)
    q_nope, q_rope = np.ascontiguousarray(q[..., :512]), np.ascontiguousarray(q[..., 512:])
    page_table = rng.permutation(pages).astype(np.int32)[:6].reshape(2, 3)
    seqlens = np.array([10, 7], np.int32)
    cu = np.array([0, 1, 3], np.int32)
    results = []
    for kv_cache in (cache.reshape(pages, page, 1, 656), deq.reshape(pages, page, 1, 576)):
        out = np.full((3, h, 512), np.nan, np.float32)
        lse = np.full((3, h), np.nan, np.float32)
        A.mla_attention(q_nope, q_rope, kv_cache, page_table, seqlens, cu, out, softmax_scale=0.135, lse=lse,
                        max_seqlen_q=2)
        results.append((out, lse))
    assert np.isfinite(results[0][0]).all()
    np.testing.assert_array_equal(results[0][0], results[1][0])
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_mla_attention_fp8_656_errors():
    q_nope = np.zeros((1, 2, 512), np.float32)
    q_rope = np.zeros((1, 2, 64), np.float32)
    out = np.zeros((1, 2, 512), np.float32)
    table, seqlens, cu = np.zeros((1, 1), np.int32), np.array([3], np.int32), np.array([0, 1], np.int32)
    with pytest.raises(A.Error, match="656"):
        A.mla_attention(q_nope, q_rope, np.zeros((1, 4, 1, 640), np.uint8), table, seqlens, cu, out, softmax_scale=0.1)
    with pytest.raises(A.Error, match="FP8-656"):
        A.mla_attention(q_nope[..., :256].copy(), q_rope, np.zeros((1, 4, 1, 656), np.uint8), table, seqlens, cu,
                        out[..., :256].copy(), softmax_scale=0.1)
