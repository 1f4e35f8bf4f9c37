// Brute-force top-k for the tests, and the row check (len <= topk: exact list; otherwise the set).
// Ranking (the documented contract): larger score first; -0 == +0; NaN below -inf; ties -> lower position.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "common/test_util.h"

namespace attnserve::test {

inline bool topk_ranks_before(float va, int64_t a, float vb, int64_t b) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na != nb) return nb;      // the non-NaN one ranks first
  if (!na && va != vb) return va > vb;
  return a < b;
}

// The selected positions (ascending) of s[0, len).
inline std::vector<int64_t> reference_topk(const float* s, int64_t len, int64_t k) {
  std::vector<int64_t> idx(static_cast<size_t>(len));
  std::iota(idx.begin(), idx.end(), 0);
  if (len > k) {
    auto before = [&](int64_t a, int64_t b) { return topk_ranks_before(s[a], a, s[b], b); };
    std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
    idx.resize(size_t(k));
    std::sort(idx.begin(), idx.end());
  }
  return idx;
}

// Int poison that is not a legal output (-1 is the padding value, so 0xff bytes would hide a gap).
inline void poison_i32(HostTensor& t) { std::memset(t.bytes.data(), 0x7f, t.bytes.size()); }

// One output row against the expected values (already transformed), k entries long.
inline void expect_topk_row(const int32_t* out, int64_t k, int64_t len, std::vector<int32_t> expected, int64_t row) {
  std::vector<int32_t> got(out, out + k);
  if (len <= k) {
    for (int64_t c = 0; c < k; ++c)
      ASSERT_EQ(got[size_t(c)], c < len ? expected[size_t(c)] : -1) << "row " << row << " column " << c;
    return;
  }
  std::sort(got.begin(), got.end());
  std::sort(expected.begin(), expected.end());
  ASSERT_EQ(got.size(), expected.size());
  int64_t mismatches = 0, first = -1;
  for (size_t c = 0; c < got.size(); ++c)
    if (got[c] != expected[c]) {
      if (first < 0) first = int64_t(c);
      ++mismatches;
    }
  ASSERT_EQ(mismatches, 0) << "row " << row << " (len " << len << ", k " << k << "): first sorted mismatch at "
                           << first << ": got " << got[size_t(first)] << ", expected " << expected[size_t(first)];
}

}  // namespace attnserve::test
