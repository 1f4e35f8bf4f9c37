// Brute-force references for dense paged attention, MLA (absorbed) and merging of attention states.
// Direct loops over every key with the mask written exactly as the contract states it, in T: double
// for the reference, float for the "same-precision reference" of the tolerance rule (DESIGN.md).
// Shares no code with the CPU oracle; other tests may include it.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "attnserve/numeric.h"
#include "attnserve/ops/attention.h"

namespace attnserve::test {

// Element `offset` of a view's data, exactly (f64 is not rounded through float).
inline double ref_read(const TensorView& t, int64_t offset) {
  switch (t.dtype) {
    case DType::f64: return static_cast<const double*>(t.data)[offset];
    case DType::f32: return static_cast<const float*>(t.data)[offset];
    case DType::bf16: return to_float(static_cast<const bf16_t*>(t.data)[offset]);
    case DType::f16: return to_float(static_cast<const f16_t*>(t.data)[offset]);
    case DType::fp8_e4m3: return to_float(static_cast<const fp8_e4m3_t*>(t.data)[offset]);
    case DType::i32: return static_cast<const int32_t*>(t.data)[offset];
    case DType::i64: return double(static_cast<const int64_t*>(t.data)[offset]);
    case DType::u8: return static_cast<const uint8_t*>(t.data)[offset];
  }
  return NAN;
}
inline double ref_at(const TensorView& t, int64_t i0) { return ref_read(t, i0 * t.strides[0]); }
inline double ref_at(const TensorView& t, int64_t i0, int64_t i1) {
  return ref_read(t, i0 * t.strides[0] + i1 * t.strides[1]);
}
inline double ref_at(const TensorView& t, int64_t i0, int64_t i1, int64_t i2) {
  return ref_read(t, i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2]);
}
inline double ref_at(const TensorView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return ref_read(t, i0 * t.strides[0] + i1 * t.strides[1] + i2 * t.strides[2] + i3 * t.strides[3]);
}

// out [total_q, h_q, d_v] and lse [total_q, h_q], row-major; rows outside the batch hold NaN.
struct ReferenceAttention {
  std::vector<double> out, lse;
  std::vector<bool> row_in_batch;  // [total_q]
};

struct ReferenceMask {
  bool causal = true;
  int window_left = -1, window_right = -1;
  // Query row i of q_len rows, key j of k_len keys: the header's rule, verbatim.
  bool visible(int64_t i, int64_t q_len, int64_t k_len, int64_t j) const {
    const int64_t p = k_len - q_len + i;
    return (!causal || j <= p) && (window_left < 0 || j >= p - window_left) &&
           (window_right < 0 || j <= p + window_right);
  }
};

// The generic brute force: score(req, row, head, j) is the unscaled logit, value(req, head, j, c) the value.
template <typename T>
ReferenceAttention reference_attention_rows(const TensorView& cu_seqlens_q, const TensorView& cache_seqlens,
                                            int64_t total_q, int64_t h_q, int64_t d_v, const ReferenceMask& mask,
                                            double softmax_scale, double softcap,
                                            const std::function<T(int64_t, int64_t, int64_t, int64_t)>& score,
                                            const std::function<T(int64_t, int64_t, int64_t, int64_t)>& value) {
  ReferenceAttention r;
  r.out.assign(size_t(total_q * h_q * d_v), NAN);
  r.lse.assign(size_t(total_q * h_q), NAN);
  r.row_in_batch.assign(size_t(total_q), false);
  const int64_t b = cache_seqlens.size(0);
  for (int64_t req = 0; req < b; ++req) {
    const int64_t q0 = int64_t(ref_at(cu_seqlens_q, req)), q_len = int64_t(ref_at(cu_seqlens_q, req + 1)) - q0;
    const int64_t k_len = int64_t(ref_at(cache_seqlens, req));
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t row = q0 + i;
      r.row_in_batch[size_t(row)] = true;
      for (int64_t h = 0; h < h_q; ++h) {
        std::vector<int64_t> keys;
        std::vector<T> s;
        for (int64_t j = 0; j < k_len; ++j) {
          if (!mask.visible(i, q_len, k_len, j)) continue;
          T x = T(softmax_scale) * score(req, row, h, j);
          if (softcap > 0) x = T(softcap) * std::tanh(x / T(softcap));
          keys.push_back(j);
          s.push_back(x);
        }
        double* o = &r.out[size_t((row * h_q + h) * d_v)];
        if (keys.empty()) {
          for (int64_t c = 0; c < d_v; ++c) o[c] = 0;
          r.lse[size_t(row * h_q + h)] = -INFINITY;
          continue;
        }
        T m = s[0];
        for (T x : s) m = std::max(m, x);
        T sum = 0;
        for (T& x : s) sum += (x = std::exp(x - m));
        for (int64_t c = 0; c < d_v; ++c) {
          T acc = 0;
          for (size_t k = 0; k < keys.size(); ++k) acc += s[k] * value(req, h, keys[k], c);
          o[c] = double(acc / sum);
        }
        r.lse[size_t(row * h_q + h)] = double(m + std::log(sum));
      }
    }
  }
  return r;
}

template <typename T>
ReferenceAttention reference_paged_attention(const PagedAttentionArgs& a) {
  const int64_t h_q = a.q.size(1), h_kv = a.k_cache.size(2), d = a.q.size(2), d_v = a.v_cache.size(3);
  const int64_t page_size = a.k_cache.size(1), group = h_q / h_kv;
  auto descale = [](const TensorView& t, int64_t req, int64_t kvh) {
    return t.empty_view() ? T(1) : T(ref_at(t, req, kvh));
  };
  auto score = [&](int64_t req, int64_t row, int64_t h, int64_t j) {
    const int64_t page = int64_t(ref_at(a.page_table, req, j / page_size)), kvh = h / group;
    const T ks = descale(a.k_descale, req, kvh);
    T dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += T(ref_at(a.q, row, h, c)) * (ks * T(ref_at(a.k_cache, page, j % page_size, kvh, c)));
    return dot;
  };
  auto value = [&](int64_t req, int64_t h, int64_t j, int64_t c) {
    const int64_t page = int64_t(ref_at(a.page_table, req, j / page_size)), kvh = h / group;
    return descale(a.v_descale, req, kvh) * T(ref_at(a.v_cache, page, j % page_size, kvh, c));
  };
  return reference_attention_rows<T>(a.cu_seqlens_q, a.cache_seqlens, a.q.size(0), h_q, d_v,
                                     {a.causal, a.window_left, a.window_right}, a.softmax_scale, a.softcap, score,
                                     value);
}

template <typename T>
ReferenceAttention reference_mla_attention(const MlaAttentionArgs& a) {
  const int64_t h_q = a.q_nope.size(1), d_v = a.q_nope.size(2), d_rope = a.q_rope.size(2);
  const int64_t page_size = a.kv_cache.size(1);
  auto score = [&](int64_t req, int64_t row, int64_t h, int64_t j) {
    const int64_t page = int64_t(ref_at(a.page_table, req, j / page_size)), slot = j % page_size;
    T nope = 0, rope = 0;
    for (int64_t c = 0; c < d_v; ++c) nope += T(ref_at(a.q_nope, row, h, c)) * T(ref_at(a.kv_cache, page, slot, 0, c));
    for (int64_t c = 0; c < d_rope; ++c)
      rope += T(ref_at(a.q_rope, row, h, c)) * T(ref_at(a.kv_cache, page, slot, 0, d_v + c));
    return nope + rope;
  };
  auto value = [&](int64_t req, int64_t, int64_t j, int64_t c) {
    const int64_t page = int64_t(ref_at(a.page_table, req, j / page_size));
    return T(ref_at(a.kv_cache, page, j % page_size, 0, c));
  };
  return reference_attention_rows<T>(a.cu_seqlens_q, a.cache_seqlens, a.q_nope.size(0), h_q, d_v,
                                     {a.causal, a.window_left, a.window_right}, a.softmax_scale, a.softcap, score,
                                     value);
}

// Merge of n partial states of one (token, head) in double: parts with s = -inf are left out.
inline void reference_merge(const std::vector<std::vector<double>>& v, const std::vector<double>& s,
                            std::vector<double>& v_out, double& s_out) {
  const size_t d = v.empty() ? v_out.size() : v[0].size();
  v_out.assign(d, 0.0);
  double m = -INFINITY;
  for (double x : s) m = std::max(m, x);
  if (m == -INFINITY) {
    s_out = -INFINITY;
    return;
  }
  double sum = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -INFINITY) continue;
    const double w = std::exp(s[i] - m);
    sum += w;
    for (size_t c = 0; c < d; ++c) v_out[c] += w * v[i][c];
  }
  for (double& x : v_out) x /= sum;
  s_out = m + std::log(sum);
}

}  // namespace attnserve::test
