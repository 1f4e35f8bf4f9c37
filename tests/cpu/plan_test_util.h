// Planner tests: random batches over a page-consistent req_to_token table, readers for metadata
// views on any device, and brute-force checkers of what every query row sees.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attnserve/plan.h"
#include "attnserve/runtime.h"

namespace attnserve::test {

// ---- Reading views (CPU or CUDA) --------------------------------------------------------------

inline std::vector<int32_t> read_i32(const TensorView& v, Stream stream = {}) {
  std::vector<int32_t> out(std::size_t(v.numel()));
  if (out.empty()) return out;
  TensorView host = TensorView::contiguous(out.data(), DType::i32, v.shape.data(), v.ndim);
  copy_async(host, v, stream);
  stream_synchronize(stream);
  return out;
}

// ---- A request -> token-slot table whose slots are page-consistent ------------------------------

// Every pool row owns distinct random pages; position p of pool row i lives at slot
// page[i][p / P] * P + p % P. `slot(i, p)` is the truth; the table may be overwritten elsewhere.
struct TestPool {
  int pool_size = 0, max_ctx = 0, page = 1;
  std::vector<int32_t> truth;  // [pool_size, max_ctx]
  std::vector<int32_t> table;  // what the planner reads
  TestPool(int pool_size_, int max_ctx_, int page_, std::mt19937_64& g)
      : pool_size(pool_size_), max_ctx(max_ctx_), page(page_) {
    const int pages_per_row = (max_ctx + page - 1) / page;
    std::vector<int32_t> ids(std::size_t(pool_size) * pages_per_row);
    std::iota(ids.begin(), ids.end(), 1);  // page 0 stays unused: a 0 in a table means "unset"
    std::shuffle(ids.begin(), ids.end(), g);
    truth.resize(std::size_t(pool_size) * max_ctx);
    for (int i = 0; i < pool_size; ++i)
      for (int p = 0; p < max_ctx; ++p)
        truth[std::size_t(i) * max_ctx + p] = ids[std::size_t(i) * pages_per_row + p / page] * page + p % page;
    table = truth;
  }
  int32_t slot(int row, int pos) const { return truth[std::size_t(row) * max_ctx + pos]; }
  TensorView view() { return TensorView::contiguous(table.data(), DType::i32, {pool_size, max_ctx}); }
};

// ---- Random batches -----------------------------------------------------------------------------

struct TestBatch {
  ForwardMode mode = ForwardMode::decode;
  std::vector<int32_t> seq, pool, ext, pre, drafts;
  int num_steps = 0;
  BatchSpec spec(const TensorView& r2t) const {
    BatchSpec b;
    b.mode = mode;
    b.seq_lens = seq;
    b.req_pool_indices = pool;
    b.extend_seq_lens = ext;
    b.extend_prefix_lens = pre;
    b.draft_slots = drafts;
    b.req_to_token = r2t;
    return b;
  }
  int bs() const { return int(seq.size()); }
};

struct BatchShape {
  int max_ctx = 64;    // keys per request at most
  int max_q = 16;      // extend tokens per request at most
  bool prefix = true;  // extend: allow cached prefixes
  SpeculativeConfig spec{};
};

inline int rand_int(std::mt19937_64& g, int lo, int hi) {  // [lo, hi]
  return std::uniform_int_distribution<int>(lo, hi)(g);
}

// A random valid batch of `bs` requests for `mode`. Draft-decode slots come from the pool's truth,
// and the table's positions >= seq_lens of those rows are overwritten with garbage (-7), so a planner
// that reads them instead of draft_slots fails. (The table is reset first: one batch at a time.)
inline TestBatch random_batch(std::mt19937_64& g, ForwardMode mode, int bs, const BatchShape& s, TestPool& pool) {
  pool.table = pool.truth;
  TestBatch b;
  b.mode = mode;
  if (mode == ForwardMode::idle) return b;
  std::vector<int32_t> rows(std::size_t(pool.pool_size));
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), g);
  const int D = s.spec.draft_token_num, steps = s.spec.num_steps;
  for (int r = 0; r < bs; ++r) {
    b.pool.push_back(rows[std::size_t(r)]);
    switch (mode) {
      case ForwardMode::decode: b.seq.push_back(rand_int(g, 1, s.max_ctx)); break;
      case ForwardMode::extend: {
        const int q = rand_int(g, 1, std::min(s.max_q, s.max_ctx));
        const int p = s.prefix ? rand_int(g, 0, s.max_ctx - q) : 0;
        b.ext.push_back(q), b.pre.push_back(p), b.seq.push_back(p + q);
        break;
      }
      case ForwardMode::draft_extend: {
        const int q = rand_int(g, 1, std::min(D, s.max_ctx));
        b.ext.push_back(q), b.seq.push_back(rand_int(g, q, s.max_ctx));
        break;
      }
      case ForwardMode::target_verify: b.seq.push_back(rand_int(g, 0, s.max_ctx - D)); break;
      case ForwardMode::draft_decode: b.seq.push_back(rand_int(g, 1, s.max_ctx - steps)); break;
      case ForwardMode::idle: break;
    }
  }
  if (mode == ForwardMode::draft_decode) {
    b.num_steps = steps;
    for (int r = 0; r < bs; ++r) {
      const int row = b.pool[std::size_t(r)], seq = b.seq[std::size_t(r)];
      for (int k = 0; k < steps; ++k) b.drafts.push_back(pool.slot(row, seq + k));
      for (int p = seq; p < pool.max_ctx; ++p) pool.table[std::size_t(row) * pool.max_ctx + p] = -7;
    }
  }
  return b;
}

// Per live request: query rows and keys the mode defines (batch.h).
struct ReqShape {
  int q = 0, kv = 0;
};
inline ReqShape request_shape(const TestBatch& b, int r, const SpeculativeConfig& spec) {
  const int seq = b.seq[std::size_t(r)];
  switch (b.mode) {
    case ForwardMode::decode: return {1, seq};
    case ForwardMode::extend:
    case ForwardMode::draft_extend: return {b.ext[std::size_t(r)], seq};
    case ForwardMode::target_verify: return {spec.draft_token_num, seq + spec.draft_token_num};
    case ForwardMode::draft_decode: return {1, seq + spec.step_id + 1};
    case ForwardMode::idle: break;
  }
  return {};
}
// The slot of key `pos` of live request r (drafts from draft_slots in draft_decode).
inline int32_t expected_slot(const TestBatch& b, const TestPool& pool, int r, int pos) {
  const int seq = b.seq[std::size_t(r)];
  if (b.mode == ForwardMode::draft_decode && pos >= seq) return b.drafts[std::size_t(r) * b.num_steps + (pos - seq)];
  return pool.slot(b.pool[std::size_t(r)], pos);
}

// ---- Dense: every query row sees exactly its causal keys ----------------------------------------

struct HostDense {
  std::vector<int32_t> cache, cu_q, cu_k, table, lq, lk, ltable;
  int64_t table_w = 0, ltable_w = 0;
  explicit HostDense(const DenseMetadata& m, Stream st = {}) {
    cache = read_i32(m.cache_seqlens_int32, st);
    cu_q = read_i32(m.cu_seqlens_q, st);
    cu_k = read_i32(m.cu_seqlens_k, st);
    table = read_i32(m.page_table, st);
    table_w = m.page_table.size(1);
    if (m.has_local_attn) {
      lq = read_i32(m.local_attn_metadata.local_query_start_loc, st);
      lk = read_i32(m.local_attn_metadata.local_seqused_k, st);
      ltable = read_i32(m.local_attn_metadata.local_block_table, st);
      ltable_w = m.local_attn_metadata.local_block_table.size(1);
    }
  }
};

// Checks the metadata of `b` (live requests first; requests past them must be padding: no keys).
inline void check_dense(const DenseMetadata& m, const TestBatch& b, const TestPool& pool, const DensePlanConfig& cfg,
                        Stream st = {}) {
  SCOPED_TRACE(std::string("dense ") + to_string(b.mode) + (m.captured ? " (captured)" : ""));
  const HostDense h(m, st);
  const int P = cfg.page_size, live = b.bs();
  ASSERT_EQ(m.mode, b.mode);
  ASSERT_GE(m.batch_size, live);
  ASSERT_EQ(int(h.cache.size()), m.batch_size);
  ASSERT_EQ(int(h.cu_q.size()), m.batch_size + 1);
  ASSERT_EQ(int(h.cu_k.size()), m.batch_size + 1);
  ASSERT_EQ(m.page_table.size(0), m.batch_size);
  EXPECT_EQ(h.cu_q[0], 0);
  EXPECT_EQ(h.cu_k[0], 0);
  int max_q = 0, max_k = 0;
  for (int r = 0; r < m.batch_size; ++r) {
    SCOPED_TRACE("request " + std::to_string(r));
    EXPECT_EQ(h.cu_k[std::size_t(r) + 1] - h.cu_k[std::size_t(r)], h.cache[std::size_t(r)]) << "prefix sums";
    const int q = h.cu_q[std::size_t(r) + 1] - h.cu_q[std::size_t(r)], kv = h.cache[std::size_t(r)];
    if (r >= live) {
      EXPECT_EQ(kv, 0) << "padding request";
      continue;
    }
    const ReqShape want = request_shape(b, r, cfg.spec);
    ASSERT_EQ(q, want.q);
    ASSERT_EQ(kv, want.kv);
    max_q = std::max(max_q, q), max_k = std::max(max_k, kv);
    // Row t sees keys 0 .. kv - q + t through the page table.
    for (int j = 0; j < kv; ++j) {
      const int32_t page = h.table[std::size_t(r) * h.table_w + j / P];
      ASSERT_EQ(page * P + j % P, expected_slot(b, pool, r, j)) << "key " << j;
    }
    if (!m.captured)  // compact: 0 past the request's keys
      for (int64_t c = (kv + P - 1) / P; c < h.table_w; ++c) EXPECT_EQ(h.table[std::size_t(r) * h.table_w + c], 0);
  }
  if (!m.captured) {
    EXPECT_EQ(m.max_seq_len_q, max_q);
    EXPECT_EQ(m.max_seq_len_k, max_k);
    EXPECT_EQ(m.num_q_rows, h.cu_q.back());
    EXPECT_EQ(m.page_table.size(1), (max_k + P - 1) / P);
  } else {
    EXPECT_GE(m.max_seq_len_q, max_q);
    EXPECT_GE(m.max_seq_len_k, max_k);
    EXPECT_GE(m.num_q_rows, h.cu_q.back());
  }
  if (cfg.sliding_window_size >= 0) {
    EXPECT_EQ(m.window_left, cfg.sliding_window_size);
    EXPECT_EQ(m.window_right, 0);
  } else {
    EXPECT_EQ(m.window_left, -1);
    EXPECT_EQ(m.window_right, -1);
  }

  // ---- Local attention: row at absolute position p sees keys floor(p / C) * C .. p.
  ASSERT_EQ(m.has_local_attn, cfg.attention_chunk_size > 0 && b.mode != ForwardMode::idle);
  if (!m.has_local_attn) return;
  const LocalAttentionMetadata& la = m.local_attn_metadata;
  const int C = cfg.attention_chunk_size, nv = la.num_virtual_batches;
  ASSERT_EQ(int(h.lq.size()), nv + 1);
  ASSERT_EQ(int(h.lk.size()), nv);
  ASSERT_EQ(h.lq[0], 0);
  ASSERT_EQ(h.lq.back(), h.cu_q.back()) << "virtual batches cover the same query rows";
  int v = 0, lmax_q = 0, lmax_k = 0;
  for (int r = 0; r < live; ++r) {
    const ReqShape want = request_shape(b, r, cfg.spec);
    for (int t = 0; t < want.q; ++t) {
      const int i = h.cu_q[std::size_t(r)] + t;
      while (v < nv && h.lq[std::size_t(v) + 1] <= i) ++v;
      ASSERT_LT(v, nv);
      const int vq = h.lq[std::size_t(v) + 1] - h.lq[std::size_t(v)], vk = h.lk[std::size_t(v)];
      const int u = i - h.lq[std::size_t(v)];
      const int p = want.kv - want.q + t, chunk_start = p / C * C;
      ASSERT_EQ(vk - vq + 1 + u, p - chunk_start + 1) << "row " << i << " keys seen";
      for (int k = 0; k <= p - chunk_start; ++k) {
        const int32_t page = h.ltable[std::size_t(v) * h.ltable_w + k / P];
        ASSERT_EQ(page * P + k % P, expected_slot(b, pool, r, chunk_start + k)) << "row " << i << " key " << k;
      }
    }
  }
  for (int w = 0; w < nv; ++w) {
    lmax_q = std::max(lmax_q, h.lq[std::size_t(w) + 1] - h.lq[std::size_t(w)]);
    lmax_k = std::max(lmax_k, h.lk[std::size_t(w)]);
  }
  if (!m.captured) {
    EXPECT_EQ(la.local_max_query_len, lmax_q);
    EXPECT_EQ(la.local_max_seq_len, lmax_k);
    EXPECT_EQ(la.local_block_table.size(1), la.effective_chunk_size / P);
  } else {
    EXPECT_GE(la.local_max_query_len, lmax_q);
    EXPECT_GE(la.local_max_seq_len, lmax_k);
  }
}

// ---- Sparse -------------------------------------------------------------------------------------

struct HostSparse {
  std::vector<int32_t> cache, cu_q, cu_k, t1, tp, exp, nsa, ncu_q, ncu_k;
  int64_t w1 = 0, wp = 0;
  explicit HostSparse(const SparseMetadata& m, Stream st = {}) {
    cache = read_i32(m.cache_seqlens_int32, st);
    cu_q = read_i32(m.cu_seqlens_q, st);
    cu_k = read_i32(m.cu_seqlens_k, st);
    t1 = read_i32(m.page_table_1, st);
    tp = read_i32(m.real_page_table, st);
    w1 = m.page_table_1.size(1);
    wp = m.real_page_table.size(1);
    exp = read_i32(m.nsa_seqlens_expanded, st);
    nsa = read_i32(m.nsa_cache_seqlens_int32, st);
    ncu_q = read_i32(m.nsa_cu_seqlens_q, st);
    ncu_k = read_i32(m.nsa_cu_seqlens_k, st);
  }
};

inline void check_sparse(const SparseMetadata& m, const TestBatch& b, const TestPool& pool, const SparsePlanConfig& cfg,
                         Stream st = {}) {
  SCOPED_TRACE(std::string("sparse ") + to_string(b.mode) + (m.captured ? " (captured)" : ""));
  const HostSparse h(m, st);
  const int P = cfg.page_size, K = cfg.topk, live = b.bs(), D = cfg.spec.draft_token_num;
  const bool verify = b.mode == ForwardMode::target_verify;
  const int per = verify ? D : 1;  // page-table rows per request
  ASSERT_EQ(m.mode, b.mode);
  ASSERT_EQ(int(h.cache.size()), m.batch_size);
  ASSERT_EQ(int(h.cu_k.size()), m.batch_size + 1);
  const int64_t R = int64_t(m.batch_size) * per;
  ASSERT_EQ(int64_t(h.cu_q.size()), R + 1);
  ASSERT_EQ(m.page_table_1.size(0), R);
  ASSERT_EQ(m.real_page_table.size(0), R);
  ASSERT_EQ(int(h.exp.size()), m.num_rows);
  ASSERT_EQ(int(h.nsa.size()), m.num_rows);
  ASSERT_EQ(int(h.ncu_q.size()), m.num_rows + 1);
  ASSERT_EQ(int(h.ncu_k.size()), m.num_rows + 1);
  ASSERT_EQ(int64_t(m.nsa_extend_seq_lens_list.size()), R);
  if (P == 1) EXPECT_EQ(m.real_page_table.data, m.page_table_1.data);
  EXPECT_EQ(h.cu_k[0], 0);
  EXPECT_EQ(h.cu_q[0], 0);
  EXPECT_EQ(h.ncu_k[0], 0);
  for (int i = 0; i <= m.num_rows; ++i) ASSERT_EQ(h.ncu_q[std::size_t(i)], i);
  for (int i = 0; i < m.num_rows; ++i) {
    ASSERT_EQ(h.nsa[std::size_t(i)], std::min(h.exp[std::size_t(i)], K)) << "row " << i;
    ASSERT_EQ(h.ncu_k[std::size_t(i) + 1] - h.ncu_k[std::size_t(i)], h.nsa[std::size_t(i)]) << "row " << i;
  }
  int max_k = 0, max_q = 0;
  for (int r = 0; r < m.batch_size; ++r) {
    SCOPED_TRACE("request " + std::to_string(r));
    EXPECT_EQ(h.cu_k[std::size_t(r) + 1] - h.cu_k[std::size_t(r)], h.cache[std::size_t(r)]);
    for (int c = 0; c < per; ++c) {
      const int64_t pr = int64_t(r) * per + c;  // page-table row
      const int row0 = h.cu_q[std::size_t(pr)], nrows = h.cu_q[std::size_t(pr) + 1] - row0;
      ASSERT_EQ(m.nsa_extend_seq_lens_list[std::size_t(pr)], nrows);
      if (r >= live) {  // padding: rows see nothing
        EXPECT_EQ(h.cache[std::size_t(r)], 0);
        for (int t = 0; t < nrows; ++t) EXPECT_EQ(h.exp[std::size_t(row0 + t)], 0);
        continue;
      }
      const ReqShape want = request_shape(b, r, cfg.spec);
      ASSERT_EQ(h.cache[std::size_t(r)], want.kv);
      ASSERT_EQ(nrows, verify ? 1 : want.q);
      max_k = std::max(max_k, want.kv), max_q = std::max(max_q, nrows);
      for (int t = 0; t < nrows; ++t) {
        const int tq = verify ? c : t;  // the row's index among the request's queries
        const int seen = h.exp[std::size_t(row0 + t)];
        ASSERT_EQ(seen, want.kv - want.q + 1 + tq) << "row " << row0 + t << " keys seen";
      }
      for (int j = 0; j < want.kv; ++j)
        ASSERT_EQ(h.t1[std::size_t(pr * h.w1 + j)], expected_slot(b, pool, r, j)) << "page_table_1 key " << j;
      for (int k = 0; k * P < want.kv; ++k)
        ASSERT_EQ(h.tp[std::size_t(pr * h.wp + k)], expected_slot(b, pool, r, k * P) / P) << "real page " << k;
      if (!m.captured) {
        for (int64_t j = want.kv; j < h.w1; ++j) EXPECT_EQ(h.t1[std::size_t(pr * h.w1 + j)], 0);
      }
    }
  }
  const int live_rows = live == m.batch_size ? m.num_rows : h.cu_q[std::size_t(int64_t(live) * per)];
  for (int i = live_rows; i < m.num_rows; ++i) {  // graph tail rows: no keys
    EXPECT_EQ(h.exp[std::size_t(i)], 0) << "tail row " << i;
  }
  if (!m.captured) {
    EXPECT_EQ(m.max_seq_len_k, max_k);
    EXPECT_EQ(m.page_table_1.size(1), max_k);
    EXPECT_EQ(m.real_page_table.size(1), (max_k + P - 1) / P);
    // Idle: 1, as the seed's decode/idle branch (SEED_NOTES 18).
    EXPECT_EQ(m.max_seq_len_q, b.mode == ForwardMode::idle                                                     ? 1
                               : (b.mode == ForwardMode::extend && m.cu_seqlens_q.data == m.cu_seqlens_k.data) ? max_k
                                                                                                               : max_q);
    EXPECT_EQ(m.num_rows, h.cu_q.back());
  } else {
    EXPECT_GE(m.max_seq_len_k, max_k);
    EXPECT_GE(m.max_seq_len_q, max_q);
  }
}

// ---- Live contents, for "replay equals a fresh plan" --------------------------------------------

// Everything a kernel may read for the live requests: lengths, prefix sums, page-table cells that
// hold keys, local virtual batches with keys or rows.
inline std::vector<int32_t> live_contents(const DenseMetadata& m, int live, int P, Stream st = {}) {
  const HostDense h(m, st);
  std::vector<int32_t> v;
  for (int r = 0; r < live; ++r) {
    v.push_back(h.cache[std::size_t(r)]);
    v.push_back(h.cu_q[std::size_t(r) + 1]);
    v.push_back(h.cu_k[std::size_t(r) + 1]);
    for (int c = 0; c * P < h.cache[std::size_t(r)]; ++c) v.push_back(h.table[std::size_t(r) * h.table_w + c]);
  }
  if (m.has_local_attn) {
    const int total_rows = live ? h.cu_q[std::size_t(live)] : 0;
    for (int w = 0; w < m.local_attn_metadata.num_virtual_batches && h.lq[std::size_t(w)] < total_rows; ++w) {
      v.push_back(h.lq[std::size_t(w) + 1]);
      v.push_back(h.lk[std::size_t(w)]);
      for (int c = 0; c * P < h.lk[std::size_t(w)]; ++c) v.push_back(h.ltable[std::size_t(w) * h.ltable_w + c]);
    }
  }
  return v;
}

inline std::vector<int32_t> live_contents(const SparseMetadata& m, int live, int per_request_rows, Stream st = {}) {
  const HostSparse h(m, st);
  std::vector<int32_t> v;
  const int P = m.page_size;
  for (int r = 0; r < live; ++r) {
    v.push_back(h.cache[std::size_t(r)]);
    v.push_back(h.cu_k[std::size_t(r) + 1]);
    for (int c = 0; c < per_request_rows; ++c) {
      const int64_t pr = int64_t(r) * per_request_rows + c;
      v.push_back(h.cu_q[std::size_t(pr) + 1]);
      v.push_back(m.nsa_extend_seq_lens_list[std::size_t(pr)]);
      for (int j = 0; j < h.cache[std::size_t(r)]; ++j) v.push_back(h.t1[std::size_t(pr * h.w1 + j)]);
      for (int k = 0; k * P < h.cache[std::size_t(r)]; ++k) v.push_back(h.tp[std::size_t(pr * h.wp + k)]);
    }
  }
  const int live_rows = live ? h.cu_q[std::size_t(int64_t(live) * per_request_rows)] : 0;
  for (int i = 0; i < live_rows; ++i) {
    v.push_back(h.exp[std::size_t(i)]);
    v.push_back(h.nsa[std::size_t(i)]);
    v.push_back(h.ncu_k[std::size_t(i) + 1]);
  }
  return v;
}

}  // namespace attnserve::test
