"""The ops through DLPack from NumPy (CPU), checked against NumPy float64 references."""
import numpy as np
import pytest

import attnserve as A


def attention_reference(q, k, v, causal=True):
    """q [sq, h, d], k/v [sk, h_kv, d]: bottom-right causal softmax attention in float64."""
    sq, h, _ = q.shape
    sk, h_kv, _ = k.shape
    g = h // h_kv
    out = np.zeros((sq, h, v.shape[2]))
    lse = np.full((sq, h), -np.inf)
    for i in range(sq):
        p = sk - sq + i
        n = p + 1 if causal else sk
        if n <= 0:
            continue
        for hh in range(h):
            s = k[:n, hh // g].astype(np.float64) @ q[i, hh].astype(np.float64)
            s *= 1.0 / np.sqrt(q.shape[2])
            m = s.max()
            e = np.exp(s - m)
            out[i, hh] = e @ v[:n, hh // g] / e.sum()
            lse[i, hh] = m + np.log(e.sum())
    return out, lse


def make_paged(rng, kv_lens, page_size, h_kv, d, num_pages):
    """Random paged K/V plus a page table that scatters each request's pages."""
    k_cache = rng.standard_normal((num_pages, page_size, h_kv, d)).astype(np.float32)
    v_cache = rng.standard_normal((num_pages, page_size, h_kv, d)).astype(np.float32)
    max_pages = max(1, max((n + page_size - 1) // page_size for n in kv_lens))
    perm = rng.permutation(num_pages)
    page_table = np.zeros((len(kv_lens), max_pages), dtype=np.int32)
    used = 0
    for r, n in enumerate(kv_lens):
        p = (n + page_size - 1) // page_size
        page_table[r, :p] = perm[used:used + p]
        used += p
    return k_cache, v_cache, page_table


def gather(cache, page_table_row, n):
    ps = cache.shape[1]
    return np.stack([cache[page_table_row[j // ps], j % ps] for j in range(n)]) if n else cache[:0, 0]


@pytest.mark.parametrize("page_size", [1, 16])
def test_paged_attention_matches_numpy(rng, page_size):
    h, h_kv, d = 8, 2, 64
    q_lens, kv_lens = [1, 5, 3], [7, 20, 3]
    k_cache, v_cache, page_table = make_paged(rng, kv_lens, page_size, h_kv, d, num_pages=64)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = rng.standard_normal((cu[-1], h, d)).astype(np.float32)
    out = np.full((cu[-1], h, d), np.nan, dtype=np.float32)
    lse = np.full((cu[-1], h), np.nan, dtype=np.float32)
    A.paged_attention(q, k_cache, v_cache, page_table, np.array(kv_lens, np.int32), cu, out,
                      softmax_scale=1.0 / np.sqrt(d), lse=lse, max_seqlen_q=max(q_lens))
    for r in range(len(q_lens)):
        k = gather(k_cache, page_table[r], kv_lens[r])
        v = gather(v_cache, page_table[r], kv_lens[r])
        ref_o, ref_l = attention_reference(q[cu[r]:cu[r + 1]], k, v)
        np.testing.assert_allclose(out[cu[r]:cu[r + 1]], ref_o, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(lse[cu[r]:cu[r + 1]], ref_l, rtol=1e-5, atol=1e-5)


def test_paged_attention_fp8_q_with_descales(rng):
    """fp8 q, K, V (ml_dtypes e4m3) with q/k/v descales [b, h_kv]: the reference on the dequantized values."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    e4m3 = ml_dtypes.float8_e4m3fn
    h, h_kv, d, page_size = 4, 2, 32, 4
    q_lens, kv_lens = [3, 2], [9, 6]
    k32, v32, page_table = make_paged(rng, kv_lens, page_size, h_kv, d, num_pages=8)
    k8, v8 = k32.astype(e4m3), v32.astype(e4m3)
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q8 = rng.standard_normal((cu[-1], h, d)).astype(np.float32).astype(e4m3)
    qds, kds, vds = (rng.uniform(0.5, 1.5, (2, h_kv)).astype(np.float32) for _ in range(3))
    out = np.full((cu[-1], h, d), np.nan, dtype=np.float32)
    A.paged_attention(q8, k8, v8, page_table, np.array(kv_lens, np.int32), cu, out, softmax_scale=1.0 / np.sqrt(d),
                      q_descale=qds, k_descale=kds, v_descale=vds, max_seqlen_q=max(q_lens))
    g = h // h_kv
    for r in range(len(q_lens)):
        q = q8[cu[r]:cu[r + 1]].astype(np.float64) * np.repeat(qds[r], g)[None, :, None]
        k = gather(k8, page_table[r], kv_lens[r]).astype(np.float64) * kds[r][None, :, None]
        v = gather(v8, page_table[r], kv_lens[r]).astype(np.float64) * vds[r][None, :, None]
        ref_o, _ = attention_reference(q, k, v)
        np.testing.assert_allclose(out[cu[r]:cu[r + 1]], ref_o, rtol=1e-4, atol=1e-5)


def test_bad_argument_raises_named_error(rng):
    q = rng.standard_normal((2, 8, 64)).astype(np.float32)
    k_cache = rng.standard_normal((4, 1, 3, 64)).astype(np.float32)  # 8 heads do not divide by 3
    out = np.zeros_like(q)
    with pytest.raises(A.Error):
        A.paged_attention(q, k_cache, k_cache, np.zeros((2, 4), np.int32), np.array([1, 1], np.int32),
                          np.array([0, 1, 2], np.int32), out, softmax_scale=0.125)
    assert issubclass(A.Error, ValueError)


def test_merge_state_of_halves_equals_full(rng):
    h, d, n = 4, 32, 10
    q = rng.standard_normal((1, h, d)).astype(np.float32)
    k = rng.standard_normal((n, h, d)).astype(np.float32)
    v = rng.standard_normal((n, h, d)).astype(np.float32)
    full_o, full_l = attention_reference(q, k, v, causal=False)
    oa, la = attention_reference(q, k[:4], v[:4], causal=False)
    ob, lb = attention_reference(q, k[4:], v[4:], causal=False)
    v_out = np.empty((1, h, d), np.float32)
    s_out = np.empty((1, h), np.float32)
    A.merge_state(oa.astype(np.float32), la.astype(np.float32), ob.astype(np.float32), lb.astype(np.float32),
                  v_out, s_out)
    np.testing.assert_allclose(v_out, full_o, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s_out, full_l, rtol=1e-6, atol=1e-6)


def test_topk_exact_with_ties(rng):
    rows, width, k = 3, 5000, 64
    scores = rng.integers(0, 50, size=(rows, width)).astype(np.float32)  # many ties
    lengths = np.array([width, 40, 3000], np.int32)
    out = np.full((rows, k), -7, np.int32)
    A.topk(scores, lengths, out, topk=k)
    for r in range(rows):
        n = lengths[r]
        if n <= k:
            assert list(out[r, :n]) == list(range(n)) and (out[r, n:] == -1).all()
            continue
        order = sorted(range(n), key=lambda j: (-scores[r, j], j))[:k]  # ties: lower index wins
        assert set(out[r].tolist()) == set(order)


def test_fp8_quantization_roundtrip(rng):
    x = (rng.standard_normal((4, 256)) * 3).astype(np.float32)
    x[1, :128] = 0.0  # an all-zero group keeps a finite scale
    q = np.zeros((4, 256), np.uint8)
    s = np.zeros((4, 2), np.float32)
    A.quantize_fp8_groups(x, q, s)
    assert np.isfinite(s).all() and (s > 0).all()
    assert np.all(np.log2(s) == np.round(np.log2(s)))  # powers of two
    assert (q[1, :128] == 0).all()


def test_indexer_ragged_with_q_scale_matches_numpy(rng):
    """quantize_fp8_groups -> indexer_ragged(q_scale=scales): the scales multiply the weights."""
    rows, heads, keys = 3, 4, 10
    xq = (rng.standard_normal((rows, heads * 128)) * 4).astype(np.float32)
    xk = rng.standard_normal((keys, 128)).astype(np.float32)
    q8 = np.zeros((rows, heads * 128), np.uint8)
    qs = np.zeros((rows, heads), np.float32)
    k8 = np.zeros((keys, 128), np.uint8)
    ks = np.zeros((keys, 1), np.float32)
    A.quantize_fp8_groups(xq, q8, qs)
    A.quantize_fp8_groups(xk, k8, ks)
    w = rng.uniform(-0.2, 0.2, (rows, heads)).astype(np.float32)
    lo, hi = np.array([0, 2, 5], np.int32), np.array([10, 7, 5], np.int32)
    logits = np.full((rows, keys), np.nan, np.float32)
    A.indexer_ragged(q8.reshape(rows, heads, 128), w, k8, ks.reshape(keys), lo, hi, logits, q_scale=qs)
    # Reference in float64 on the dequantized values (the fp8 rounding is the op's input, not its error).
    qd = _decode_e4m3(q8).reshape(rows, heads, 128)
    kd = _decode_e4m3(k8)
    for i in range(rows):
        for j in range(keys):
            if not lo[i] <= j < hi[i]:
                assert logits[i, j] == -np.inf
                continue
            dots = np.maximum(qd[i].astype(np.float64) @ kd[j].astype(np.float64), 0.0)
            ref = (dots * w[i] * qs[i]).sum() * ks[j, 0]
            assert abs(logits[i, j] - ref) <= 1e-4 * (abs(ref) + 1e-3), (i, j, logits[i, j], ref)


def _decode_e4m3(b):
    """FP8 e4m3 bytes -> float32 (no NaN codes in quantizer output)."""
    b = b.astype(np.int32)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> 3) & 0xF
    man = b & 0x7
    val = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
    return (sign * val).astype(np.float32)


def test_workspace_size_query_runs_nothing(rng):
    h, h_kv, d = 4, 2, 32
    k_cache, v_cache, page_table = make_paged(rng, [5], 4, h_kv, d, num_pages=8)
    q = rng.standard_normal((1, h, d)).astype(np.float32)
    out = np.full((1, h, d), 7.0, np.float32)
    args = (q, k_cache, v_cache, page_table, np.array([5], np.int32), np.array([0, 1], np.int32), out)
    assert A.workspace_size(A.paged_attention, *args, softmax_scale=0.2, max_seqlen_q=1) == 0  # CPU: none
    assert (out == 7.0).all()
    with pytest.raises(A.Error):  # the query validates like the op
        A.workspace_size(A.paged_attention, *args, softmax_scale=-1.0)
