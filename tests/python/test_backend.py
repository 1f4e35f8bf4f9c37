"""Backends from Python (NumPy on the CPU): every forward mode equals the planner + ops composed by
hand, graph replay equals the eager step, multi-step equals single steps, the sparse paths and the
indexer metadata, the pool adapters, and errors at construction."""
from types import SimpleNamespace

import numpy as np
import pytest

import attnserve as A

M = A.ForwardMode
CTX, ROWS, DRAFT, STEPS = 48, 6, 3, 4


class Table:
    """A request table whose rows own distinct shuffled pages; truth[r][p] is the slot of position p."""

    def __init__(self, rng, page):
        self.page = page
        pages_per_row = (CTX + page - 1) // page
        ids = rng.permutation(ROWS * pages_per_row) + 1  # page 0 stays unused (padding)
        self.num_slots = (ROWS * pages_per_row + 1) * page
        self.pool = A.ReqToTokenPool(size=ROWS, max_context_len=CTX)
        self.truth = []
        for r in range(ROWS):
            row = [int(ids[r * pages_per_row + p // page]) * page + p % page for p in range(CTX)]
            self.truth.append(row)
            assert self.pool.alloc() == r
            self.pool.write(r, 0, row)


def random_batch(rng, mode, bs):
    """(ForwardBatch fields, per-request (q_len, kv_len)) for `mode`; draft slots are positions seq.."""
    rows = [int(x) for x in rng.permutation(ROWS)[:bs]]
    seq, ext, pre, shapes = [], [], [], []
    for _ in range(bs):
        if mode == M.decode:
            s = int(rng.integers(1, CTX + 1)); seq.append(s); shapes.append((1, s))
        elif mode == M.extend:
            q = int(rng.integers(1, 9)); p = int(rng.integers(0, CTX - q + 1))
            seq.append(p + q); ext.append(q); pre.append(p); shapes.append((q, p + q))
        elif mode == M.target_verify:
            s = int(rng.integers(0, CTX - DRAFT + 1)); seq.append(s); shapes.append((DRAFT, s + DRAFT))
        elif mode == M.draft_extend:
            q = int(rng.integers(1, DRAFT + 1)); s = int(rng.integers(q, CTX + 1))
            seq.append(s); ext.append(q); shapes.append((q, s))
        elif mode == M.draft_decode:
            s = int(rng.integers(1, CTX - STEPS + 1)); seq.append(s); shapes.append((1, s + 2))  # step_id 1
    return dict(forward_mode=mode, seq_lens=seq, req_pool_indices=rows, extend_seq_lens=ext or None,
                extend_prefix_lens=pre or None), shapes


def new_slots(table, fb, shapes):
    out = []
    for r, (q, kv) in zip(fb["req_pool_indices"], shapes):
        out += [table.truth[r][p] for p in range(kv - q, kv)]
    return np.array(out, dtype=np.int32)


def draft_slots(table, fb):
    return [[table.truth[r][s + i] for i in range(STEPS)] for r, s in zip(fb["req_pool_indices"], fb["seq_lens"])]


def mha_caches(rng, table, layers=2, h_kv=2, d=16):
    return [(rng.uniform(-1, 1, (table.num_slots, h_kv, d)).astype(np.float16),
             rng.uniform(-1, 1, (table.num_slots, h_kv, d)).astype(np.float16)) for _ in range(layers)]


def dense(table, caches, **kw):
    args = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, kv_dtype="f16", softmax_scale=0.25,
                page_size=table.page, speculative_num_draft_tokens=DRAFT, speculative_num_steps=STEPS, step_id=1,
                max_bs=4, max_num_tokens=64, max_context_len=CTX, req_to_token=table.pool.table,
                token_to_kv_pool=caches)
    args.update(kw)
    return A.DenseBackend(**args)


LAYERS = [A.LayerSpec(layer_id=0),
          A.LayerSpec(layer_id=1, scaling=0.3, logit_cap=2.5, sliding_window_size=5, use_irope=True)]


@pytest.mark.parametrize("page", [1, 4])
def test_dense_every_mode_equals_planner_plus_ops(rng, page):
    table = Table(rng, page)
    caches = mha_caches(rng, table)
    hand = [(k.copy(), v.copy()) for k, v in caches]
    backend = dense(table, caches, attention_chunk_size=8)
    planner = A.DensePlanner(page_size=page, attention_chunk_size=8, draft_token_num=DRAFT, num_steps=STEPS,
                             step_id=1)
    planner.init(max_bs=4, max_num_tokens=64, max_context_len=CTX)
    for mode in [M.decode, M.extend, M.draft_decode, M.target_verify, M.draft_extend, M.idle]:
        bs = 0 if mode == M.idle else int(rng.integers(1, 5))
        fb, shapes = random_batch(rng, mode, bs)
        if mode == M.draft_decode:
            fb["draft_slots"] = draft_slots(table, fb)
        loc = new_slots(table, fb, shapes)
        batch = A.ForwardBatch(out_cache_loc=loc, **fb)
        backend.init_forward_metadata(batch)
        md = planner.plan(mode, fb["seq_lens"], fb["req_pool_indices"], table.pool.table,
                          extend_seq_lens=fb["extend_seq_lens"], extend_prefix_lens=fb["extend_prefix_lens"],
                          draft_slots=None if mode != M.draft_decode else sum(fb["draft_slots"], []))
        rows = len(loc)
        assert backend.forward_metadata["num_q_rows"] == rows
        for layer in LAYERS:
            q = rng.uniform(-2, 2, (rows, 4, 16)).astype(np.float16)
            k = rng.uniform(-1, 1, (rows, 2, 16)).astype(np.float16)
            v = rng.uniform(-1, 1, (rows, 2, 16)).astype(np.float16)
            fwd = backend.forward_decode if mode in (M.decode, M.draft_decode) else backend.forward_extend
            out = fwd(q, k, v, layer, batch)
            assert out.shape == (rows, 64) and out.dtype == np.float16
            # by hand: store, then paged attention with the layer's metadata and parameters
            hk, hv = hand[layer.layer_id]
            expect = np.full((rows, 4, 16), np.nan, dtype=np.float16)
            if rows:
                A.set_kv_buffer(k, v, hk, hv, loc)
                local = layer.use_irope
                la = md["local_attn_metadata"]
                w = layer.sliding_window_size
                A.paged_attention(q, hk.reshape(-1, page, 2, 16), hv.reshape(-1, page, 2, 16),
                                  la["local_block_table"] if local else md["page_table"],
                                  la["local_seqused_k"] if local else md["cache_seqlens_int32"],
                                  la["local_query_start_loc"] if local else md["cu_seqlens_q"], expect,
                                  softmax_scale=layer.scaling or 0.25,
                                  max_seqlen_q=la["local_max_query_len"] if local else md["max_seq_len_q"],
                                  window_left=w if w is not None else -1, window_right=0 if w is not None else -1,
                                  softcap=layer.logit_cap or 0.0)
            np.testing.assert_array_equal(out.reshape(rows, 4, 16), expect)
            for (bk, bv), (ek, ev) in zip(caches, hand):
                np.testing.assert_array_equal(bk, ek)
                np.testing.assert_array_equal(bv, ev)


def test_dense_graph_replay_equals_eager(rng):
    table = Table(rng, 4)
    caches = mha_caches(rng, table)
    graph, eager = dense(table, caches), dense(table, [(k.copy(), v.copy()) for k, v in caches])
    graph.init_cuda_graph_state(4)
    for mode, per in [(M.decode, 1), (M.target_verify, DRAFT), (M.draft_extend, DRAFT)]:
        graph.init_forward_metadata_capture_cuda_graph(4, 4 * per, None, None, None, mode, None)
        q = np.zeros((4 * per, 4, 16), np.float16)
        k, v = np.zeros((4 * per, 2, 16), np.float16), np.zeros((4 * per, 2, 16), np.float16)
        loc, out = np.zeros(4 * per, np.int32), np.zeros((4 * per, 64), np.float16)
        static = A.ForwardBatch(forward_mode=mode, seq_lens=[], req_pool_indices=[], out_cache_loc=loc)
        graph.forward(q, k, v, LAYERS[0], static, out=out)  # "capture"
        for _ in range(3):
            fb, shapes = random_batch(rng, mode, int(rng.integers(1, 5)))
            live = new_slots(table, fb, shapes)
            n = len(live)
            q[:n] = rng.uniform(-2, 2, (n, 4, 16))
            k[:n], v[:n] = rng.uniform(-1, 1, (n, 2, 16)), rng.uniform(-1, 1, (n, 2, 16))
            loc[:] = 0
            loc[:n] = live
            spec = SimpleNamespace(accept_length=fb["extend_seq_lens"])
            graph.init_forward_metadata_replay_cuda_graph(4, fb["req_pool_indices"], fb["seq_lens"], None, None,
                                                          mode, spec, fb["seq_lens"])
            graph.forward(q, k, v, LAYERS[0], static, out=out)  # the replayed graph
            batch = A.ForwardBatch(out_cache_loc=live, **fb)
            eager.init_forward_metadata(batch)
            expect = eager.forward(q[:n].copy(), k[:n].copy(), v[:n].copy(), LAYERS[0], batch)
            np.testing.assert_array_equal(out[:n], expect)


def test_dense_multi_step_equals_single_steps(rng):
    table = Table(rng, 2)
    caches = mha_caches(rng, table)
    hand = [(k.copy(), v.copy()) for k, v in caches]
    args = dict(num_q_heads=4, num_kv_heads=2, head_dim=16, kv_dtype="f16", softmax_scale=0.25, page_size=2,
                max_bs=4, max_num_tokens=64, max_context_len=CTX, req_to_token=table.pool.table)
    multi = A.DenseMultiStepBackend(speculative_num_steps=STEPS, token_to_kv_pool=caches, **args)
    assert len(multi.attn_backends) == STEPS - 1
    fb, _ = random_batch(rng, M.draft_decode, 3)
    fb["draft_slots"] = draft_slots(table, fb)
    multi.init_forward_metadata(A.ForwardBatch(**fb))
    for i, step in enumerate(multi.attn_backends):
        single = A.DenseBackend(speculative_num_steps=STEPS, step_id=i, token_to_kv_pool=hand, **args)
        loc = np.array([slots[i] for slots in fb["draft_slots"]], np.int32)
        batch = A.ForwardBatch(out_cache_loc=loc, **fb)
        single.init_forward_metadata(batch)
        q = rng.uniform(-2, 2, (3, 4, 16)).astype(np.float16)
        k, v = rng.uniform(-1, 1, (3, 2, 16)).astype(np.float16), rng.uniform(-1, 1, (3, 2, 16)).astype(np.float16)
        np.testing.assert_array_equal(step.forward_decode(q, k, v, LAYERS[0], batch),
                                      single.forward_decode(q, k, v, LAYERS[0], batch))


def sparse(table, pool, **kw):
    args = dict(num_q_heads=2, kv_cache_format="fp8_656", index_topk=8, softmax_scale=0.135, page_size=table.page,
                speculative_num_draft_tokens=DRAFT, speculative_num_steps=STEPS, step_id=1, max_bs=4,
                max_num_tokens=64, max_context_len=CTX, req_to_token=table.pool.table, token_to_kv_pool=pool)
    args.update(kw)
    return A.SparseBackend(**args)


@pytest.mark.parametrize("fuse_topk", [True, False])
def test_sparse_fp8_path_equals_ops_by_hand(rng, fuse_topk):
    table = Table(rng, 4)
    pool, hand = (A.MlaKvPool(1, table.num_slots, A.MlaCacheFormat.fp8_656) for _ in range(2))
    backend = sparse(table, pool, nsa_prefill_backend="flashmla_kv", nsa_decode_backend="flashmla_kv",
                     fuse_topk=fuse_topk)
    assert backend.resolved_decode_impl == A.backend.NsaImpl.sparse_fp8
    planner = A.SparsePlanner(page_size=4, topk=8, draft_token_num=DRAFT, num_steps=STEPS, step_id=1)
    planner.init(max_bs=4, max_num_tokens=64, max_context_len=CTX)
    for mode in [M.extend, M.decode, M.target_verify, M.draft_extend]:
        fb, shapes = random_batch(rng, mode, int(rng.integers(1, 5)))
        loc = new_slots(table, fb, shapes)
        batch = A.ForwardBatch(out_cache_loc=loc, **fb)
        backend.init_forward_metadata(batch)
        md = planner.plan(mode, fb["seq_lens"], fb["req_pool_indices"], table.pool.table,
                          extend_seq_lens=fb["extend_seq_lens"], extend_prefix_lens=fb["extend_prefix_lens"])
        rows = len(loc)
        meta = backend.get_indexer_metadata(0, batch)
        np.testing.assert_array_equal(meta.get_seqlens_expanded(), md["nsa_seqlens_expanded"])
        np.testing.assert_array_equal(meta.get_seqlens_int32(), md["cache_seqlens_int32"])
        np.testing.assert_array_equal(meta.get_page_table_64(), md["real_page_table"])
        logits = rng.uniform(-3, 3, (rows, CTX)).astype(np.float32)
        got = meta.topk_transform(logits, 8).copy()
        positions = np.zeros((rows, 8), np.int32)
        A.topk(logits, md["nsa_seqlens_expanded"], positions, topk=8)
        table_rows = np.arange(rows) if mode in (M.decode, M.target_verify) else \
            np.searchsorted(md["cu_seqlens_q"], np.arange(rows), side="right") - 1
        slots = np.where(positions < 0, -1, md["page_table_1"][table_rows[:, None], np.maximum(positions, 0)])
        np.testing.assert_array_equal(got, slots if fuse_topk else positions)
        q = rng.uniform(-1, 1, (rows, 2, 576)).astype(np.float32)
        k, k_rope = rng.uniform(-1, 1, (rows, 512)).astype(np.float32), rng.uniform(-1, 1, (rows, 64)).astype(np.float32)
        out = backend.forward(q, k, None, A.LayerSpec(), batch, k_rope=k_rope, topk_indices=got)
        expect = np.full((rows, 2, 512), np.nan, np.float32)
        A.set_mla_kv_buffer(k, k_rope, hand.cache(0), loc)
        A.sparse_mla(q, hand.cache(0), slots.astype(np.int32), expect, softmax_scale=0.135,
                     topk_length=md["nsa_cache_seqlens_int32"])
        np.testing.assert_array_equal(out.reshape(rows, 2, 512), expect)
        np.testing.assert_array_equal(pool.cache(0), hand.cache(0))


def test_sparse_gather_path_on_an_f32_cache(rng):
    """The gather path (the seeds' fa3) on the CPU also reads an f32 latent cache, q split."""
    table = Table(rng, 4)
    cache = rng.uniform(-1, 1, (table.num_slots, 576)).astype(np.float32)
    backend = sparse(table, [cache], kv_cache_format="bf16", nsa_prefill_backend="fa3", nsa_decode_backend="fa3")
    fb, shapes = random_batch(rng, M.decode, 3)
    batch = A.ForwardBatch(**fb)
    backend.init_forward_metadata(batch)
    md = backend.forward_metadata
    logits = rng.uniform(-3, 3, (3, CTX)).astype(np.float32)
    slots = backend.get_indexer_metadata().topk_transform(logits, 8).copy()
    q_nope, q_rope = rng.uniform(-1, 1, (3, 2, 512)).astype(np.float32), rng.uniform(-1, 1, (3, 2, 64)).astype(np.float32)
    out = backend.forward_decode(q_nope.reshape(3, -1), None, None, A.LayerSpec(scaling=0.2), batch,
                                 q_rope=q_rope.reshape(3, -1), topk_indices=slots)
    expect = np.zeros((3, 2, 512), np.float32)
    A.mla_attention(q_nope, q_rope, cache.reshape(-1, 1, 1, 576), slots, md["nsa_cache_seqlens_int32"],
                    md["nsa_cu_seqlens_q"], expect, softmax_scale=0.2, max_seqlen_q=1)
    np.testing.assert_array_equal(out.reshape(3, 2, 512), expect)


def test_sglang_style_pool_and_layer(rng):
    """Pools with get_kv_buffer(layer_id) / layer_num and RadixAttention-like layers plug in as is."""
    table = Table(rng, 1)
    caches = mha_caches(rng, table, layers=3)
    pool = SimpleNamespace(layer_num=3, get_kv_buffer=lambda i: caches[i])
    backend = dense(table, pool)
    fb, shapes = random_batch(rng, M.decode, 2)
    batch = A.ForwardBatch(out_cache_loc=new_slots(table, fb, shapes), **fb)
    backend.init_forward_metadata(batch)
    layer = SimpleNamespace(layer_id=2, scaling=np.float32(0.25), logit_cap=0.0, sliding_window_size=-1,
                            use_irope=False, k_scale=None, v_scale=None)
    q = rng.uniform(-2, 2, (2, 64)).astype(np.float16)
    k, v = rng.uniform(-1, 1, (2, 32)).astype(np.float16), rng.uniform(-1, 1, (2, 32)).astype(np.float16)
    out = np.full((2, 64), np.nan, np.float16)
    assert backend.forward_decode(q, k, v, layer, batch, out=out) is out
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(caches[2][0][batch.out_cache_loc], k.reshape(2, 2, 16))


def test_bad_configuration_fails_at_construction(rng):
    table = Table(rng, 4)
    caches = mha_caches(rng, table)
    with pytest.raises(A.Error, match="num_q_heads 6 is not a multiple of num_kv_heads 4"):
        dense(table, caches, num_q_heads=6, num_kv_heads=4)
    with pytest.raises(A.Error, match="attention_chunk_size 6 is not a multiple of page_size 4"):
        dense(table, caches, attention_chunk_size=6)
    with pytest.raises(A.Error, match="kv_buffers is empty"):
        dense(table, [])
    pool = A.MlaKvPool(1, table.num_slots, A.MlaCacheFormat.bf16)
    with pytest.raises(A.Error, match="kv_cache_format = fp8_656"):
        sparse(table, pool, kv_cache_format="bf16", nsa_decode_backend="flashmla_kv")
