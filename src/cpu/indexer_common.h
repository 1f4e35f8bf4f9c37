// CPU lightning-indexer helpers: fp8 decoding through a 256-entry table, and the score of one
// (query row, key) pair: sum_h relu(q[h,:] . k) * w[h], fp32 accumulation (k_scale applied by the caller).
#pragma once
#include <array>
#include <cstdint>

#include "attnserve/numeric.h"

namespace attnserve::cpu {

constexpr int kIndexDim = 128;

// fp8 e4m3 bits -> float, for every code (0x7f / 0xff decode to NaN).
inline const std::array<float, 256>& fp8_e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int b = 0; b < 256; ++b) t[size_t(b)] = to_float(fp8_e4m3_t{uint8_t(b)});
    return t;
  }();
  return table;
}

inline void decode_fp8_row(const uint8_t* src, int n, float* dst) {
  const auto& table = fp8_e4m3_table();
  for (int i = 0; i < n; ++i) dst[i] = table[src[i]];
}

// q: [n_heads, 128] decoded floats (contiguous); k: [128]; w: [n_heads].
// relu keeps NaN (x < 0 ? 0 : x), so a NaN input shows in the output instead of vanishing.
inline float index_score(const float* q, const float* w, int n_heads, const float* k) {
  float acc = 0.f;
  for (int h = 0; h < n_heads; ++h) {
    const float* qh = q + h * kIndexDim;
    // 8 fixed partial sums: a deterministic order the compiler can vectorize.
    float part[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int d = 0; d < kIndexDim; d += 8)
      for (int l = 0; l < 8; ++l) part[l] += qh[d + l] * k[d + l];
    const float dot = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    acc += (dot < 0.f ? 0.f : dot) * w[h];
  }
  return acc;
}

}  // namespace attnserve::cpu
