// CPU exact top-k of one row: radix select on an order-preserving uint32 key, O(len).
//
// Ordering (the contract the tests check):
//   * larger float ranks higher; -0.0 and +0.0 are equal; -inf ranks below every finite value;
//   * NaN ranks below -inf (lowest of all); every position in [0, len) is a candidate whatever its score;
//   * equal keys: the lower position wins.
// The selected positions come out in ascending order.
//
// Cost: two passes over the row (a histogram of the top 11 key bits, then one pass that keeps every
// position above the threshold's bin and collects the bin's members), then work on the bin's members only
// (two more 11/10-bit digits), then a merge of k positions. No candidate is ever dropped: the bin's members
// are kept in full, however many share it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "attnserve/numeric.h"

namespace attnserve::cpu {

// Monotone map float -> uint32 (larger float => larger key), NaN -> 0 (below -inf, whose key is 0x007fffff).
// Branch-free: the sign of random scores would defeat a branch predictor.
inline uint32_t topk_key(float f) {
  const uint32_t u = f32_bits(f + 0.0f);                           // -0 + 0 = +0, so -0 == +0
  const uint32_t flip = uint32_t(int32_t(u) >> 31) | 0x80000000u;  // negative: all bits; else the sign bit
  return (u & 0x7fffffffu) > 0x7f800000u ? 0u : u ^ flip;          // NaN -> 0
}

// Per-thread scratch of the selection.
struct TopkScratch {
  std::vector<int32_t> cand;      // members of the threshold bin, ascending
  std::vector<int32_t> selected;  // the answer, ascending (k entries)
  std::vector<int32_t> merged;
};

namespace topk_detail {

struct Digit {
  int shift;
  uint32_t mask;
};
constexpr Digit kDigits[3] = {{21, 0x7ffu}, {10, 0x7ffu}, {0, 0x3ffu}};  // 11 + 11 + 10 key bits

// The digit holding the need-th largest element of the histogram; subtracts the count above it from need.
inline uint32_t threshold_digit(const uint32_t* hist, uint32_t mask, int64_t& need) {
  int64_t above = 0;
  uint32_t d = mask;
  for (; d > 0; --d) {
    if (above + int64_t(hist[d]) >= need) break;
    above += hist[d];
  }
  need -= above;
  return d;
}

// Merges the sorted runs [0, b1), [b1, b2), [b2, end) of v (positions are distinct).
inline void merge_runs(std::vector<int32_t>& v, size_t b1, size_t b2, std::vector<int32_t>& tmp) {
  tmp.resize(v.size());
  auto mid = std::merge(v.begin(), v.begin() + long(b1), v.begin() + long(b1), v.begin() + long(b2), tmp.begin());
  std::merge(tmp.begin(), mid, v.begin() + long(b2), v.end(), v.begin());
}

}  // namespace topk_detail

// Fills scratch.selected with the k selected positions of s[0, n), ascending; requires n > k >= 1.
inline void topk_select_row(const float* s, int64_t n, int64_t k, TopkScratch& scratch) {
  using topk_detail::kDigits;
  std::vector<int32_t>& sel = scratch.selected;
  std::vector<int32_t>& cand = scratch.cand;
  sel.clear();
  sel.reserve(size_t(k));
  uint32_t hist[1 << 11];

  // Digit 0 over the whole row.
  std::fill(hist, hist + kDigits[0].mask + 1, 0u);
  for (int64_t j = 0; j < n; ++j) ++hist[topk_key(s[j]) >> kDigits[0].shift];
  int64_t need = k;
  const uint32_t d0 = topk_detail::threshold_digit(hist, kDigits[0].mask, need);
  if (int64_t(hist[d0]) == need) {  // the whole bin is taken
    for (int64_t j = 0; j < n; ++j)
      if ((topk_key(s[j]) >> kDigits[0].shift) >= d0) sel.push_back(int32_t(j));
    return;
  }
  cand.resize(hist[d0]);
  int64_t num_cand = 0;
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t b = topk_key(s[j]) >> kDigits[0].shift;
    if (b > d0) sel.push_back(int32_t(j));
    else if (b == d0) cand[size_t(num_cand++)] = int32_t(j);
  }
  const size_t run1 = sel.size();
  size_t run2 = run1;

  // Digits 1 and 2 over the bin's members only.
  for (int lv = 1; lv < 3; ++lv) {
    const int sh = kDigits[lv].shift;
    const uint32_t mask = kDigits[lv].mask;
    auto digit = [&](int32_t j) { return (topk_key(s[j]) >> sh) & mask; };
    std::fill(hist, hist + mask + 1, 0u);
    for (int64_t c = 0; c < num_cand; ++c) ++hist[digit(cand[size_t(c)])];
    const uint32_t d = topk_detail::threshold_digit(hist, mask, need);
    if (int64_t(hist[d]) == need || lv == 2) {
      // Final: everything above d, plus the lowest-position `need` members at d (all equal keys at lv 2).
      if (lv == 1) run2 = sel.size();
      for (int64_t c = 0; c < num_cand; ++c) {
        const int32_t j = cand[size_t(c)];
        const uint32_t x = digit(j);
        if (x > d) {
          sel.push_back(j);
        } else if (x == d && need > 0) {
          sel.push_back(j);
          --need;
        }
      }
      break;
    }
    if (int64_t(hist[d]) == num_cand)
      continue;  // all members share this digit (e.g. equal scores): nothing to sort out
    // Members above d are in; members at d go on to the next digit.
    int64_t kept = 0;
    for (int64_t c = 0; c < num_cand; ++c) {
      const int32_t j = cand[size_t(c)];
      const uint32_t x = digit(j);
      if (x > d) sel.push_back(j);
      else if (x == d) cand[size_t(kept++)] = j;
    }
    num_cand = kept;
    run2 = sel.size();
  }
  topk_detail::merge_runs(sel, run1, run2, scratch.merged);
}

}  // namespace attnserve::cpu
