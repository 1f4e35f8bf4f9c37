// Shared by the lightning-indexer tests: random fp8 queries/keys, an indexer-key pool behind a
// shuffled page table, and brute-force scores (fp64, plus a plain float32 loop for the tolerance rule).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "attnserve/cache_formats.h"
#include "common/test_util.h"

namespace attnserve::test {

constexpr int kIdxDim = IndexerKeyLayout::kDim;

// fp8 q [rows, n_heads, 128] (values ~ N(0, 2) rounded to e4m3, never all zero) and f32 weights.
inline HostTensor random_fp8_q(int64_t rows, int64_t n_heads, std::mt19937_64& g) {
  HostTensor q(DType::fp8_e4m3, {rows, n_heads, kIdxDim});
  std::normal_distribution<float> d(0.f, 2.f);
  for (int64_t i = 0; i < q.numel(); ++i) {
    float v = d(g);
    q.set(i, v == 0.f ? 0.5f : v);
  }
  return q;
}
inline HostTensor random_weights(int64_t rows, int64_t n_heads, std::mt19937_64& g) {
  HostTensor w(DType::f32, {rows, n_heads});
  fill_uniform(w, g, -0.2f, 0.2f);
  return w;
}

// Per-head q scales as quantize_fp8_groups makes them (powers of two), and weights with them folded in.
inline HostTensor random_q_scale(int64_t rows, int64_t n_heads, std::mt19937_64& g) {
  HostTensor s(DType::f32, {rows, n_heads});
  std::uniform_int_distribution<int> e(-12, 3);
  for (int64_t i = 0; i < s.numel(); ++i) s.ptr<float>()[i] = std::ldexp(1.f, e(g));
  return s;
}
inline HostTensor times(const HostTensor& w, const HostTensor& q_scale) {
  HostTensor out = w;
  const float* s = reinterpret_cast<const float*>(q_scale.bytes.data());
  for (int64_t i = 0; i < out.numel(); ++i) out.ptr<float>()[i] *= s[i];
  return out;
}

// One key quantized as the store does: 128 fp8 bytes and a power-of-two f32 scale.
struct QuantizedKey {
  uint8_t bytes[kIdxDim];
  float scale;
};
inline QuantizedKey random_key(std::mt19937_64& g) {
  std::normal_distribution<float> d(0.f, 1.f);
  std::uniform_real_distribution<float> mag(-2.f, 2.f);
  const float m = std::pow(10.f, mag(g));
  float v[kIdxDim], amax = 0.f;
  for (float& x : v) {
    x = d(g) * m;
    amax = std::fmax(amax, std::fabs(x));
  }
  QuantizedKey k;
  k.scale = fp8_pow2_scale(amax);
  for (int i = 0; i < kIdxDim; ++i) k.bytes[i] = to_fp8_e4m3(v[i] / k.scale).bits;
  return k;
}

// The indexer-key pool of a batch: request r's token j lives at page page_table[r, j / page_size].
// Pages are handed out in a shuffled order; every byte not holding a live key is a NaN code (0x7f)
// and every unused scale is NaN, so a wrong read shows as NaN.
struct IndexKeyPool {
  int page_size = 64;
  HostTensor pool;                              // u8 [num_pages, page_size * 132]
  HostTensor page_table;                        // i32 [b, max_pages]; unused entries poisoned
  std::vector<std::vector<QuantizedKey>> keys;  // keys[r][j]

  IndexKeyPool(const std::vector<int>& seqlens, int page_size_, int max_pages, std::mt19937_64& g)
      : page_size(page_size_) {
    const int64_t b = int64_t(seqlens.size());
    int64_t used = 0;
    for (int len : seqlens) used += (len + page_size - 1) / page_size;
    const int64_t num_pages = used + 3;  // a few never-used pages
    pool = HostTensor(DType::u8, {num_pages, int64_t(IndexerKeyLayout::bytes_per_page(page_size))});
    std::memset(pool.bytes.data(), 0x7f, pool.bytes.size());
    page_table = HostTensor(DType::i32, {b, max_pages});
    for (int64_t i = 0; i < page_table.numel(); ++i) page_table.ptr<int32_t>()[i] = 0x7f7f7f7f;
    std::vector<int32_t> order(static_cast<size_t>(num_pages));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), g);
    size_t next = 0;
    keys.resize(size_t(b));
    for (int64_t r = 0; r < b; ++r) {
      const int len = seqlens[size_t(r)];
      for (int p = 0; p < (len + page_size - 1) / page_size; ++p)
        page_table.ptr<int32_t>()[r * max_pages + p] = order[next++];
      for (int j = 0; j < len; ++j) {
        QuantizedKey k = random_key(g);
        const int64_t slot =
            int64_t(page_table.ptr<int32_t>()[r * max_pages + j / page_size]) * page_size + j % page_size;
        std::memcpy(pool.bytes.data() + IndexerKeyLayout::key_offset(slot, page_size), k.bytes, kIdxDim);
        std::memcpy(pool.bytes.data() + IndexerKeyLayout::scale_offset(slot, page_size), &k.scale, 4);
        keys[size_t(r)].push_back(k);
      }
    }
  }
  // Token slot of request r's key j (as page_table_1 holds it).
  int32_t slot(int64_t r, int64_t j) const {
    const auto* pt = reinterpret_cast<const int32_t*>(page_table.bytes.data());
    return int32_t(int64_t(pt[r * page_table.view.size(1) + j / page_size]) * page_size + j % page_size);
  }
};

// Every element of a tensor as float (decoded once, for the brute-force loops).
inline std::vector<float> to_floats(const HostTensor& t) {
  std::vector<float> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = t.get(i);
  return v;
}
inline std::vector<float> decode_key(const uint8_t* bytes) {
  std::vector<float> k(kIdxDim);
  for (int d = 0; d < kIdxDim; ++d) k[size_t(d)] = to_float(fp8_e4m3_t{bytes[d]});
  return k;
}

// Brute-force score of one (row, key), in T: sum_h relu(q[h,:] . k) * w[h] * k_scale.
// q_row: [n_heads * 128] decoded floats, w_row: [n_heads], k: [128] decoded floats.
template <typename T>
T reference_score(const float* q_row, const float* w_row, int64_t n_heads, const float* k, float k_scale) {
  T acc = 0;
  for (int64_t h = 0; h < n_heads; ++h) {
    T dot = 0;
    for (int d = 0; d < kIdxDim; ++d) dot += T(q_row[h * kIdxDim + d]) * T(k[d]);
    acc += std::max(dot, T(0)) * T(w_row[h]);
  }
  return acc * T(k_scale);
}

// Checks logits against the fp64 reference by the tolerance rule; -inf positions must match exactly,
// and no element may be left unwritten (the output was poisoned with NaN).
inline void expect_logits_match(const HostTensor& logits, const std::vector<double>& ref64,
                                const std::vector<double>& ref32) {
  std::vector<double> got = to_doubles(logits);
  for (size_t i = 0; i < got.size(); ++i) ASSERT_FALSE(std::isnan(got[i])) << "element " << i << " not written";
  const double err32 = rel_l2(ref32, ref64);
  const double err = rel_l2(got, ref64);
  EXPECT_LE(err, tolerance_by_rule(err32, DType::f32)) << "float32 reference error " << err32;
}

}  // namespace attnserve::test
