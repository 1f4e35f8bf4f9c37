// Internal: the one attention core behind the CPU paged attention and MLA (absorbed) oracles.
// A query row's score against key j is softmax_scale * sum over the score parts of q_part . k_part[j];
// paged attention has one part (q . k), MLA two (q_nope . c_kv + q_rope . k_rope) with the value being
// c_kv. Masking (causal bottom-right, window), softcap, FP8 descale and the softmax live only here.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attnserve/cache_formats.h"
#include "attnserve/ops/attention.h"
#include "cpu/attention_io.h"
#include "cpu/parallel.h"

namespace attnserve::cpu {

// A query part and the key part it is dotted with (same last dim).
struct ScorePart {
  TensorView q;  // [total_q, h_q, d_part]
  TensorView k;  // [num_pages, page_size, h_kv, d_part], often a slice of a cache's last dim
};

struct PagedAttentionProblem {
  ScorePart parts[2];
  int num_parts = 1;
  TensorView v;              // [num_pages, page_size, h_kv, d_v]
  TensorView page_table;     // [b, max_pages]
  TensorView cache_seqlens;  // [b]
  TensorView cu_seqlens_q;   // [b + 1]
  TensorView out;            // [total_q, h_q, d_v]
  TensorView lse;            // optional [total_q, h_q]
  TensorView q_descale;      // optional [b, h_kv] (an fp8 q: query = stored * descale)
  TensorView k_descale;      // optional [b, h_kv]
  TensorView v_descale;      // optional [b, h_kv]
  // MLA over an FP8-656 cache ([num_pages, page_size, 1, 656] u8, cache_formats.h): when set, each key is
  // the dequantized token (576 values: the parts' key views are unused) and its value the first d_v of them.
  TensorView fp8_mla_kv;
  float softmax_scale = 0.f;
  bool causal = true;
  int window_left = -1;
  int window_right = -1;
  float softcap = 0.f;
};

// Keys [lo, hi) seen by a query row at absolute position `pos` among k_len keys. Causality and
// the window each bound the keys from one side, so the visible set is always one interval.
struct KeyRange {
  int64_t lo = 0, hi = 0;
  bool empty() const { return hi <= lo; }
};
inline KeyRange visible_keys(int64_t pos, int64_t k_len, bool causal, int window_left, int window_right) {
  KeyRange r{0, k_len};
  if (causal) r.hi = std::min(r.hi, pos + 1);
  if (window_left >= 0) r.lo = std::max(r.lo, pos - window_left);
  if (window_right >= 0) r.hi = std::min(r.hi, pos + window_right + 1);
  return r;
}

namespace attention_detail {

constexpr int64_t kKeyBlock = 64;  // keys scored per online-softmax step (bounds scratch memory)

// The 656 bytes of token (page, slot) of an FP8-656 MLA cache.
inline const uint8_t* fp8_token(const PagedAttentionProblem& p, int64_t page, int64_t slot) {
  return static_cast<const uint8_t*>(p.fp8_mla_kv.data) + offset_of(p.fp8_mla_kv, page, slot, 0, 0);
}

// Dequantization factor of an fp8 cache for (request, kv head): stored = value / factor; 1 if absent.
template <typename T>
T descale_of(const TensorView& descale, int64_t req, int64_t kv_head) {
  if (descale.empty_view()) return T(1);
  return load_as<T>(descale.data, descale.dtype, offset_of(descale, req, kv_head));
}

// One work item: query row `row` of request `req` (absolute position `pos`), the h_q / h_kv query
// heads sharing KV head `kv_head`. Each key is loaded once and scored against all heads of the group.
template <typename T>
void attend_group(const PagedAttentionProblem& p, int64_t req, int64_t row, int64_t pos, int64_t k_len,
                  int64_t kv_head) {
  const int64_t h_q = p.out.size(1), h_kv = p.v.size(2), group = h_q / h_kv;
  const int64_t d_v = p.v.size(3), page_size = p.v.size(1);
  const int64_t head0 = kv_head * group;
  int64_t d_qk = 0;
  for (int i = 0; i < p.num_parts; ++i) d_qk += p.parts[i].q.size(2);

  const KeyRange keys = visible_keys(pos, k_len, p.causal, p.window_left, p.window_right);
  if (keys.empty()) {  // contract: a row that sees no key gives out = 0, lse = -inf
    for (int64_t h = 0; h < group; ++h) {
      for (int64_t c = 0; c < d_v; ++c) store_as<T>(p.out.data, p.out.dtype, offset_of(p.out, row, head0 + h, c), T(0));
      if (!p.lse.empty_view())
        store_as<T>(p.lse.data, p.lse.dtype, offset_of(p.lse, row, head0 + h), -std::numeric_limits<T>::infinity());
    }
    return;
  }

  // Queries of the group, parts concatenated and dequantized: q[h * d_qk + c].
  const T q_scale = descale_of<T>(p.q_descale, req, kv_head);
  std::vector<T> q(size_t(group * d_qk));
  for (int64_t h = 0; h < group; ++h) {
    int64_t col = 0;
    for (int i = 0; i < p.num_parts; ++i) {
      const TensorView& qp = p.parts[i].q;
      for (int64_t c = 0; c < qp.size(2); ++c)
        q[size_t(h * d_qk + col++)] = q_scale * load_as<T>(qp.data, qp.dtype, offset_of(qp, row, head0 + h, c));
    }
  }
  const T k_scale = descale_of<T>(p.k_descale, req, kv_head), v_scale = descale_of<T>(p.v_descale, req, kv_head);
  const T scale = T(p.softmax_scale), softcap = T(p.softcap);
  const T neg_inf = -std::numeric_limits<T>::infinity();

  std::vector<T> key(static_cast<size_t>(d_qk)), value(static_cast<size_t>(d_v));
  std::vector<T> prob(size_t(group * kKeyBlock));  // scores, then exp(score - running max)
  std::vector<T> acc(size_t(group * d_v), T(0)), run_max(size_t(group), neg_inf), run_sum(size_t(group), T(0));
  std::vector<int64_t> page(kKeyBlock), slot(kKeyBlock);
  const bool fp8 = !p.fp8_mla_kv.empty_view();
  std::vector<float> token(fp8 ? Fp8MlaLayout::kNope + Fp8MlaLayout::kRope : 0);  // one dequantized FP8-656 token

  for (int64_t j0 = keys.lo; j0 < keys.hi; j0 += kKeyBlock) {
    const int64_t n = std::min(kKeyBlock, keys.hi - j0);
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t j = j0 + jj;
      page[jj] = load_index_at(p.page_table, req, j / page_size);
      slot[jj] = j % page_size;
      if (fp8) {
        decode_fp8_mla_token(fp8_token(p, page[jj], slot[jj]), token.data());
        for (int64_t c = 0; c < d_qk; ++c) key[size_t(c)] = T(token[size_t(c)]);
      } else {
        int64_t col = 0;
        for (int i = 0; i < p.num_parts; ++i) {
          const TensorView& kp = p.parts[i].k;
          for (int64_t c = 0; c < kp.size(3); ++c)
            key[size_t(col++)] = k_scale * load_as<T>(kp.data, kp.dtype, offset_of(kp, page[jj], slot[jj], kv_head, c));
        }
      }
      for (int64_t h = 0; h < group; ++h) {
        T dot = 0;
        for (int64_t c = 0; c < d_qk; ++c) dot += q[size_t(h * d_qk + c)] * key[size_t(c)];
        T s = scale * dot;
        if (softcap > 0) s = softcap * std::tanh(s / softcap);
        prob[size_t(h * kKeyBlock + jj)] = s;
      }
    }
    // Online softmax: move each head's running max, rescale what was accumulated under the old one.
    for (int64_t h = 0; h < group; ++h) {
      T* s = &prob[size_t(h * kKeyBlock)];
      T new_max = run_max[size_t(h)];
      for (int64_t jj = 0; jj < n; ++jj) new_max = std::max(new_max, s[jj]);
      const T correction = std::exp(run_max[size_t(h)] - new_max);  // exp(-inf) = 0 on the first block
      run_sum[size_t(h)] *= correction;
      for (int64_t c = 0; c < d_v; ++c) acc[size_t(h * d_v + c)] *= correction;
      for (int64_t jj = 0; jj < n; ++jj) {
        s[jj] = std::exp(s[jj] - new_max);
        run_sum[size_t(h)] += s[jj];
      }
      run_max[size_t(h)] = new_max;
    }
    for (int64_t jj = 0; jj < n; ++jj) {
      if (fp8) {
        decode_fp8_mla_token(fp8_token(p, page[jj], slot[jj]), token.data());
        for (int64_t c = 0; c < d_v; ++c) value[size_t(c)] = T(token[size_t(c)]);
      } else {
        for (int64_t c = 0; c < d_v; ++c)
          value[size_t(c)] = v_scale * load_as<T>(p.v.data, p.v.dtype, offset_of(p.v, page[jj], slot[jj], kv_head, c));
      }
      for (int64_t h = 0; h < group; ++h) {
        const T w = prob[size_t(h * kKeyBlock + jj)];
        T* a = &acc[size_t(h * d_v)];
        for (int64_t c = 0; c < d_v; ++c) a[c] += w * value[size_t(c)];
      }
    }
  }

  for (int64_t h = 0; h < group; ++h) {
    const T inv = T(1) / run_sum[size_t(h)];
    for (int64_t c = 0; c < d_v; ++c)
      store_as<T>(p.out.data, p.out.dtype, offset_of(p.out, row, head0 + h, c), acc[size_t(h * d_v + c)] * inv);
    if (!p.lse.empty_view()) {
      const T lse = run_max[size_t(h)] + std::log(run_sum[size_t(h)]);
      store_as<T>(p.lse.data, p.lse.dtype, offset_of(p.lse, row, head0 + h), lse);
    }
  }
}

template <typename T>
void run_paged_attention_as(const PagedAttentionProblem& p) {
  const int64_t b = p.cache_seqlens.size(0), h_kv = p.v.size(2);
  if (b == 0) return;
  // Map each query row of the batch to its request; rows outside [cu[0], cu[b]) are never touched.
  const int64_t first_row = load_index_at(p.cu_seqlens_q, 0), end_row = load_index_at(p.cu_seqlens_q, b);
  std::vector<int32_t> request_of_row(size_t(end_row - first_row));
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t i = load_index_at(p.cu_seqlens_q, r); i < load_index_at(p.cu_seqlens_q, r + 1); ++i)
      request_of_row[size_t(i - first_row)] = int32_t(r);
  }
  parallel_for((end_row - first_row) * h_kv, [&](int64_t item) {
    const int64_t row = first_row + item / h_kv, kv_head = item % h_kv;
    const int64_t req = request_of_row[size_t(row - first_row)];
    const int64_t q_start = load_index_at(p.cu_seqlens_q, req);
    const int64_t q_len = load_index_at(p.cu_seqlens_q, req + 1) - q_start;
    const int64_t k_len = load_index_at(p.cache_seqlens, req);
    const int64_t pos = k_len - q_len + (row - q_start);  // causal aligned bottom-right
    attend_group<T>(p, req, row, pos, k_len, kv_head);
  });
}

}  // namespace attention_detail

// Runs a validated problem: float32 math, or double with fp64.
inline void run_paged_attention(const PagedAttentionProblem& p, bool fp64) {
  if (fp64) {
    attention_detail::run_paged_attention_as<double>(p);
  } else {
    attention_detail::run_paged_attention_as<float>(p);
  }
}

}  // namespace attnserve::cpu
