// CPU exact top-k of one row: radix select on an order-preserving uint32 key, O(len).
//
// Ordering (documented in the report and the tests):
//   * larger float ranks higher; -0.0 and +0.0 are equal; -inf ranks below every finite value;
//   * NaN ranks below -inf (lowest of all); every position in [0, len) is a candidate whatever its score;
//   * equal keys: the lower position wins.
// The selected positions are emitted in ascending position order.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "attnserve/numeric.h"

namespace attnserve::cpu {

// Monotone map float -> uint32 (larger float => larger key), NaN -> 0 (below -inf, whose key is 0x007fffff).
inline uint32_t topk_key(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0u;  // NaN
  if (u == 0x80000000u) u = 0u;                   // -0 == +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Calls emit(j) for the k selected positions j of s[0, n), ascending; requires n > k >= 1.
// `cand` is scratch (grows to at most n entries).
template <typename Emit>
void topk_select_row(const float* s, int64_t n, int64_t k, std::vector<int32_t>& cand, Emit&& emit) {
  struct Level { int shift, bits; };
  static constexpr Level kLevels[3] = {{21, 11}, {10, 11}, {0, 10}};  // 11 + 11 + 10 = 32 key bits
  uint32_t hist[1 << 11];
  uint32_t prefix = 0;  // the threshold's top (32 - shift) key bits, chosen digit by digit
  int shift = 32;
  int64_t need = k;     // how many to take among the positions whose top bits equal `prefix`
  int64_t num_cand = 0; // positions sharing the current prefix (level >= 1), held in cand
  for (int lv = 0; lv < 3; ++lv) {
    const int sh = kLevels[lv].shift;
    const uint32_t mask = (1u << kLevels[lv].bits) - 1u;
    std::fill(hist, hist + mask + 1, 0u);
    if (lv == 0) {
      for (int64_t j = 0; j < n; ++j) ++hist[topk_key(s[j]) >> sh];
    } else {
      for (int64_t c = 0; c < num_cand; ++c) ++hist[(topk_key(s[cand[size_t(c)]]) >> sh) & mask];
    }
    // Walk the digits from the top until the bin that holds the need-th largest.
    int64_t above = 0;
    uint32_t d = mask;
    for (; d > 0; --d) {
      if (above + int64_t(hist[d]) >= need) break;
      above += hist[d];
    }
    need -= above;
    prefix = (prefix << kLevels[lv].bits) | d;
    shift = sh;
    if (int64_t(hist[d]) == need || lv == 2) break;  // the whole bin is taken, or the key is fully resolved
    // Keep only the positions in the threshold bin for the next digit.
    if (lv == 0) {
      cand.resize(hist[d]);
      int64_t c = 0;
      for (int64_t j = 0; j < n; ++j)
        if ((topk_key(s[j]) >> sh) == d) cand[size_t(c++)] = int32_t(j);
      num_cand = c;
    } else {
      int64_t kept = 0;
      for (int64_t c = 0; c < num_cand; ++c) {
        const int32_t j = cand[size_t(c)];
        if (((topk_key(s[j]) >> sh) & mask) == d) cand[size_t(kept++)] = j;
      }
      num_cand = kept;
    }
  }
  // Everything strictly above the threshold prefix, plus the lowest-position `need` at it.
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t p = topk_key(s[j]) >> shift;
    if (p > prefix) {
      emit(j);
    } else if (p == prefix && need > 0) {
      emit(j);
      --need;
    }
  }
}

}  // namespace attnserve::cpu
