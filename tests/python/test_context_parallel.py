"""Context parallelism from Python: plan_context_parallel per rank, ranks as Python threads over an
InProcessGroup (the ops release the GIL), cp_paged_attention equal to single-rank paged_attention.
Each rank's cache copy has NaN in the pages other ranks own (reading one poisons the result)."""
import threading

import numpy as np
import pytest

import attnserve as A


def run_ranks(world_size, fn):
    group = A.InProcessGroup(world_size)
    comms = [group.communicator(r) for r in range(world_size)]
    errors = [None] * world_size

    def body(r):
        try:
            fn(r, comms[r])
        except BaseException as e:  # noqa: BLE001 (reported below)
            errors[r] = e
            group.abort()  # the other ranks must not wait for this one

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world_size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a rank hung"
    for e in errors:
        if e is not None:
            raise e


@pytest.mark.parametrize("world_size,page_size,mode,by_head", [(2, 4, "decode", False), (3, 1, "target_verify", False),
                                                                (4, 16, "decode", False), (2, 16, "target_verify", False),
                                                                (2, 4, "decode", True), (4, 1, "target_verify", True)])
def test_cp_paged_attention_equals_single_rank(rng, world_size, page_size, mode, by_head):
    dtn = 3 if mode == "target_verify" else 0
    q_len = max(dtn, 1)
    seq_lens = [1, max(1, page_size // 2)] + list(rng.integers(1, 4 * world_size * page_size + 5, 3))
    kv_lens = [s + dtn for s in seq_lens]
    bs, h_q, h_kv, d = len(seq_lens), 8, 4, 32
    width = max((k + page_size - 1) // page_size for k in kv_lens) + 1
    num_pages = bs * width + 1
    ids = rng.permutation(np.arange(1, num_pages)).astype(np.int32)
    page_table = ids[:bs * width].reshape(bs, width).copy()
    k_cache = rng.uniform(-1, 1, (num_pages, page_size, h_kv, d)).astype(np.float32)
    v_cache = rng.uniform(-1, 1, (num_pages, page_size, h_kv, d)).astype(np.float32)
    rows = bs * q_len
    q = rng.uniform(-2, 2, (rows, h_q, d)).astype(np.float32)
    scale = 1.0 / np.sqrt(d)

    # Single rank: the whole batch with its own causal rows.
    out_ref = np.empty((rows, h_q, d), np.float32)
    lse_ref = np.empty((rows, h_q), np.float32)
    A.paged_attention(q, k_cache, v_cache, page_table, np.array(kv_lens, np.int32),
                      np.arange(0, rows + 1, q_len, dtype=np.int32), out_ref, softmax_scale=scale, lse=lse_ref,
                      max_seqlen_q=q_len)

    forward_mode = getattr(A.ForwardMode, mode)
    outs, lses = [None] * world_size, [None] * world_size

    def rank_fn(rank, comm):
        p = A.plan_context_parallel(world_size, page_size, rank, forward_mode, seq_lens, page_table,
                                    draft_token_num=dtn)
        assert p["num_rows"] == rows
        k, v = k_cache.copy(), v_cache.copy()
        for r in range(bs):
            for g in range((kv_lens[r] + page_size - 1) // page_size):
                if g % world_size != rank:
                    k[page_table[r, g]] = np.nan
                    v[page_table[r, g]] = np.nan
        heads = h_q // world_size if by_head else h_q
        out = np.full((rows, heads, d), np.nan, np.float32)
        lse = np.full((rows, heads), np.nan, np.float32)
        args = (comm, q, k, v, p["page_table"], p["cache_seqlens"], p["cu_seqlens_q"], out)
        kw = dict(softmax_scale=scale, lse=lse, by_head=by_head)
        ws = np.empty(A.workspace_size(A.cp_paged_attention, *args, **kw), np.uint8)
        A.cp_paged_attention(*args, workspace=ws, **kw)
        outs[rank], lses[rank] = out, lse

    run_ranks(world_size, rank_fn)
    for rank in range(world_size):
        heads = slice(rank * h_q // world_size, (rank + 1) * h_q // world_size) if by_head else slice(None)
        np.testing.assert_allclose(outs[rank], out_ref[:, heads], rtol=2e-5, atol=2e-6)
        np.testing.assert_allclose(lses[rank], lse_ref[:, heads], rtol=2e-5, atol=2e-6)
        if not by_head:
            assert np.array_equal(outs[rank], outs[0])


def test_plan_and_routing_errors_and_nccl_flag():
    table = np.zeros((2, 4), np.int32)
    with pytest.raises(A.Error, match="rank 2"):
        A.plan_context_parallel(2, 4, 2, A.ForwardMode.decode, [3, 5], table)
    with pytest.raises(A.Error, match="extend"):
        A.plan_context_parallel(2, 4, 0, A.ForwardMode.extend, [3, 5], table)
    out = np.empty((1, 3), np.int32)
    A.cp_route_topk(2, 4, 1, np.array([[0, 4, -1]], np.int32), [0], [5], table[:1] + 7, out)
    assert out.tolist() == [[-1, 7 * 4 + 0, -1]]
    assert isinstance(A.nccl_available(), bool)
    if not A.nccl_available():
        with pytest.raises(A.Error, match="without NCCL"):
            A.NcclCommunicator.new_unique_id()
