"""Draft trees (speculative_eagle_topk > 1) from Python (NumPy on the CPU): tree verify through
DenseBackend equals a NumPy brute force (each draft token sees the prefix and its ancestors), the
packed-mask form equals the parents form, the metadata carries the tree part, bad trees raise."""
import numpy as np
import pytest

import attnserve as A

M = A.ForwardMode
CTX, ROWS, N, H_Q, H_KV, D = 64, 4, 6, 4, 2, 16


def setup(rng):
    table = A.ReqToTokenPool(size=ROWS, max_context_len=CTX)
    slots = rng.permutation(ROWS * CTX).astype(np.int32) + 1
    truth = []
    for r in range(ROWS):
        assert table.alloc() == r
        row = [int(s) for s in slots[r * CTX:(r + 1) * CTX]]
        table.write(r, 0, row)
        truth.append(row)
    num_slots = ROWS * CTX + 1
    k = rng.uniform(-1, 1, (num_slots, H_KV, D)).astype(np.float32)
    v = rng.uniform(-1, 1, (num_slots, H_KV, D)).astype(np.float32)
    backend = A.DenseBackend(num_q_heads=H_Q, num_kv_heads=H_KV, head_dim=D, kv_dtype="f32", softmax_scale=0.3,
                             page_size=1, speculative_num_draft_tokens=N, speculative_eagle_topk=4, max_bs=4,
                             max_num_tokens=4 * N, max_context_len=CTX, req_to_token=table.table,
                             token_to_kv_pool=[(k, v)])
    return backend, truth, k, v


def ancestors(parents, t):
    out = []
    while t >= 0:
        out.append(t)
        t = parents[t]
    return out


def reference(q, truth, rows, seqs, trees, k, v):
    out = np.zeros((len(rows) * N, H_Q, D))
    for r, (row, seq, par) in enumerate(zip(rows, seqs, trees)):
        for t in range(N):
            keys = truth[row][:seq] + [truth[row][seq + j] for j in ancestors(par, t)]
            for h in range(H_Q):
                kk, vv = k[keys, h // (H_Q // H_KV)].astype(np.float64), v[keys, h // (H_Q // H_KV)].astype(np.float64)
                s = 0.3 * kk @ q[r * N + t, h].astype(np.float64)
                p = np.exp(s - s.max())
                out[r * N + t, h] = p @ vv / p.sum()
    return out


def test_tree_verify_equals_brute_force_and_masks_equal_parents(rng):
    backend, truth, k, v = setup(rng)
    rows, seqs = [2, 0, 3], [10, 0, 40]
    trees = [[-1] + [int(rng.integers(0, i)) for i in range(1, N)] for _ in rows]
    q = rng.uniform(-2, 2, (len(rows) * N, H_Q, D)).astype(np.float32)
    fb = A.ForwardBatch(forward_mode=M.target_verify, seq_lens=seqs, req_pool_indices=rows,
                        tree_parents=[p for t in trees for p in t])
    backend.init_forward_metadata(fb)
    md = backend.forward_metadata
    assert md["tree"] is not None and md["tree"]["max_keys"] == N
    assert list(np.asarray(md["cache_seqlens_int32"])) == seqs  # the prefix part
    depth = [len(ancestors(t, i)) - 1 for t in trees for i in range(N)]
    assert list(np.asarray(md["tree"]["positions"])) == [s + d for s, d in zip(np.repeat(seqs, N), depth)]
    out = np.asarray(backend.forward(q, None, None, A.LayerSpec(layer_id=0), fb, save_kv_cache=False))
    want = reference(q, truth, rows, seqs, trees, k, v)
    assert np.abs(out.reshape(want.shape) - want).max() < 1e-5

    masks = [sum(1 << j for j in ancestors(t, i)) for t in trees for i in range(N)]
    fm = A.ForwardBatch(forward_mode=M.target_verify, seq_lens=seqs, req_pool_indices=rows, tree_mask=masks)
    backend.init_forward_metadata(fm)
    out2 = np.asarray(backend.forward(q, None, None, A.LayerSpec(layer_id=0), fm, save_kv_cache=False))
    assert np.array_equal(out, out2)


def test_bad_trees_raise(rng):
    backend, _, _, _ = setup(rng)
    cyc = [-1, 2, 1, 0, 0, 0]
    with pytest.raises(A.Error, match="cycle"):
        backend.init_forward_metadata(A.ForwardBatch(forward_mode=M.target_verify, seq_lens=[5],
                                                     req_pool_indices=[0], tree_parents=cyc))
    with pytest.raises(A.Error, match="exactly one"):
        backend.init_forward_metadata(A.ForwardBatch(forward_mode=M.target_verify, seq_lens=[5],
                                                     req_pool_indices=[0]))


def test_sparse_tree_verify_topk_sees_only_each_rows_prefix_and_path(rng):
    """SparseBackend with draft trees: each draft row's top-k slots are the best of its causal set (the
    prefix and its tree path) by the indexer's logits, scored in req_to_token's order; the metadata's
    tree part gives the set's size and the rows' positions."""
    table = A.ReqToTokenPool(size=ROWS, max_context_len=CTX)
    slots = rng.permutation(ROWS * CTX).astype(np.int32) + 1
    truth = []
    for r in range(ROWS):
        assert table.alloc() == r
        truth.append([int(s) for s in slots[r * CTX:(r + 1) * CTX]])
        table.write(r, 0, truth[-1])
    cache = rng.uniform(-1, 1, (ROWS * CTX + 1, 576)).astype(np.float32)
    topk = 8
    backend = A.SparseBackend(num_q_heads=2, kv_cache_format="bf16", index_topk=topk, softmax_scale=0.135,
                              page_size=1, nsa_prefill_backend="fa3", nsa_decode_backend="fa3",
                              speculative_num_draft_tokens=N, speculative_eagle_topk=4, max_bs=4,
                              max_num_tokens=4 * N, max_context_len=CTX, req_to_token=table.table,
                              token_to_kv_pool=[cache])
    rows, seqs = [1, 3], [3, 30]
    trees = [[-1] + [int(rng.integers(0, i)) for i in range(1, N)] for _ in rows]
    fb = A.ForwardBatch(forward_mode=M.target_verify, seq_lens=seqs, req_pool_indices=rows,
                        tree_parents=[p for t in trees for p in t])
    backend.init_forward_metadata(fb)
    tree = backend.forward_metadata["tree"]
    depth = [len(ancestors(t, i)) - 1 for t in trees for i in range(N)]
    assert list(np.asarray(tree["topk_lengths"])) == [s + d + 1 for s, d in zip(np.repeat(seqs, N), depth)]
    assert list(np.asarray(backend.get_indexer_metadata().get_seqlens_expanded())) == list(np.repeat([s + N for s in seqs], N))
    logits = rng.uniform(-3, 3, (len(rows) * N, CTX)).astype(np.float32)
    got = backend.get_indexer_metadata().topk_transform(logits.copy(), topk).copy()
    for r, (row, seq, par) in enumerate(zip(rows, seqs, trees)):
        for t in range(N):
            cols = list(range(seq)) + [seq + j for j in reversed(ancestors(par, t))]
            best = sorted(cols, key=lambda c: -logits[r * N + t, c])[:topk]
            want = {truth[row][c] for c in best}
            assert set(int(s) for s in got[r * N + t] if s >= 0) == want
