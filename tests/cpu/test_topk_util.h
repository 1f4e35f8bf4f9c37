// Shared by the top-k tests: brute-force top-k, the row check (len <= topk: exact list; otherwise the
// set), and a problem holder that runs the op and checks every row.
// Ranking (the documented contract): larger score first; -0 == +0; NaN below -inf; ties -> lower position.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "attnserve/ops/topk.h"
#include "common/test_util.h"

namespace attnserve::test {

inline bool topk_ranks_before(float va, int64_t a, float vb, int64_t b) {
  const bool na = std::isnan(va), nb = std::isnan(vb);
  if (na != nb) return nb;  // the non-NaN one ranks first
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
  ASSERT_EQ(mismatches, 0) << "row " << row << " (len " << len << ", k " << k << "): first sorted mismatch at " << first
                           << ": got " << got[size_t(first)] << ", expected " << expected[size_t(first)];
}

// scores [rows, width], lengths / row starts, out [rows, k]; checks every row against brute force.
struct TopkProblem {
  int64_t rows, width, k;
  HostTensor scores, lengths, starts, out;
  bool use_starts = false;
  TopkProblem(int64_t rows_, int64_t width_, int64_t k_)
      : rows(rows_),
        width(width_),
        k(k_),
        scores(DType::f32, {rows_, width_}),
        lengths(DType::i32, {rows_}),
        starts(DType::i32, {rows_}),
        out(DType::i32, {rows_, k_}) {
    for (int64_t r = 0; r < rows; ++r) lengths.ptr<int32_t>()[r] = int32_t(width);
  }
  float* row(int64_t r) { return scores.ptr<float>() + r * width; }
  int32_t len(int64_t r) { return lengths.ptr<int32_t>()[r]; }
  int32_t start(int64_t r) { return use_starts ? starts.ptr<int32_t>()[r] : 0; }
  TopkArgs args() {
    TopkArgs a{.scores = scores.view, .lengths = lengths.view, .out = out.view, .topk = int(k)};
    if (use_starts) a.row_starts = starts.view;
    return a;
  }
  void run() { run(args()); }
  void run(const TopkArgs& a) {
    poison_i32(out);
    topk(a);
  }
  // Without a transform the positions come out ascending (the CPU kernel's documented order).
  void expect_ascending() {
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t* o = out.ptr<int32_t>() + r * k;
      for (int64_t c = 1; c < std::min<int64_t>(k, len(r)); ++c) ASSERT_LT(o[c - 1], o[c]) << "row " << r;
    }
  }
  // value_of(row, j): what the transform emits for position j (identity by default).
  void check(const std::function<int32_t(int64_t, int64_t)>& value_of = {}) {
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<int32_t> expected;
      for (int64_t j : reference_topk(row(r) + start(r), len(r), k))
        expected.push_back(value_of ? value_of(r, j) : int32_t(j));
      expect_topk_row(out.ptr<int32_t>() + r * k, k, len(r), expected, r);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
};

inline void fill_normal(float* s, int64_t n, std::mt19937_64& g) {
  std::normal_distribution<float> d(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) s[i] = d(g);
}

template <typename Fn>
inline void expect_error_naming(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error, expected one naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace attnserve::test
