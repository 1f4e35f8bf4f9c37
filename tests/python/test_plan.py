"""Planners from Python: metadata for the forward modes, and graph replay in place."""
import numpy as np
import pytest

import attnserve as A
from req_tables import table_with


def test_dense_decode_page_table_uses_page_ids():
    pool, idx = table_with([list(range(16, 40)), list(range(64, 70))])
    p = A.DensePlanner(page_size=4)
    p.init(max_bs=4, max_num_tokens=64, max_context_len=256)
    md = p.plan(A.ForwardMode.decode, [24, 6], idx, pool.table)
    assert list(md["cache_seqlens_int32"]) == [24, 6]
    assert list(md["cu_seqlens_q"]) == [0, 1, 2]
    assert list(md["cu_seqlens_k"]) == [0, 24, 30]
    assert md["max_seq_len_k"] == 24 and md["max_seq_len_q"] == 1
    assert list(md["page_table"][0, :6]) == [4, 5, 6, 7, 8, 9]
    assert list(md["page_table"][1, :2]) == [16, 17]


def test_target_verify_and_sparse_expanded_lengths():
    pool, idx = table_with([list(range(8, 8 + 20))])
    s = A.SparsePlanner(page_size=4, topk=16, draft_token_num=4)
    s.init(max_bs=2, max_num_tokens=8, max_context_len=256)
    md = s.plan(A.ForwardMode.target_verify, [16], idx, pool.table)
    # one row per draft token: kv_len 20, rows see 17..20 keys, clipped to topk 16
    assert list(md["nsa_seqlens_expanded"]) == [17, 18, 19, 20]
    assert list(md["nsa_cache_seqlens_int32"]) == [16, 16, 16, 16]
    assert md["page_table_1"].shape[0] == 4


def test_graph_replay_rewrites_in_place():
    pool, idx = table_with([list(range(4, 4 + 30)), list(range(40, 40 + 12))])
    p = A.DensePlanner(page_size=1)
    p.init(max_bs=4, max_num_tokens=4, max_context_len=256)
    cap = p.capture(4, A.ForwardMode.decode)
    addr = cap["page_table"].__array_interface__["data"][0]
    for lens in ([30, 12], [5, 9], [1, 1]):
        md = p.replay(4, A.ForwardMode.decode, lens, idx, pool.table)
        assert md["page_table"].__array_interface__["data"][0] == addr
        assert list(md["cache_seqlens_int32"]) == lens + [0, 0]  # padding requests see no key
        fresh = A.DensePlanner(page_size=1)
        fresh.init(max_bs=4, max_num_tokens=4, max_context_len=256)
        eager = fresh.plan(A.ForwardMode.decode, lens, idx, pool.table)
        for r, n in enumerate(lens):
            assert list(md["page_table"][r, :n]) == list(eager["page_table"][r, :n])


def test_local_attention_seed_example():
    # seed 001's example: q_seqlens [4, 10, 5], kv_seqlens [6, 17, 9], chunk 4
    pool, idx = table_with([list(range(1, 7)), list(range(10, 27)), list(range(30, 39))])
    p = A.DensePlanner(page_size=1, attention_chunk_size=4)
    p.init(max_bs=4, max_num_tokens=64, max_context_len=256)
    md = p.plan(A.ForwardMode.extend, [6, 17, 9], idx, pool.table, extend_seq_lens=[4, 10, 5],
                extend_prefix_lens=[2, 7, 4])
    local = md["local_attn_metadata"]
    assert list(local["local_query_start_loc"]) == [0, 2, 4, 5, 9, 13, 14, 18, 19]
    assert list(local["local_seqused_k"]) == [4, 2, 4, 4, 4, 1, 4, 1]


def test_bad_batch_is_a_clear_error_and_changes_nothing():
    pool, idx = table_with([list(range(4, 20))])
    p = A.DensePlanner(page_size=1)
    p.init(max_bs=2, max_num_tokens=8, max_context_len=256)
    good = p.plan(A.ForwardMode.decode, [16], idx, pool.table)
    before = np.array(good["cache_seqlens_int32"])
    with pytest.raises(A.Error):
        p.plan(A.ForwardMode.extend, [16], idx, pool.table, extend_seq_lens=[4], extend_prefix_lens=[20])
    np.testing.assert_array_equal(good["cache_seqlens_int32"], before)
