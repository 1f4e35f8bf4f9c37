"""Behaviour a Python user relies on: planner metadata views vs copy=True, merging states with +inf LSE,
idle sparse batches, and the errors that used to be silent or misnamed."""
import numpy as np
import pytest

import attnserve as A
from req_tables import table_with


def test_plan_returns_views_that_the_next_plan_overwrites_unless_copied():
    pool, idx = table_with(max_context_len=64, rows=[list(range(8, 20)), list(range(32, 37))])
    p = A.DensePlanner(page_size=1)
    p.init(max_bs=4, max_num_tokens=16, max_context_len=64)
    view = p.plan(A.ForwardMode.decode, [12, 5], idx, pool.table)
    owned = p.plan(A.ForwardMode.decode, [12, 5], idx, pool.table, copy=True)
    assert list(view["cache_seqlens_int32"]) == [12, 5] == list(owned["cache_seqlens_int32"])
    p.plan(A.ForwardMode.decode, [3, 4], idx, pool.table)
    assert list(view["cache_seqlens_int32"]) == [3, 4]          # documented: a view of the planner's buffer
    assert list(owned["cache_seqlens_int32"]) == [12, 5]        # copy=True: arrays of its own
    assert list(owned["page_table"][0, :12]) == list(range(8, 20))
    assert list(owned["cu_seqlens_k"]) == [0, 12, 17]
    assert "VIEWS" in A.DensePlanner.plan.__doc__ and "copy=True" in A.DensePlanner.plan.__doc__


def test_sparse_plan_copy_and_idle_max_seq_len_q():
    pool, idx = table_with(max_context_len=64, rows=[list(range(8, 28))])
    s = A.SparsePlanner(page_size=4, topk=16, draft_token_num=4)
    s.init(max_bs=2, max_num_tokens=8, max_context_len=64)
    owned = s.plan(A.ForwardMode.target_verify, [16], idx, pool.table, copy=True)
    s.plan(A.ForwardMode.decode, [3], idx, pool.table)
    assert list(owned["nsa_seqlens_expanded"]) == [17, 18, 19, 20]
    idle = s.plan(A.ForwardMode.idle, [], [], pool.table)
    assert idle["batch_size"] == 0 and idle["max_seq_len_q"] == 1  # as the seed (SEED_NOTES 18)


@pytest.mark.parametrize("empty", [np.inf, -np.inf])
def test_merge_state_infinite_lse_means_no_keys(rng, empty):
    v_a = rng.standard_normal((3, 2, 8)).astype(np.float32)
    v_b = rng.standard_normal((3, 2, 8)).astype(np.float32)
    s_a = rng.standard_normal((3, 2)).astype(np.float32)
    s_b = rng.standard_normal((3, 2)).astype(np.float32)
    s_a[0] = empty            # token 0: a is empty -> b
    s_a[1] = s_b[1] = empty   # token 1: both empty -> zeros, -inf
    v_out = np.full_like(v_a, np.nan)
    s_out = np.full_like(s_a, np.nan)
    A.merge_state(v_a, s_a, v_b, s_b, v_out, s_out)
    assert np.isfinite(v_out).all()
    np.testing.assert_array_equal(v_out[0], v_b[0])
    np.testing.assert_array_equal(s_out[0], s_b[0])
    assert (v_out[1] == 0).all() and (s_out[1] == -np.inf).all()
    parts_v = np.stack([v_a, v_b])
    parts_s = np.stack([s_a, s_b])
    out_n = np.full_like(v_a, np.nan)
    A.merge_states(parts_v, parts_s, out_n)
    np.testing.assert_allclose(out_n, v_out, rtol=1e-6, atol=1e-7)


def test_indexer_paged_refuses_a_request_shorter_than_next_n(rng):
    page_size, next_n, heads = 4, 2, 2
    cache = np.zeros((4, page_size * 132), np.uint8)
    q = np.zeros((2 * next_n, heads, 128), np.uint8)
    w = np.ones((2 * next_n, heads), np.float32)
    table = np.array([[1, 2], [3, 0]], np.int32)
    logits = np.zeros((2 * next_n, 8), np.float32)
    A.indexer_paged(q, w, cache, table, np.array([5, 2], np.int32), logits, page_size=page_size, next_n=next_n)
    with pytest.raises(A.Error, match="'seqlens'\\[1\\] = 1 is shorter than 'next_n' = 2"):
        A.indexer_paged(q, w, cache, table, np.array([5, 1], np.int32), logits, page_size=page_size, next_n=next_n)


def test_exhausted_alloc_decode_names_itself():
    alloc = A.SlotAllocator(num_slots=8, page_size=4)  # one usable page
    first = alloc.alloc_extend([0], [-1], [4])
    with pytest.raises(A.Error, match="alloc_decode: out of KV cache pages"):
        alloc.alloc_decode([4], [first[-1]])
