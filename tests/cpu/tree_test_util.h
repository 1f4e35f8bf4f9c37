// Draft-tree tests (CPU and GPU): tree shapes, a request -> slot table, and the brute-force reference
// of tree verify / tree draft decode (one softmax per query row over the prefix and the draft keys it
// sees, in double).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "attnserve/backend.h"
#include "common/test_util.h"
#include "cpu/attention_cases.h"  // fill_view

namespace attnserve::test {

// ---- Tree shapes (parent indices, -1 = root; parents precede children unless shuffled).
inline std::vector<int32_t> chain_tree(int n) {
  std::vector<int32_t> p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) p[std::size_t(i)] = i - 1;
  return p;
}
inline std::vector<int32_t> star_tree(int n) {
  std::vector<int32_t> p(static_cast<std::size_t>(n), 0);
  if (n > 0) p[0] = -1;
  return p;
}
inline std::vector<int32_t> kary_tree(int n, int k) {  // breadth-first full k-ary tree
  std::vector<int32_t> p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) p[std::size_t(i)] = i == 0 ? -1 : (i - 1) / k;
  return p;
}
inline std::vector<int32_t> random_tree(int n, std::mt19937_64& g) {
  std::vector<int32_t> p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    p[std::size_t(i)] = i == 0 ? -1 : int32_t(std::uniform_int_distribution<int>(0, i - 1)(g));
  return p;
}
// Relabels the tokens of a tree by a random permutation that keeps token 0 (parents no longer precede).
inline std::vector<int32_t> shuffled_tree(const std::vector<int32_t>& p, std::mt19937_64& g) {
  const int n = int(p.size());
  std::vector<int32_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin() + 1, perm.end(), g);
  std::vector<int32_t> q(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    q[std::size_t(perm[std::size_t(i)])] = p[std::size_t(i)] < 0 ? -1 : perm[std::size_t(p[std::size_t(i)])];
  return q;
}
// Ancestor bits (itself included) of every token.
inline std::vector<int64_t> ancestor_masks(const std::vector<int32_t>& p) {
  std::vector<int64_t> m(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    uint64_t bits = 0;
    for (int j = int(i); j >= 0; j = p[std::size_t(j)]) bits |= uint64_t(1) << j;
    m[i] = int64_t(bits);
  }
  return m;
}
inline int depth_of(const std::vector<int32_t>& p, int i) {
  int d = 0;
  for (int j = p[std::size_t(i)]; j >= 0; j = p[std::size_t(j)]) ++d;
  return d;
}

// ---- A CPU MHA setup: f32 caches, a request -> slot table whose slots are page-aligned
// (slot % page == position % page) and unique across requests.
struct TreeSetup {
  int bs = 0, n = 0, page = 1, max_ctx = 0, h_q = 4, h_kv = 2, d = 64, dv = 64;
  std::vector<int32_t> seq_lens, pool_rows;
  HostTensor table;  // [bs, max_ctx]
  HostTensor k, v;   // [num_slots, h_kv, d | dv] f32
  int64_t num_slots = 0;

  TreeSetup(std::vector<int32_t> seqs, int n_, int page_, int max_ctx_, std::mt19937_64& g, int hq = 4, int hkv = 2,
            int dd = 64, int ddv = 64, DType kv_dtype = DType::f32)
      : bs(int(seqs.size())),
        n(n_),
        page(page_),
        max_ctx(max_ctx_),
        h_q(hq),
        h_kv(hkv),
        d(dd),
        dv(ddv),
        seq_lens(std::move(seqs)) {
    const int pages_per_row = (max_ctx + page - 1) / page;
    num_slots = int64_t(bs * pages_per_row + 1) * page;  // page 0 unused
    std::vector<int32_t> pages(std::size_t(bs * pages_per_row));
    std::iota(pages.begin(), pages.end(), 1);
    std::shuffle(pages.begin(), pages.end(), g);
    table = HostTensor(DType::i32, {bs, max_ctx});
    for (int r = 0; r < bs; ++r) {
      pool_rows.push_back(int32_t(bs - 1 - r));  // rows out of order
      for (int j = 0; j < max_ctx; ++j)
        table.ptr<int32_t>()[int64_t(pool_rows[std::size_t(r)]) * max_ctx + j] =
            pages[std::size_t(r * pages_per_row + j / page)] * page + j % page;
    }
    k = HostTensor(kv_dtype, {num_slots, h_kv, d});
    v = HostTensor(kv_dtype, {num_slots, h_kv, dv});
    fill_view(k.view, g, 1.5);
    fill_view(v.view, g, 1.0);
  }
  int32_t slot(int r, int pos) const {
    return reinterpret_cast<const int32_t*>(table.bytes.data())[int64_t(pool_rows[std::size_t(r)]) * max_ctx + pos];
  }
  // The brute-force output of query row `row` (q [rows, h_q, d]) over the given key slots.
  void reference_row(const HostTensor& q, int64_t row, const std::vector<int32_t>& slots, float scale, float softcap,
                     std::vector<double>& out) const {
    const int group = h_q / h_kv;
    for (int h = 0; h < h_q; ++h) {
      const int hk = h / group;
      std::vector<double> s(slots.size());
      double m = -INFINITY;
      for (std::size_t j = 0; j < slots.size(); ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c)
          dot += double(q.get((row * h_q + h) * d + c)) * k.get((int64_t(slots[j]) * h_kv + hk) * d + c);
        double x = scale * dot;
        if (softcap > 0) x = softcap * std::tanh(x / softcap);
        s[j] = x;
        m = std::max(m, x);
      }
      double total = 0;
      std::vector<double> acc(std::size_t(dv), 0.0);
      for (std::size_t j = 0; j < slots.size(); ++j) {
        const double w = std::exp(s[j] - m);
        total += w;
        for (int c = 0; c < dv; ++c) acc[std::size_t(c)] += w * v.get((int64_t(slots[j]) * h_kv + hk) * dv + c);
      }
      for (int c = 0; c < dv; ++c) out.push_back(slots.empty() ? 0.0 : acc[std::size_t(c)] / total);
    }
  }

  DenseBackendConfig backend_config(const SpeculativeConfig& spec, int max_bs = 0) const {
    DenseBackendConfig c;
    c.arch = AttentionArch::mha;
    c.num_q_heads = h_q, c.num_kv_heads = h_kv, c.head_dim = d, c.v_head_dim = dv;
    c.kv_dtype = k.view.dtype;
    c.softmax_scale = 1.f / std::sqrt(float(d));
    c.page_size = page;
    c.spec = spec;
    const int mb = std::max(max_bs, bs);
    c.capacity = {.max_bs = mb,
                  .max_num_tokens = mb * std::max({1, spec.draft_token_num, spec.topk}),
                  .max_context_len = max_ctx};
    c.device = Device::cpu();
    c.req_to_token = table.view;
    c.kv_buffers = {KvLayerBuffers{.k = k.view, .v = v.view}};
    return c;
  }
  // Random parents for every request: [bs * n].
  std::vector<int32_t> random_parents(std::mt19937_64& g) const {
    std::vector<int32_t> all;
    for (int r = 0; r < bs; ++r) {
      const auto p = (r % 2) ? shuffled_tree(random_tree(n, g), g) : random_tree(n, g);
      all.insert(all.end(), p.begin(), p.end());
    }
    return all;
  }
  BatchSpec verify_batch(const std::vector<int32_t>& parents) const {  // parents: [bs * n]
    BatchSpec b;
    b.mode = ForwardMode::target_verify;
    b.seq_lens = seq_lens;
    b.req_pool_indices = pool_rows;
    b.tree_parents = parents;
    return b;
  }
};

}  // namespace attnserve::test
