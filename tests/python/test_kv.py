"""KV cache classes from Python: allocator semantics, pool views sharing memory, stores."""
import numpy as np
import pytest

import attnserve as A


def test_slot_allocator_is_page_aware_and_all_or_nothing():
    alloc = A.SlotAllocator(num_slots=64, page_size=4)  # 16 pages, page 0 reserved
    first = alloc.alloc_extend([0], [-1], [6])            # 2 pages
    assert len(first) == 6 and all(s >= 4 for s in first)
    more = alloc.alloc_extend([6], [first[-1]], [3])      # continues in the half-full page
    assert more[:2] == [first[-1] + 1, first[-1] + 2]
    free_before = alloc.available_pages()
    with pytest.raises(A.Error, match="pages"):
        alloc.alloc_extend([0], [-1], [1000])
    assert alloc.available_pages() == free_before       # a failed allocation changes nothing
    alloc.free(first + more)
    with pytest.raises(A.Error):
        alloc.free(first)                                # double free


def test_pool_views_share_memory_and_store_writes_slots(rng):
    pool = A.MhaKvPool(num_layers=2, num_slots=32, h_kv=2, head_dim=8, head_dim_v=8, dtype="f16")
    assert (pool.num_layers, pool.num_slots) == (2, 32)
    k = rng.standard_normal((3, 2, 8)).astype(np.float32)
    v = rng.standard_normal((3, 2, 8)).astype(np.float32)
    loc = np.array([5, 9, 31], np.int64)
    A.set_kv_buffer(k, v, pool.k(1), pool.v(1), loc)
    np.testing.assert_array_equal(pool.k(1)[loc], k.astype(np.float16))
    np.testing.assert_array_equal(pool.v_paged(1, 4)[loc // 4, loc % 4], v.astype(np.float16))
    assert not pool.k(0).any()
    with pytest.raises(A.Error, match="loc"):
        A.set_kv_buffer(k, v, pool.k(1), pool.v(1), np.array([5, 9, 32], np.int64))


def test_req_to_token_pool_rows():
    p = A.ReqToTokenPool(size=4, max_context_len=16)
    r = p.alloc()
    p.write(r, 0, [7, 8, 9])
    assert list(p.table[r, :3]) == [7, 8, 9]
    with pytest.raises(A.Error):
        p.write(r, 15, [1, 2])


def test_pools_report_their_sizes():
    mla = A.MlaKvPool(3, 64, A.MlaCacheFormat.fp8_656)
    assert (mla.num_layers, mla.num_slots) == (3, 64)
    assert mla.cache(2).shape == (64, 656)
    idx = A.IndexerKeyPool(2, 5, 64)
    assert (idx.num_layers, idx.num_pages, idx.num_slots) == (2, 5, 320)
