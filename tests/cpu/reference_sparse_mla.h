// Brute-force reference for sparse MLA, straight from the contract (include/attnserve/ops/sparse_mla.h):
// per row and head, walk the row's first n slots, skip invalid ones, score every valid key, softmax,
// weighted sum. Computes in T (double for the fp64 reference, float for the same-precision one that
// the tolerance rule compares against). Keys come from decode_fp8_mla_token / to_float(bf16).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "attnserve/cache_formats.h"
#include "attnserve/ops/sparse_mla.h"
#include "cpu/load.h"

namespace attnserve::test {

struct SparseMlaReference {
  std::vector<double> out;         // [rows, h_q, 512]
  std::vector<double> lse;         // [rows, h_q]
  std::vector<double> max_logits;  // [rows, h_q]
};

// The whole pool as floats, [num_slots, 576].
inline std::vector<float> decode_mla_pool(const TensorView& kv) {
  const int64_t slots = kv.size(0);
  std::vector<float> keys(size_t(slots * 576));
  for (int64_t s = 0; s < slots; ++s) {
    float* dst = keys.data() + s * 576;
    if (kv.dtype == DType::u8) {
      decode_fp8_mla_token(kv.ptr<const uint8_t>() + s * kv.strides[0], dst);
    } else {
      for (int d = 0; d < 576; ++d) dst[d] = to_float(kv.ptr<const bf16_t>()[s * kv.strides[0] + d]);
    }
  }
  return keys;
}

template <typename T>
T reference_load(const TensorView& t, int64_t offset) {
  if (t.dtype == DType::f64) return T(t.ptr<const double>()[offset]);
  return T(cpu::load_as_float(t.data, t.dtype, offset));
}

template <typename T>
SparseMlaReference reference_sparse_mla(const SparseMlaArgs& a) {
  const int64_t rows = a.q.size(0), h_q = a.q.size(1), topk = a.indices.size(1), num_slots = a.kv.size(0);
  const std::vector<float> pool = decode_mla_pool(a.kv);
  SparseMlaReference ref;
  ref.out.assign(size_t(rows * h_q * 512), 0.0);
  ref.lse.assign(size_t(rows * h_q), -INFINITY);
  ref.max_logits.assign(size_t(rows * h_q), -INFINITY);

  for (int64_t r = 0; r < rows; ++r) {
    int64_t n = topk;
    if (!a.topk_length.empty_view()) n = a.topk_length.ptr<const int32_t>()[r * a.topk_length.strides[0]];
    std::vector<int64_t> keys;  // valid slots, in order, duplicates kept
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = a.indices.ptr<const int32_t>()[r * a.indices.strides[0] + i * a.indices.strides[1]];
      if (slot >= 0 && slot < num_slots) keys.push_back(slot);
    }
    if (keys.empty()) continue;  // zeros, -inf, -inf

    for (int64_t h = 0; h < h_q; ++h) {
      std::vector<T> scores;
      for (int64_t slot : keys) {
        T dot = 0;
        for (int64_t d = 0; d < 576; ++d) {
          dot += reference_load<T>(a.q, r * a.q.strides[0] + h * a.q.strides[1] + d) * T(pool[size_t(slot * 576 + d)]);
        }
        scores.push_back(T(a.softmax_scale) * dot);
      }
      T m = scores[0];
      for (T s : scores) m = s > m ? s : m;
      std::vector<T> weights;  // exp(s_j - m)
      T l = 0;
      for (T s : scores) {
        weights.push_back(std::exp(s - m));
        l += weights.back();
      }
      T denom = l;
      if (!a.attn_sink.empty_view())
        denom += std::exp(T(a.attn_sink.ptr<const float>()[h * a.attn_sink.strides[0]]) - m);
      for (int64_t d = 0; d < 512; ++d) {
        T sum = 0;
        for (size_t j = 0; j < keys.size(); ++j) sum += weights[j] * T(pool[size_t(keys[j] * 576 + d)]);
        ref.out[size_t((r * h_q + h) * 512 + d)] = double(sum / denom);
      }
      ref.lse[size_t(r * h_q + h)] = double(m + std::log(l));
      ref.max_logits[size_t(r * h_q + h)] = double(m);
    }
  }
  return ref;
}

}  // namespace attnserve::test
